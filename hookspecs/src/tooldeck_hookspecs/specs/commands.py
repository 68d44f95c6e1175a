"""Command line: plugins add ``tooldeck`` subcommands (as simonw/llm's ``register_commands``)."""

from __future__ import annotations

from typing import Any

from .._markers import hookspec

# -------------------------------------------------------------------------
# Commands
# -------------------------------------------------------------------------


@hookspec
def tooldeck_register_commands(subparsers: Any) -> None:
    """Add subcommands to the ``tooldeck`` command line.

    Called once per ``tooldeck`` run, before the arguments are parsed, for every loaded plugin
    that implements it (a plugin disabled in the configuration or ``TOOLDECK_DISABLE_PLUGINS``
    is not loaded and adds nothing). The plugins are loaded once: the deck the command then
    builds reuses them. An entry-point plugin whose implementation raises is left out of the
    command line and listed as FAILED (stage ``commands``) by ``tooldeck plugins``; two plugins
    adding the same command name stop the program with an error naming both.

    :param subparsers: the ``tooldeck`` parser's sub-parsers (``argparse`` ``_SubParsersAction``):
        call ``subparsers.add_parser(name, help=...)``, add arguments and set the handler with
        ``set_defaults(func=handler)``; ``handler(args)`` returns the exit code. A handler that
        needs the deck calls ``tooldeck.cli.load_deck()``.

    Example::

        @hookimpl
        def tooldeck_register_commands(subparsers):
            p = subparsers.add_parser("hello", help="say hello")
            p.add_argument("name")
            p.set_defaults(func=lambda args: print(f"hello {args.name}") or 0)
    """
