"""The ``tooldeck`` command line.

Exit codes: 0 success, 1 a tool error (the ToolResult says which), 2 a usage or start-up error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import trio

from tooldeck_hookspecs import TooldeckError

from .adapters import FORMATS, converter

__all__ = ["main"]


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


def _load_deck() -> Any:
    from ._deck import Deck

    return Deck.load()


def _cmd_plugins(args: argparse.Namespace) -> int:
    deck = _load_deck()
    infos = deck.plugin_infos()
    if args.json:
        _print_json(
            {
                "plugins": [converter.unstructure(i) for i in infos],
                "providers": deck.providers,
                "config": deck.config.source,
            }
        )
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="tooldeck plugins")
    for column in ("name", "distribution", "version", "hooks"):
        table.add_column(column)
    for info in infos:
        table.add_row(
            info.name,
            info.distribution or f"({info.source})",
            info.version or "",
            ", ".join(h.removeprefix("tooldeck_") for h in info.hooks),
        )
    console = Console()
    console.print(table)
    console.print("stages: " + ", ".join(f"{k}={v or 'none'}" for k, v in deck.providers.items()))
    return 0


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
        table.add_row(t.name, t.category, str(t.security.level), t.plugin or "", t.description)
    Console().print(table)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from .adapters import export_tools

    deck = _load_deck()
    _print_json(export_tools(deck.catalog, args.format))
    return 0


async def _terminal_confirm(request: Any) -> bool | str:
    def ask() -> str:
        sys.stderr.write(
            f"\n{request.tool.name} wants to run with {json.dumps(dict(request.call.arguments))}\n"
            + "".join(f"  - {r}\n" for r in request.reasons)
            + "Allow? [y]es / [N]o / [a]lways for this tool: "
        )
        sys.stderr.flush()
        return sys.stdin.readline().strip().lower()

    answer = await trio.to_thread.run_sync(ask)
    if answer in {"a", "always"}:
        return "always"
    return answer in {"y", "yes"}


def _cmd_call(args: argparse.Namespace) -> int:
    try:
        arguments = json.loads(args.args_json) if args.args_json else {}
    except json.JSONDecodeError as exc:
        sys.stderr.write(f"tooldeck call: ARGS_JSON is not valid JSON: {exc}\n")
        return 2
    if not isinstance(arguments, dict):
        sys.stderr.write("tooldeck call: ARGS_JSON must be a JSON object\n")
        return 2
    deck = _load_deck()

    async def run() -> Any:
        async def approve_all(_request: Any) -> bool:
            return True

        confirm = approve_all if args.yes else (_terminal_confirm if sys.stdin.isatty() else None)
        async with deck:
            session = deck.session(
                session_id=args.session,
                workdir=args.workdir,
                grants=args.grant or None,
                confirm=confirm,
            )
            return await session.call(args.name, arguments)

    result = trio.run(run)
    _print_json(converter.unstructure(result))
    return 0 if result.success else 1


def _cmd_select(args: argparse.Namespace) -> int:
    deck = _load_deck()

    async def run() -> Any:
        async with deck:
            session = deck.session(workdir=args.workdir)
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
            }
        )
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"hand for: {hand.query[:80]}")
    for column in ("#", "tool", "score", "category", "why"):
        table.add_column(column)
    for i, t in enumerate(hand.tools, 1):
        table.add_row(
            str(i),
            t.name,
            f"{hand.scores.get(t.name, 0):.3f}",
            t.category,
            ", ".join(hand.reasons.get(t.name, ())),
        )
    console = Console()
    console.print(table)
    for e in hand.exclusions:
        console.print(f"[red]removed[/red] {e.name}: {e.reason} (rule from plugin {e.plugin})")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from ._eval import run_eval_cli

    return int(run_eval_cli(args))


def _cmd_bench(args: argparse.Namespace) -> int:
    from ._bench import run_bench_cli

    return int(run_bench_cli(args))


def _cmd_serve(args: argparse.Namespace) -> int:
    # Imported here: the MCP SDK costs about 0.6 s to import, and only `serve` needs it.
    try:
        from .mcp_server import serve_mcp_cli
    except ImportError as exc:
        sys.stderr.write(
            f"tooldeck serve mcp needs the MCP SDK ({exc.name or exc}): "
            'pip install "tooldeck[mcp]"\n'
        )
        return 2

    return serve_mcp_cli(
        args.transport, args.host, args.port, workdir=args.workdir, grants=args.grant
    )


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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tooldeck`` command."""
    parser = argparse.ArgumentParser(
        prog="tooldeck", description="The tools layer of an LLM agent."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plugins", help="loaded plugins with distribution, version, hooks")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_plugins)

    p = sub.add_parser("tools", help="registered tools")
    p.add_argument("--json", action="store_true")
    p.add_argument("--category")
    p.set_defaults(func=_cmd_tools)

    p = sub.add_parser("export", help="tool schemas for a provider, as a JSON array")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("call", help="run one tool call through the pipeline")
    p.add_argument("name")
    p.add_argument("args_json", nargs="?", default=None, metavar="ARGS_JSON")
    p.add_argument("--workdir", default=None)
    p.add_argument("--session", default=None)
    p.add_argument("--grant", action="append", metavar="CATEGORY")
    p.add_argument("--yes", action="store_true", help="approve calls that need confirmation")
    p.set_defaults(func=_cmd_call)

    p = sub.add_parser("select", help="the hand of tools for a task")
    p.add_argument("query")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_select)

    p = sub.add_parser("eval", help="measure retrieval on a dataset")
    esub = p.add_subparsers(dest="what", required=True)
    e = esub.add_parser("retrieval", help="R@k, NDCG@10, complete@15 and latency on a dataset")
    e.add_argument("dataset")
    e.add_argument("--limit", type=int, default=15)
    e.add_argument("--queries", type=int, default=None)
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=_cmd_eval)

    p = sub.add_parser("bench", help="benchmarks, side by side with the alternatives, as ratios")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("serve", help="serve the deck to other programs")
    ssub = p.add_subparsers(dest="protocol", required=True)
    m = ssub.add_parser("mcp", help="as an MCP server (stdio or streamable HTTP)")
    m.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    m.add_argument("--host", default="127.0.0.1", help="HTTP: address to bind")
    m.add_argument("--port", type=int, default=8765, help="HTTP: port (0: any free one)")
    m.add_argument("--workdir", default=None, help="the sessions' working directory")
    m.add_argument(
        "--grant", action="append", metavar="CATEGORY", help="grant a category to every session"
    )
    m.set_defaults(func=_cmd_serve)

    p = sub.add_parser("config", help="the configuration file in use, and trusting it")
    csub = p.add_subparsers(dest="action", required=True)
    c = csub.add_parser("show", help="which file applies, whether it is trusted, what was ignored")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_cmd_config_show)
    c = csub.add_parser(
        "trust", help="trust a configuration file's current content (found one by default)"
    )
    c.add_argument("file", nargs="?", default=None, help="the file (default: the one found)")
    c.set_defaults(func=_cmd_config_trust)
    c = csub.add_parser("untrust", help="forget a trusted configuration file")
    c.add_argument("file", nargs="?", default=None, help="the file (default: the one found)")
    c.set_defaults(func=_cmd_config_untrust)

    p = sub.add_parser("demo", help="a one-minute tour of what tooldeck does")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tooldeck`` command."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except TooldeckError as exc:
        sys.stderr.write(f"tooldeck: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
