"""``tooldeck serve mcp``: the command this distribution adds to the ``tooldeck`` command line.

Loaded with the plugin on every ``tooldeck`` run, so it only builds the parser: the server
module (and, through it, the MCP SDK) is imported when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_serve_mcp(subparsers: Any) -> None:
    """Add ``mcp`` to the core's ``serve`` group (``subparsers.group("serve")``)."""
    m = subparsers.group("serve").add_parser(
        "mcp", help="as an MCP server (stdio or streamable HTTP)"
    )
    m.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (default) or streamable HTTP",
    )
    m.add_argument("--host", default="127.0.0.1", help="HTTP: address to bind")
    m.add_argument("--port", type=int, default=8765, help="HTTP: port (0: any free one)")
    m.add_argument("--workdir", default=None, help="the sessions' working directory")
    m.add_argument(
        "--grant", action="append", metavar="CATEGORY", help="grant a category to every session"
    )
    m.add_argument(
        "--no-auth",
        action="store_true",
        help="HTTP: no bearer token (any local process could run tools; loopback only)",
    )
    # Over stdio the protocol is written to tooldeck.cli.protocol_stdout(), never to fd 1.
    m.set_defaults(func=_run, protocol_stdout=True)


def _run(args: argparse.Namespace) -> int:
    # Imported here: the MCP SDK costs about 0.6 s to import, and only `serve mcp` needs it.
    try:
        from .server import serve_mcp_cli
    except ImportError as exc:
        sys.stderr.write(
            f"tooldeck serve mcp needs the MCP SDK ({exc.name or exc}): "
            "pip install tooldeck-mcp\n"
        )
        return 2
    return serve_mcp_cli(
        args.transport,
        args.host,
        args.port,
        workdir=args.workdir,
        grants=args.grant,
        no_auth=args.no_auth,
    )
