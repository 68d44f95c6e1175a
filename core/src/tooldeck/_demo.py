"""``tooldeck demo``: a one-minute tour of the mission on embedded defaults.

Each step runs the real pipeline with the installed plugins; a step whose plugin is not installed
says so instead of pretending.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from tooldeck_hookspecs import SecurityConfig, ToolDefinition, tool

from ._config import Config
from ._deck import Deck
from ._plugins import TooldeckPluginManager
from .adapters import converter
from .testing import tools_plugin

__all__ = ["run_demo", "run_demo_cli"]


@tool(
    category="demo",
    execution={"cacheable": True, "cache_ttl_s": 60},
    security={"rate_limit": {"max_calls": 3, "window_s": 60}},
)
def exchange_rate(base: str, quote: str) -> dict[str, Any]:
    """Look up the exchange rate between two currencies.

    Args:
        base: ISO code of the currency to convert from, e.g. EUR
        quote: ISO code of the currency to convert to, e.g. USD
    """
    time.sleep(0.2)  # a slow upstream API: what the cache saves
    return {"base": base, "quote": quote, "rate": 1.0842}


def allocate_memory(megabytes: int) -> int:
    """Allocate memory in the sandbox (the demo's runaway tool)."""
    block = bytearray(megabytes * 1024 * 1024)
    return len(block)


def _demo_tools() -> list[Any]:
    memory_hog = ToolDefinition(
        name="allocate_memory",
        description="Allocate a block of memory (a deliberately greedy demo tool).",
        category="code",
        parameters={
            "type": "object",
            "properties": {"megabytes": {"type": "integer", "minimum": 1}},
            "required": ["megabytes"],
        },
        security=SecurityConfig(level="safe", sandbox=True),
        execute=allocate_memory,
        entrypoint="tooldeck._demo:allocate_memory",
        call_style="kwargs",
    )
    return [exchange_rate, memory_hog]


def _catalog_tools() -> list[ToolDefinition]:
    """The embedded demo catalog (a few hundred realistic tools, no executables)."""
    from ._catalog_data import load_demo_catalog

    tools: list[ToolDefinition] = load_demo_catalog()
    return tools


class _Printer:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.steps: list[dict[str, Any]] = []
        if not as_json:
            from rich.console import Console

            self.console = Console()

    def step(
        self, title: str, detail: dict[str, Any], lines: list[Any], tables: Sequence[Any] = ()
    ) -> None:
        self.steps.append({"step": title, **detail})
        if not self.as_json:
            self.console.rule(f"[bold]{title}")
            for line in lines:
                self.console.print(line, highlight=False)
            for table in tables:
                self.console.print(table)


def _table(title: str, *columns: str) -> Any:
    """A rich table whose cells wrap (fold) rather than cut: no tool name or outcome is lost."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", expand=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


#: How many of a hand's tools the demo's table lists (the JSON has them all).
_SHOWN = 6


def _result_line(result: Any) -> str:
    if result.success:
        return f"[green]ok[/green] {json.dumps(result.data, default=str)[:160]}"
    error = result.error
    # The whole message: the console wraps it; a cut would hide what went wrong.
    return f"[red]{error.code}[/red] {error.message}\n  suggestion: {error.suggestion}"


async def _tour(out: _Printer, workdir: Path) -> None:
    catalog_tools: list[ToolDefinition] = []
    try:
        catalog_tools = _catalog_tools()
    except ImportError:
        pass
    deck = Deck.load(
        Config.from_mapping({}),
        plugins=[
            tools_plugin(_demo_tools(), name="demo"),
            tools_plugin(catalog_tools, name="demo-catalog"),
        ],
    )
    async with deck:
        infos = deck.plugin_infos()
        out.step(
            "1. plugins and tools",
            {
                "plugins": [i.name for i in infos],
                "tools": len(deck.catalog),
                "providers": deck.providers,
            },
            [
                f"{len(infos)} plugins: " + ", ".join(i.name for i in infos),
                f"{len(deck.catalog)} tools registered in "
                f"{len(deck.catalog.categories())} categories",
                "stages: " + ", ".join(f"{k}={v}" for k, v in deck.providers.items()),
            ],
        )
        session = deck.session(workdir=workdir, grants={"filesystem"})

        if deck.retriever is not None:
            tasks = [
                "read the config file in my project and list the folder",
                "what is the exchange rate from euros to dollars?",
                "book a table for four at an italian restaurant tomorrow evening",
                # three intents in one sentence: each gets its own tool near the top
                "check the weather in Paris, convert 50 euros to dollars and email it to Ann",
            ]
            from .adapters import export_tools

            all_chars = len(json.dumps(export_tools(deck.catalog, "openai")))
            counter, label = _token_counter(deck.plugins)
            all_tokens = counter(json.dumps(export_tools(deck.catalog, "openai")))
            hands = []
            lines = []
            tables = []
            build_s = await deck.ensure_index()
            for task in tasks:
                started = time.perf_counter()
                hand = await session.select(task, limit=12)
                elapsed_ms = (time.perf_counter() - started) * 1000
                tokens = counter(json.dumps(hand.export("openai")))
                hands.append(
                    {
                        "task": task,
                        "tools": hand.names,
                        "tokens": tokens,
                        "select_ms": round(elapsed_ms, 1),
                    }
                )
                table = _table(
                    f"{task} ({elapsed_ms:.0f} ms; {tokens:,} schema tokens instead of "
                    f"{all_tokens:,}, {100 * (1 - tokens / max(all_tokens, 1)):.1f}% saved)",
                    "tool",
                    "score",
                    "why",
                )
                for name in hand.names[:_SHOWN]:
                    why = ", ".join(hand.reasons.get(name, ())) or "ranked"
                    table.add_row(name, f"{hand.scores.get(name, 0.0):.3f}", f"dealt: {why}")
                if len(hand.names) > _SHOWN:
                    table.add_row(f"... {len(hand.names) - _SHOWN} more", "", "dealt")
                for excluded in hand.exclusions[:3]:
                    table.add_row(
                        excluded.name,
                        "",
                        f"[red]excluded[/red]: {excluded.reason} (plugin {excluded.plugin})",
                    )
                tables.append(table)
            out.step(
                "2. the hand: the few tools that matter, out of the whole catalog",
                {
                    "hands": hands,
                    "catalog_tokens": all_tokens,
                    "catalog_chars": all_chars,
                    "tokenizer": label,
                    "index_build_s": round(build_s, 2),
                },
                [f"token counts: {label}"],
                tables,
            )
        else:
            out.step(
                "2. the hand",
                {"skipped": "install tooldeck-faiss"},
                ["skipped: no retriever (pip install tooldeck-faiss)"],
            )

        fresh = deck.session(workdir=workdir, grants={"filesystem"})
        bad = await fresh.call("file_read", {"path": 42, "max_bytes": "lots"})
        out.step(
            "3. a validation error that guides the model",
            {"result": converter.unstructure(bad)},
            ['file_read {"path": 42, "max_bytes": "lots"}', _result_line(bad)],
        )
        traversal = await fresh.call("file_read", {"path": "../../../../etc/passwd"})
        out.step(
            "4. a blocked path traversal",
            {"result": converter.unstructure(traversal)},
            ['file_read {"path": "../../../../etc/passwd"}', _result_line(traversal)],
        )

        hot = deck.session(workdir=workdir)
        pending = await hot.call("file_write", {"path": "notes.txt", "content": "hello"})
        lines = ["without a grant for 'filesystem': " + _result_line(pending)]
        dangerous_session = deck.session(workdir=workdir, grants={"filesystem"})
        await deck.add_tools(
            [
                ToolDefinition(
                    name="delete_workdir_file",
                    description="Delete a file in the working directory.",
                    category="filesystem",
                    parameters={
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                        "required": ["path"],
                    },
                    security=SecurityConfig(level="dangerous", path_params=("path",)),
                    execute=lambda arguments, context: os.remove(
                        os.path.join(context.workdir, arguments["path"])
                    ),
                )
            ],
            plugin="demo",
        )
        (workdir / "old.log").write_text("old")
        asked = await dangerous_session.call("delete_workdir_file", {"path": "old.log"})
        lines.append("dangerous call: " + _result_line(asked))
        if asked.error is not None and "approval_id" in asked.error.details:
            approved = await dangerous_session.resume(asked.error.details["approval_id"])
            lines.append("after the user approved: " + _result_line(approved))
            lines.append(f"old.log exists afterwards: {(workdir / 'old.log').exists()}")
        out.step(
            "5. tiers and confirmation",
            {"moderate": converter.unstructure(pending), "dangerous": converter.unstructure(asked)},
            lines,
        )

        timings = []
        results = []
        for _ in range(5):
            started = time.perf_counter()
            results.append(await fresh.call("exchange_rate", {"base": "EUR", "quote": "USD"}))
            timings.append((time.perf_counter() - started) * 1000)
        limited = [
            await fresh.call("exchange_rate", {"base": c, "quote": "USD"})
            for c in ("GBP", "JPY", "CHF")
        ]
        calls = _table("exchange_rate calls", "call", "latency", "outcome")
        for i, (r, t) in enumerate(zip(results, timings, strict=True)):
            outcome = "[green]ok[/green], " + (
                "cache hit" if r.metadata.get("cached") else "executed"
            )
            calls.add_row(f"EUR/USD #{i + 1}", f"{t:.1f} ms", outcome)
        for currency, r in zip(("GBP", "JPY", "CHF"), limited, strict=True):
            calls.add_row(f"{currency}/USD", "", _result_line(r))
        out.step(
            "6. cache hits and a rate limit (3 calls a minute)",
            {
                "timings_ms": [round(t, 2) for t in timings],
                "cached": [r.metadata.get("cached") for r in results],
                "rate_limited": [converter.unstructure(r) for r in limited if not r.success],
            },
            [],
            [calls],
        )

        killed = await fresh.call("allocate_memory", {"megabytes": 1024})
        after = await fresh.call("allocate_memory", {"megabytes": 8})
        out.step(
            "7. a sandboxed tool asks for 1 GB under a 256 MB cap",
            {"result": converter.unstructure(killed), "next_call": converter.unstructure(after)},
            [
                "allocate_memory {megabytes: 1024}: " + _result_line(killed),
                f"isolation: {killed.metadata.get('isolation')}",
                "the host is fine; the next call: " + _result_line(after),
            ],
        )


def _token_counter(plugins: TooldeckPluginManager) -> tuple[Callable[[str], int], str]:
    """A real tokenizer when one works offline (tiktoken, else a plugin's
    ``tooldeck_token_counter``), else an estimate that says so."""
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("o200k_base")
        return (lambda text: len(encoding.encode(text))), "tiktoken o200k_base"
    except Exception:
        pass
    for impl in plugins.impls("tooldeck_token_counter"):
        try:
            found = impl()
        except Exception:  # a broken tokenizer costs the demo its count, not its run
            continue
        if found is not None:
            count, label = found
            return count, label
    return (lambda text: max(1, len(text) // 4)), "estimate: characters / 4"


def run_demo(as_json: bool = False) -> dict[str, Any]:
    """Run the tour; return its steps (and print them unless ``as_json``)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # The tour is for a reader: no library chatter (weight-loading bars, tokenizer warnings).
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    except ImportError:
        pass
    out = _Printer(as_json)
    with tempfile.TemporaryDirectory(prefix="tooldeck-demo-") as folder:
        workdir = Path(folder)
        (workdir / "config.toml").write_text('name = "demo"\n')
        trio.run(_tour, out, workdir)
    return {"steps": out.steps}


def run_demo_cli(args: argparse.Namespace) -> int:
    """``tooldeck demo [--json]``."""
    report = run_demo(as_json=args.json)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
    return 0
