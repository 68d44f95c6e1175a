"""The ``tooldeck`` command line.

Exit codes: 0 success, 1 a tool error (the ToolResult says which), 2 a usage or start-up error
(one line per problem, never a traceback). Output is written with ``backslashreplace``: a file
name that is not valid UTF-8 is shown escaped instead of crashing the command after its work is
done.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import json
import logging
import os
import stat
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import trio

from tooldeck_hookspecs import TooldeckError

from .adapters import FORMATS, converter

__all__ = ["main", "load_deck", "protocol_stdout"]


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


#: Set by the global ``--strict`` option: any failing plugin stops the command.
_STRICT = False


#: The plugin manager loaded to add the plugins' commands (with the configuration it obeyed):
#: the deck a command builds reuses it, so that entry points are scanned and imported once.
_LOADED: tuple[Any, Any] | None = None

#: Commands that never build a deck: no plugin is loaded for them.
_NO_PLUGINS = frozenset({"config"})


def _load_deck() -> Any:
    from ._deck import Deck

    if _LOADED is not None:
        config, manager = _LOADED
        return Deck.load(config, strict=_STRICT, plugin_manager=manager)
    return Deck.load(strict=_STRICT)


def load_deck() -> Any:
    """The deck of this ``tooldeck`` run, for a plugin's command handler (plugins loaded once)."""
    return _load_deck()


#: The real standard output, kept aside while a command speaks its protocol there.
_PROTOCOL_STDOUT: int | None = None


def protocol_stdout() -> int | None:
    """The real standard output, for a command whose standard output is its protocol; None
    for every other command (their output is left alone).

    ``tooldeck serve mcp`` over stdio owns standard output: one stray line there (a plugin
    printing at import, in a register hook, in a tool) corrupts the client's JSON-RPC stream.
    For that command the CLI points file descriptor 1 and ``sys.stdout`` at standard error
    before any plugin is imported, and keeps the real standard output as this private
    descriptor (close-on-exec: no tool's subprocess inherits it) for the command's protocol
    messages and nothing else. Both are restored when the command returns, or before it runs
    when its parser does not declare that it writes here (``set_defaults(protocol_stdout=True)``,
    as tooldeck-mcp's ``serve mcp`` does; an older plugin's command gets its stdout back).
    """
    return _PROTOCOL_STDOUT


def _speaks_on_stdout(argv: Sequence[str]) -> bool:
    """Whether ``argv`` runs ``serve mcp`` over stdio (its default transport); its help, which
    is printed, does not count."""
    words = [a for a in argv if not a.startswith("-")]
    if words[:2] != ["serve", "mcp"] or "-h" in argv or "--help" in argv:
        return False
    transport = "stdio"
    for i, arg in enumerate(argv):
        name, equals, value = arg.partition("=")
        # argparse takes an unambiguous prefix of an option too (`--trans http`).
        if len(name) >= 3 and "--transport".startswith(name):
            transport = value if equals else (argv[i + 1] if i + 1 < len(argv) else "")
    return transport == "stdio"


@contextlib.contextmanager
def _stdout_for_protocol(active: bool) -> Iterator[Any]:
    """While active: fd 1 and ``sys.stdout`` point at stderr, the real standard output is
    :func:`protocol_stdout`'s (see there). Yields a function that restores both early (for a
    command that turns out not to speak on stdout: an older plugin's)."""
    global _PROTOCOL_STDOUT
    if not active:
        yield lambda: None
        return
    try:
        import fcntl

        if sys.stdout is not None:
            sys.stdout.flush()
        private = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    except (ImportError, OSError, ValueError):  # no descriptors to move (or no stdout)
        yield lambda: None
        return
    try:
        os.dup2(2, 1)
    except OSError:  # no stderr either: what plugins print goes nowhere
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    saved = sys.stdout
    sys.stdout = sys.stderr
    _PROTOCOL_STDOUT = private

    def restore() -> None:
        global _PROTOCOL_STDOUT
        if _PROTOCOL_STDOUT is None:
            return
        _PROTOCOL_STDOUT = None
        if sys.stdout is sys.stderr:
            sys.stdout = saved
        with contextlib.suppress(OSError):
            os.dup2(private, 1)
        # `private` stays open: a thread the command abandoned may still be writing to it,
        # and a closed number can be reused by another file.

    try:
        yield restore
    finally:
        restore()


def _add_plugin_commands(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Load the plugins once and let them add subcommands (``tooldeck_register_commands``)."""
    global _LOADED
    first = next((a for a in argv if not a.startswith("-")), None)
    if first in _NO_PLUGINS or "--version" in argv:
        return
    core = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if first in core.choices and first not in _PLUGIN_GROUPS and ("-h" in argv or "--help" in argv):
        return  # a core command's own help needs no plugin
    from ._config import load_config
    from ._plugins import TooldeckPluginManager, import_timeout

    try:
        config = load_config()
    except TooldeckError:
        # A broken configuration: the command reports it; the core's commands still parse.
        return
    manager = TooldeckPluginManager()
    manager.load_entry_points(
        config.allows, strict="--strict" in argv,
        import_timeout_s=import_timeout(config.settings),
    )
    manager.register_commands(core)
    _LOADED = (config, manager)


def _cmd_plugins(args: argparse.Namespace) -> int:
    import attrs

    from tooldeck_hookspecs import PluginLoadError, StageMissingError

    missing: str | None = None
    try:
        deck = _load_deck()
    except (StageMissingError, PluginLoadError) as exc:
        # The diagnostic command of an incomplete install: it must still say what is installed
        # (and what failed) rather than only that a stage or a required plugin is missing.
        if _LOADED is None:
            raise
        missing = str(exc)
        config, manager = _LOADED
        infos, failed, warnings = manager.plugin_infos(), dict(manager.failed), []
        providers: Mapping[str, Any] = {}
        source = config.source
    else:
        infos = deck.plugin_infos()
        failed = getattr(deck, "failed_plugins", {})
        warnings = list(getattr(deck, "config_warnings", ()))
        providers, source = deck.providers, deck.config.source
    status = 0 if missing is None else 1
    if args.json:
        _print_json(
            {
                "plugins": [converter.unstructure(i) for i in infos],
                "failed": [attrs.asdict(f) for f in failed.values()],
                "providers": providers,
                "config": source,
                "config_warnings": warnings,
                "missing_stage": missing,
            }
        )
        return status
    from rich.console import Console
    from rich.table import Table

    table = Table(title="tooldeck plugins")
    for column in ("name", "distribution", "version", "hooks"):
        table.add_column(column)
    for info in infos:
        hooks = ", ".join(h.removeprefix("tooldeck_") for h in info.hooks)
        if info.error:
            hooks = f"[red]FAILED ({failed[info.name].stage if info.name in failed else 'error'})"
            hooks += f": {_plain(info.error)}[/red]"
        table.add_row(_plain(info.name), _plain(info.distribution or f"({info.source})"),
                      _plain(info.version or ""), hooks)
    console = Console()
    console.print(table)
    if missing is None:
        console.print("stages: " + _plain(", ".join(f"{k}={v or 'none'}"
                                                     for k, v in providers.items())))
    else:
        console.print(f"[red]{_plain(missing)}[/red]")
    for line in warnings:
        console.print(f"[yellow]{_plain(line)}[/yellow]")
    return status


def _cmd_tools(args: argparse.Namespace) -> int:
    deck = _load_deck()
    tools = list(deck.catalog)
    if args.category:
        tools = [t for t in tools if t.category == args.category]
    if args.json:
        _print_json([converter.unstructure(t) for t in tools])
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(tools)} tools")
    for column in ("name", "category", "level", "plugin", "description"):
        table.add_column(column)
    for t in tools:
        table.add_row(*(_plain(v) for v in (t.name, t.category, str(t.security.level),
                                              t.plugin or "", t.description)))
    Console().print(table)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from .adapters import export_tools

    deck = _load_deck()
    _print_json(export_tools(deck.catalog, args.format))
    return 0


def _plain(text: object) -> str:
    """``text`` for rich: its control characters escaped (:func:`_shown`) and its square
    brackets too, so that a tool's description, the task or a plugin's reason is never read
    as markup (``[/bold]`` raised MarkupError, ``[link=...]`` made a link)."""
    from rich.markup import escape

    return escape(_shown(text))


def _shown(text: object) -> str:
    """``text`` as the terminal should show it: every character that is not printable (a
    carriage return, an ANSI escape, a right-to-left override) escaped, so that what a plugin
    or the model wrote cannot redraw the prompt the user is answering."""
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text)
    )


async def _terminal_confirm(request: Any) -> bool | str:
    def ask() -> str:
        # json.dumps escapes the arguments' control and non-ASCII characters on its own.
        arguments = json.dumps(dict(request.call.arguments), default=repr)
        sys.stderr.write(
            f"\n{_shown(request.tool.name)} wants to run with {arguments}\n"
            + "".join(f"  - {_shown(r)}\n" for r in request.reasons)
            + "Allow? [y]es / [N]o / [a]lways for this tool: "
        )
        sys.stderr.flush()
        return sys.stdin.readline().strip().lower()

    try:
        # Abandoned on cancellation: the deck's confirm timeout (and Session.cancel) must end
        # the wait; the reader thread is left blocked on stdin until the process exits.
        answer = await trio.to_thread.run_sync(ask, abandon_on_cancel=True)
    except trio.Cancelled:
        sys.stderr.write("\n(no answer in time: the call was not approved)\n")
        sys.stderr.flush()
        raise
    if answer in {"a", "always"}:
        return "always"
    return answer in {"y", "yes"}


def _read_arguments(spec: str | None) -> Any:
    """``ARGS_JSON`` as given: inline JSON, ``-`` for standard input, ``@FILE`` for a file."""
    if not spec:
        return {}
    if spec == "-":
        text = sys.stdin.read()
    elif spec.startswith("@"):
        text = _read_arguments_file(spec[1:])
    else:
        text = spec
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _UsageError(f"ARGS_JSON is not valid JSON: {exc}") from None
    except RecursionError:
        # json's C scanner recurses once per nesting level: 10k levels exhaust the stack.
        raise _UsageError("ARGS_JSON is nested too deeply") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise _UsageError(f"ARGS_JSON is not usable JSON: {exc}") from None


#: The most ``@FILE`` arguments read (the core refuses far smaller arguments anyway).
_ARGS_FILE_MAX_BYTES = 256 * 1024 * 1024


def _read_arguments_file(path: str) -> str:
    """``@FILE``'s text: a regular file of at most :data:`_ARGS_FILE_MAX_BYTES` (not a FIFO
    that never ends, nor ``/dev/zero``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _UsageError(f"ARGS_JSON: cannot read {path!r}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _UsageError(f"ARGS_JSON: {path!r} is not a regular file")
        if info.st_size > _ARGS_FILE_MAX_BYTES:
            raise _UsageError(
                f"ARGS_JSON: {path!r} is {info.st_size} bytes, more than the "
                f"{_ARGS_FILE_MAX_BYTES} read"
            )
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(_ARGS_FILE_MAX_BYTES + 1)
    except OSError as exc:
        raise _UsageError(f"ARGS_JSON: cannot read {path!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > _ARGS_FILE_MAX_BYTES:
        raise _UsageError(f"ARGS_JSON: {path!r} is larger than {_ARGS_FILE_MAX_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _UsageError(f"ARGS_JSON: cannot read {path!r}: {exc}") from None


class _UsageError(Exception):
    """A mistake in the command's own arguments: one line on stderr, exit 2."""


def _cmd_call(args: argparse.Namespace) -> int:
    try:
        arguments = _read_arguments(args.args_json)
    except _UsageError as exc:
        sys.stderr.write(f"tooldeck call: {exc}\n")
        return 2
    if not isinstance(arguments, dict):
        sys.stderr.write("tooldeck call: ARGS_JSON must be a JSON object\n")
        return 2
    deck = _load_deck()

    async def run() -> Any:
        async def approve_all(_request: Any) -> bool:
            return True

        confirm = approve_all if args.yes else (_terminal_confirm if sys.stdin.isatty() else None)
        # The session is closed, not dropped: session.closed observers release what they
        # hold for it (docs/hooks.md), as for any other owner of a session.
        async with deck, deck.session(
            session_id=args.session,
            workdir=args.workdir,
            grants=args.grant or None,
            confirm=confirm,
        ) as session:
            return await session.call(args.name, arguments)

    result = trio.run(run)
    _print_json(converter.unstructure(result))
    return 0 if result.success else 1


def _cmd_select(args: argparse.Namespace) -> int:
    deck = _load_deck()

    async def run() -> Any:
        async with deck, deck.session(workdir=args.workdir) as session:
            return await session.select(args.query, limit=args.limit)

    hand = trio.run(run)
    if args.json:
        _print_json(
            {
                "query": hand.query,
                "tools": [
                    {
                        "name": t.name,
                        "score": hand.scores.get(t.name),
                        "category": t.category,
                        "reasons": list(hand.reasons.get(t.name, ())),
                    }
                    for t in hand.tools
                ],
                "excluded": [converter.unstructure(e) for e in hand.exclusions],
                "candidates": hand.candidates,
                "problems": list(hand.problems),
            }
        )
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"hand for: {_plain(hand.query[:80])}")
    for column in ("#", "tool", "score", "category", "why"):
        table.add_column(column)
    for i, t in enumerate(hand.tools, 1):
        table.add_row(
            str(i),
            _plain(t.name),
            f"{hand.scores.get(t.name, 0):.3f}",
            _plain(t.category),
            _plain(", ".join(hand.reasons.get(t.name, ()))),
        )
    console = Console()
    console.print(table)
    for e in hand.exclusions:
        console.print(f"[red]removed[/red] {_plain(e.name)}: {_plain(e.reason)} "
                      f"(rule from plugin {_plain(e.plugin)})", highlight=False)
    for problem in hand.problems:
        console.print(f"[yellow]problem[/yellow] {_plain(problem)}", highlight=False)
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from ._eval import run_eval_cli

    return int(run_eval_cli(args))


def _cmd_bench(args: argparse.Namespace) -> int:
    from ._bench import run_bench_cli

    return int(run_bench_cli(args))


#: Subcommands that come from a plugin, with the distribution that adds them: where it is not
#: installed (or did not load) the command still parses and says what to do.
_PLUGIN_COMMANDS: dict[tuple[str, str], tuple[str, str]] = {
    ("serve", "mcp"): ("mcp", "tooldeck-mcp"),
}

#: Core command groups that plugins add subcommands to: their help needs the plugins loaded.
_PLUGIN_GROUPS = frozenset(group for group, _name in _PLUGIN_COMMANDS)


def _subparsers_of(parser: argparse.ArgumentParser) -> Any:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _add_missing_commands(parser: argparse.ArgumentParser) -> None:
    """Stand-ins for the known plugin commands no loaded plugin added (see ``_PLUGIN_COMMANDS``)."""
    core = _subparsers_of(parser)
    for (group, name), (entry_point, distribution) in _PLUGIN_COMMANDS.items():
        sub = _subparsers_of(core.choices[group])
        if name in sub.choices:
            continue
        # Whatever follows (options included: no prefix character matches) is taken as it
        # is, so that `serve mcp --transport http` gets the explanation, not a usage error.
        stand_in = sub.add_parser(
            name,
            help=f"(not available: needs {distribution}, not loaded)",
            add_help=False,
            prefix_chars="\0",
        )
        stand_in.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        stand_in.set_defaults(
            func=lambda args, g=group, n=name, e=entry_point, d=distribution: _missing_command(
                f"{g} {n}", e, d
            )
        )


def _missing_command(command: str, entry_point: str, distribution: str) -> int:
    """``tooldeck COMMAND`` whose plugin is missing: say why, and what to install (exit 2)."""
    from importlib.metadata import entry_points

    if entry_point not in {ep.name for ep in entry_points(group="tooldeck")}:
        sys.stderr.write(
            f"tooldeck {command} needs {distribution}: pip install {distribution} "
            f'(or pip install "tooldeck[{entry_point}]")\n'
        )
        return 2
    # Installed, yet the command is not there: a broken configuration (raised here, printed
    # by main), a disabled plugin or one that failed to load.
    deck = _load_deck()
    failed = getattr(deck, "failed_plugins", {}).get(entry_point)
    why = (
        f"it failed to load: {failed.error}"
        if failed is not None
        else "it is disabled (configuration or TOOLDECK_DISABLE_PLUGINS)"
    )
    sys.stderr.write(
        f"tooldeck {command} comes from plugin {entry_point!r} ({distribution}), and {why}\n"
    )
    return 2


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo_cli

    return int(run_demo_cli(args))


def _config_target(file: str | None) -> str:
    from pathlib import Path

    from ._config import find_config_file

    if file is not None:
        return file
    found = os.environ.get("TOOLDECK_CONFIG") or find_config_file(Path.cwd().resolve())
    if found is None:
        raise TooldeckError("no tooldeck.toml or pyproject.toml with [tool.tooldeck] found here")
    return str(found)


def _cmd_config_show(args: argparse.Namespace) -> int:
    from ._config import load_config, trust_store_path

    config = load_config()
    info = {
        "file": config.source,
        "trusted": config.trusted,
        "ignored": list(config.ignored),
        "trust_store": str(trust_store_path()),
    }
    if args.json:
        _print_json(info)
        return 0
    if config.source is None:
        sys.stdout.write("no configuration file: built-in defaults\n")
        return 0
    state = "trusted" if config.trusted else "NOT trusted (run `tooldeck config trust`)"
    sys.stdout.write(f"{config.source}: {state}\n")
    if config.ignored:
        sys.stdout.write(f"ignored until trusted: {', '.join(config.ignored)}\n")
    return 0


def _check_file(target: str, environ: Any) -> dict[str, Any]:
    """Validate everything one configuration file says (trusted or not); a report dict."""
    from ._config import Config, is_trusted, read_config_file
    from ._config_schema import (
        ConfigProblem,
        ConfigValidationError,
        validate_config,
    )
    from ._plugins import TooldeckPluginManager

    named = environ.get("TOOLDECK_CONFIG")
    explicit = bool(named) and os.path.realpath(named) == os.path.realpath(target)
    in_store = is_trusted(target, environ)
    report: dict[str, Any] = {
        "file": target,
        "trusted": explicit or in_store,
        "trust": "named by TOOLDECK_CONFIG" if explicit else ("trust store" if in_store else None),
        "problems": [],
        "notes": [],
    }
    try:
        table, prefix = read_config_file(target)
    except TooldeckError as exc:
        report["problems"].append(
            {"file": target, "table": "", "key": "", "message": str(exc), "severity": "error"}
        )
        report["lines"] = [str(exc)]
        return report
    config = Config.from_mapping(
        table, source=target, validate=False, table_prefix=prefix
    ).with_environment(environ)
    # Every installed plugin's schema, whatever the file enables: check the whole file.
    manager = TooldeckPluginManager()
    manager.load_entry_points(lambda _name: True, strict=False)
    manager.check_pending(strict=False)
    for failed in manager.failed.values():
        report["notes"].append(f"plugin {failed.name!r} did not load: {failed.error}")
    schemas, bugs = manager.config_schemas()
    report["notes"].extend(bugs)
    installed = manager.entry_point_names()
    problems: list[ConfigProblem] = validate_config(
        config, schemas=schemas, plugin_tables=installed, installed=installed
    )
    if not any(p.severity == "error" for p in problems):
        if report["trusted"]:
            # Registration-time checks ([tools.NAME] of a tool that does not exist, invalid
            # definitions). Only for a trusted file: loading runs what the file configures.
            from ._deck import Deck

            quiet = logging.getLogger("tooldeck")
            level = quiet.level
            # The warnings are this command's output: not a second time as log records.
            quiet.setLevel(logging.ERROR)
            try:
                deck = Deck.load(config, strict=_STRICT)
            except ConfigValidationError as exc:
                problems.extend(exc.details)
            except TooldeckError as exc:
                # A RegistrationError lists its problems; others are one message.
                lines = getattr(exc, "problems", None) or [" ".join(str(exc).split())]
                problems.extend(
                    ConfigProblem(file="", table="", key="", message=str(line)) for line in lines
                )
            else:
                problems.extend(
                    ConfigProblem(file="", table="", key="", message=w, severity="warning")
                    for w in getattr(deck, "config_warnings", ())
                    if w not in {str(p) for p in problems}
                )
            finally:
                quiet.setLevel(level)
        else:
            report["notes"].append(
                "tool names under [tools] are checked against the registered tools once the "
                "file is trusted"
            )
    problems.sort(key=lambda p: p.severity != "error")
    report["problems"] = [
        {
            "file": p.file,
            "table": p.table,
            "key": p.key,
            "message": p.message,
            "severity": p.severity,
        }
        for p in problems
    ]
    report["lines"] = [p.message if not p.file and not p.table else str(p) for p in problems]
    return report


def _cmd_config_check(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ._config import UNTRUSTED_KEYS, find_config_file

    environ = os.environ
    target = args.file or environ.get("TOOLDECK_CONFIG") or find_config_file(Path.cwd().resolve())
    if target is None:
        if args.json:
            _print_json({"file": None, "trusted": True, "problems": [], "notes": []})
        else:
            sys.stdout.write("no configuration file: built-in defaults, nothing to check\n")
        return 0
    target = str(target)
    if not os.path.isfile(target):
        sys.stderr.write(f"tooldeck config check: {target}: no such file\n")
        return 2
    report = _check_file(target, environ)
    lines = report.pop("lines")
    errors = sum(p["severity"] == "error" for p in report["problems"])
    warnings = len(report["problems"]) - errors
    failed = errors > 0 or (args.strict_check and warnings > 0)
    if args.json:
        _print_json({**report, "errors": errors, "warnings": warnings, "ok": not failed})
        return 2 if failed else 0
    if report["trusted"]:
        state = f"trusted ({report['trust']})"
    else:
        state = (
            "NOT trusted: where it is found by the search only "
            + " and ".join(sorted(UNTRUSTED_KEYS))
            + " of it apply (`tooldeck config trust` to trust it)"
        )
    out = [f"{target}: {state}", *lines]
    out.extend(f"note: {note}" for note in report["notes"])
    out.append(
        f"{errors} error(s), {warnings} warning(s)" if report["problems"] else "no problems found"
    )
    sys.stdout.write("\n".join(out) + "\n")
    return 2 if failed else 0


def _cmd_config_trust(args: argparse.Namespace) -> int:
    from ._config import trust_config, trust_store_path

    target = _config_target(args.file)
    digest = trust_config(target)
    sys.stdout.write(
        f"trusted {os.path.realpath(target)} (sha256 {digest[:16]}...) in {trust_store_path()}; "
        "any change to the file needs a new `tooldeck config trust`\n"
    )
    return 0


def _cmd_config_untrust(args: argparse.Namespace) -> int:
    from ._config import untrust_config

    target = _config_target(args.file)
    known = untrust_config(target)
    sys.stdout.write(f"{'forgot' if known else 'was not trusted:'} {os.path.realpath(target)}\n")
    return 0



def _positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1 (a hand of 0 tools is no hand)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value

def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tooldeck`` command."""
    parser = argparse.ArgumentParser(
        prog="tooldeck", description="The tools layer of an LLM agent."
    )
    parser.add_argument(
        "--version",
        action="version",
        version=_version_text(),
        help="show the versions of tooldeck and tooldeck-hookspecs, and exit",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail when any installed plugin fails to load (default: start without it, loudly)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plugins", help="loaded plugins with distribution, version, hooks")
    p.add_argument("--json", action="store_true", help="print JSON (failed plugins included)")
    p.set_defaults(func=_cmd_plugins)

    p = sub.add_parser("tools", help="registered tools")
    p.add_argument("--json", action="store_true", help="print the whole definitions as JSON")
    p.add_argument("--category", help="only the tools of this category")
    p.set_defaults(func=_cmd_tools)

    p = sub.add_parser("export", help="tool schemas for a provider, as a JSON array")
    p.add_argument(
        "--format", required=True, choices=FORMATS, help="the provider's tool schema format"
    )
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("call", help="run one tool call through the pipeline")
    p.add_argument("name", help="the tool's name")
    p.add_argument(
        "args_json",
        nargs="?",
        default=None,
        metavar="ARGS_JSON",
        help="the arguments as a JSON object; '-' reads them from standard input, '@FILE' "
        "from a file (default: {})",
    )
    p.add_argument("--workdir", default=None, help="the session's working directory")
    p.add_argument("--session", default=None, help="the session id (default: a new one)")
    p.add_argument(
        "--grant",
        action="append",
        metavar="CATEGORY",
        help="grant a tool category to the session (repeatable)",
    )
    p.add_argument("--yes", action="store_true", help="approve calls that need confirmation")
    p.set_defaults(func=_cmd_call)

    p = sub.add_parser("select", help="the hand of tools for a task")
    p.add_argument("query", help="the task, in words")
    p.add_argument(
        "--limit", type=_positive_int, default=None,
        help="tools dealt (default: [hand] limit, 15)",
    )
    p.add_argument("--workdir", default=None, help="the session's working directory")
    p.add_argument("--json", action="store_true", help="print JSON with scores and exclusions")
    p.set_defaults(func=_cmd_select)

    p = sub.add_parser("eval", help="measure retrieval on a dataset")
    esub = p.add_subparsers(dest="what", required=True)
    e = esub.add_parser("retrieval", help="R@k, NDCG@10, complete@15 and latency on a dataset")
    e.add_argument("dataset", help="the dataset's name or path")
    e.add_argument("--limit", type=_positive_int, default=15,
                   help="hand size to evaluate (default 15)")
    e.add_argument("--queries", type=_positive_int, default=None,
                   help="evaluate only the first N queries")
    e.add_argument(
        "--history",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="replay this fraction of the queries as use history, evaluate on the rest",
    )
    e.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="take the selection settings ([tool.tooldeck.faiss] ...) from FILE (default: "
        "TOOLDECK_CONFIG or the file found from here)",
    )
    e.add_argument("--json", action="store_true", help="print the figures as JSON")
    e.set_defaults(func=_cmd_eval)

    p = sub.add_parser("bench", help="benchmarks, side by side with the alternatives, as ratios")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("serve", help="serve the deck to other programs")
    # Each protocol comes from the plugin that speaks it (`serve mcp`: tooldeck-mcp).
    p.add_subparsers(dest="protocol", required=True)

    p = sub.add_parser("config", help="the configuration file in use, and trusting it")
    csub = p.add_subparsers(dest="action", required=True)
    c = csub.add_parser("show", help="which file applies, whether it is trusted, what was ignored")
    c.add_argument("--json", action="store_true", help="print JSON")
    c.set_defaults(func=_cmd_config_show)
    c = csub.add_parser(
        "check",
        help="validate the whole configuration file: every problem, one line each (exit 2 if any)",
    )
    c.add_argument("file", nargs="?", default=None, help="the file (default: the one found)")
    c.add_argument("--json", action="store_true", help="print the problems as JSON")
    c.add_argument(
        "--strict", dest="strict_check", action="store_true", help="warnings fail the check too"
    )
    c.set_defaults(func=_cmd_config_check)
    c = csub.add_parser(
        "trust", help="trust a configuration file's current content (found one by default)"
    )
    c.add_argument("file", nargs="?", default=None, help="the file (default: the one found)")
    c.set_defaults(func=_cmd_config_trust)
    c = csub.add_parser("untrust", help="forget a trusted configuration file")
    c.add_argument("file", nargs="?", default=None, help="the file (default: the one found)")
    c.set_defaults(func=_cmd_config_untrust)

    p = sub.add_parser("demo", help="a one-minute tour of what tooldeck does")
    p.add_argument("--json", action="store_true", help="print the tour's results as JSON")
    p.set_defaults(func=_cmd_demo)
    return parser


_LISTEN_ERRNOS = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES})


def _listen_failure(exc: BaseException) -> OSError | None:
    """The bind error inside ``exc`` (an OSError, or nested exception groups holding only one)."""
    if isinstance(exc, OSError):
        return exc if exc.errno in _LISTEN_ERRNOS else None
    if isinstance(exc, BaseExceptionGroup):
        found = [_listen_failure(inner) for inner in exc.exceptions]
        # Only when the bind error is the whole story: anything else keeps its traceback.
        if found and all(f is not None for f in found):
            return found[0]
    return None


def _version_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for dist in ("tooldeck", "tooldeck-hookspecs"):
        try:
            parts.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist} (not installed)")
    return ", ".join(parts)


def _safe_streams() -> None:
    # Names from the file system may not be UTF-8 (surrogate escapes): print them escaped
    # rather than raising UnicodeEncodeError after the work was done.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a stream that cannot change (already written to)
                pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tooldeck`` command.

    :param argv: the arguments (default: ``sys.argv[1:]``, as the ``tooldeck`` program).
    """
    if argv is None:
        try:
            return _main(None)
        finally:
            # The process ends right after this: move every object out of the collector's
            # reach, so that the interpreter's teardown does not traverse the whole heap
            # (measured: 0.5-0.9 s of a 1.5-3 s `tooldeck call` on a busy 2-core machine,
            # 0.05 s with it). Objects are still freed and finalizers and atexit still run.
            gc.freeze()
    return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    global _LOADED
    _LOADED = None  # main() may run more than once in a process (tests): load afresh
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _safe_streams()
    arguments = list(sys.argv[1:] if argv is None else argv)
    # Before any plugin is imported: nothing but the protocol reaches a protocol's stdout.
    with _stdout_for_protocol(_speaks_on_stdout(arguments)) as restore:
        return _run(argv, arguments, restore)


def _run(argv: Sequence[str] | None, arguments: list[str], restore: Any) -> int:
    global _STRICT
    parser = build_parser()
    try:
        _add_plugin_commands(parser, arguments)
    except TooldeckError as exc:
        for line in str(exc).splitlines():
            sys.stderr.write(f"tooldeck: {line}\n")
        return 2
    _add_missing_commands(parser)
    args = parser.parse_args(argv)
    if not getattr(args, "protocol_stdout", False):
        # The handler does not take its output from protocol_stdout() (a plugin older than
        # it): it gets its standard output back, as before.
        restore()
    _STRICT = bool(args.strict)
    try:
        return int(args.func(args))
    except TooldeckError as exc:
        problems = getattr(exc, "problems", None)
        if problems:
            # One line per problem (a ConfigValidationError or RegistrationError lists them).
            sys.stderr.write(f"tooldeck: {str(exc).splitlines()[0]}\n")
            sys.stderr.write("".join(f"tooldeck: {line}\n" for line in problems))
        else:
            sys.stderr.write(f"tooldeck: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `tooldeck tools --json | head`: the reader left; not an error of ours. (Before the
        # OSError clause below, which would catch it first.)
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # replaces the closed stream for interpreter exit
        return 0
    except (OSError, BaseExceptionGroup) as exc:
        # A server that cannot listen (busy port, address not ours, privileged port) is a
        # start-up error: one line, not trio's and hypercorn's nested exception groups.
        failure = _listen_failure(exc) if hasattr(args, "port") else None
        if failure is None:
            if isinstance(exc, OSError) and exc.errno is not None:
                # Writing our own output failed (a full disk, /dev/full): one line, exit 2.
                sys.stderr.write(f"tooldeck: {exc.strerror or exc}\n")
                return 2
            raise
        where = f"{getattr(args, 'host', '')}:{args.port}"
        command = " ".join(filter(None, (args.command, getattr(args, "protocol", None))))
        sys.stderr.write(
            f"tooldeck {command}: cannot listen on {where}: {failure.strerror or failure}"
            " (pick another --port, or 0 for any free one)\n"
        )
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
