"""``tooldeck bench``: the call path measured side by side with the alternatives, as ratios.

Figures are medians of repeated batches in one process. Nothing here asserts a time: benchmarks
report, tests check behaviour.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from tooldeck_hookspecs import ToolDefinition, tool
from tooldeck_hookspecs.specs.bench import BenchComparison

from ._config import Config
from ._deck import Deck
from ._plugins import TooldeckPluginManager
from .testing import inline_plugin, tools_plugin

__all__ = ["run_bench", "run_bench_cli", "describe", "render_tables", "startup_figures"]


@tool(category="bench", execution={"cacheable": True, "cache_ttl_s": 600})
async def bench_add(a: int, b: int) -> int:
    """Add two integers (the trivial tool every figure is measured with)."""
    return a + b


@tool(category="bench")
async def bench_add_awaiting(a: int, b: int) -> int:
    """Add two integers after a trio checkpoint (a tool that suspends, like any I/O tool)."""
    await trio.lowlevel.checkpoint()
    return a + b


@tool(category="bench")
def bench_add_sync(a: int, b: int) -> int:
    """Add two integers in a plain function (the deck runs it in a worker thread)."""
    return a + b


@tool(
    category="bench",
    execution={"cacheable": True, "cache_ttl_s": 600},
    security={"rate_limit": {"max_calls": 1_000_000_000, "window_s": 60}},
)
async def bench_limited(a: int, b: int) -> int:
    """Add two integers (cacheable and rate-limited: every stage has work to do)."""
    return a + b


async def _throughput(config: dict[str, Any], total: int, workers: int = 16) -> float:
    """Calls/s of the full pipeline for a cacheable, rate-limited tool, all cache misses."""
    deck = Deck.load(
        Config.from_mapping(config), plugins=[tools_plugin([bench_limited], name="bench")]
    )
    async with deck:
        session = deck.session()
        await session.call("bench_limited", {"a": -1, "b": 0})
        started = time.perf_counter()

        async def worker(offset: int) -> None:
            for i in range(offset, total, workers):
                result = await session.call("bench_limited", {"a": i, "b": 1})
                assert result.success, result.error

        async with trio.open_nursery() as nursery:
            for w in range(workers):
                nursery.start_soon(worker, w)
        return total / (time.perf_counter() - started)


async def _per_call_us(call: Callable[[int], Awaitable[Any]], n: int, repeats: int) -> float:
    """Median over ``repeats`` batches of the mean time of ``n`` sequential calls, in µs."""
    means = []
    counter = 0
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(n):
            counter += 1
            await call(counter)
        means.append((time.perf_counter() - started) / n * 1e6)
    return statistics.median(means)


def _langchain_batch() -> Callable[[int], float] | None:
    """A function timing ``n`` LangChain ``StructuredTool.ainvoke`` calls (mean µs per call),
    each batch in its own asyncio loop; None when langchain-core is not installed."""
    try:
        from langchain_core.tools import StructuredTool
    except ImportError:
        return None

    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    lc_tool = StructuredTool.from_function(coroutine=add, name="bench_add")

    async def batch(n: int) -> float:
        await lc_tool.ainvoke({"a": 0, "b": 1})  # warm up (pydantic model building)
        started = time.perf_counter()
        for i in range(n):
            await lc_tool.ainvoke({"a": i, "b": 1})
        return (time.perf_counter() - started) / n * 1e6

    # asyncio.run from trio's thread is fine: trio does not register an asyncio loop, and the
    # trio loop has nothing else to run while a batch blocks it.
    return lambda n: asyncio.run(batch(n))


def _bench_deck() -> Deck:
    # All installed plugins with default settings (no configuration file), plus the bench tool.
    return Deck.load(
        Config.from_mapping({}),
        plugins=[tools_plugin([bench_add, bench_add_awaiting, bench_add_sync], name="bench")],
    )


async def _pipeline_figures(n: int, repeats: int) -> dict[str, float]:
    deck = _bench_deck()
    figures: dict[str, float] = {}
    langchain = _langchain_batch()
    async with deck:
        session = deck.session()
        definition: ToolDefinition = deck.catalog.get("bench_add")  # type: ignore[assignment]
        execute = definition.execute
        assert execute is not None

        async def direct(i: int) -> Any:
            return await execute(a=i, b=1)

        offset = [0]

        async def miss(i: int) -> Any:
            # Distinct arguments every time: each call probes the cache, misses, runs, stores.
            result = await session.call("bench_add", {"a": offset[0] + i, "b": 1})
            assert result.success, result.error
            return result

        async def hit(i: int) -> Any:
            return await session.call("bench_add", {"a": 1, "b": 1})

        await miss(-1)
        # The pipeline and LangChain batches alternate, so both see the same machine: the
        # ratio is the median of the per-round ratios, robust to a noisy neighbour.
        directs, pipelines, chains, ratios = [], [], [], []
        for round_ in range(repeats):
            offset[0] = (round_ + 1) * 10 * n
            directs.append(await _per_call_us(direct, n, 1))
            pipelines.append(await _per_call_us(miss, n, 1))
            overhead = pipelines[-1] - directs[-1]
            if langchain is not None:
                chains.append(langchain(n))
                ratios.append(overhead / chains[-1])
        figures["direct_call_us"] = statistics.median(directs)
        figures["pipeline_call_us"] = statistics.median(pipelines)
        figures["pipeline_overhead_us"] = statistics.median(
            p - d for p, d in zip(pipelines, directs, strict=True)
        )
        if chains:
            figures["langchain_ainvoke_us"] = statistics.median(chains)
            figures["overhead_vs_langchain_ratio"] = statistics.median(ratios)
            figures["pipeline_vs_langchain_ratio"] = statistics.median(
                p / c for p, c in zip(pipelines, chains, strict=True)
            )
        await hit(0)
        figures["cache_hit_us"] = await _per_call_us(hit, n, repeats)
        # The other tool shapes (not cacheable): what the pipeline adds to a tool that
        # suspends (a cancel scope with its deadline and a queue slot) and to a plain function
        # (a worker thread).
        for shape, name in (("awaiting", "bench_add_awaiting"), ("sync", "bench_add_sync")):
            function = deck.catalog.get(name).execute  # type: ignore[union-attr]
            assert function is not None

            async def alone(i: int, function: Any = function) -> Any:
                value = function(a=i, b=1)
                return await value if inspect.isawaitable(value) else value

            async def piped(i: int, name: str = name) -> Any:
                return await session.call(name, {"a": i, "b": 1})

            base = await _per_call_us(alone, n, repeats)
            figures[f"pipeline_overhead_{shape}_tool_us"] = (
                await _per_call_us(piped, n, repeats) - base
            )
        # Throughput: many concurrent callers, distinct arguments (no cache hits).
        total, workers = n * 2, 50
        started = time.perf_counter()

        async def worker(w: int) -> None:
            for i in range(w, total, workers):
                await session.call("bench_add", {"a": 10_000_000 + i, "b": 2})

        async with trio.open_nursery() as nursery:
            for w in range(workers):
                nursery.start_soon(worker, w)
        figures["calls_per_s"] = total / (time.perf_counter() - started)
    return figures


async def _policy_hook_figures(n: int, repeats: int) -> dict[str, float]:
    """What one extra custom policy hook adds per call: marked ``@nonblocking`` (called on the
    loop) and unmarked (run in a worker thread under the call's deadline)."""
    from tooldeck_hookspecs import nonblocking

    def opinion(call: Any, tool: Any, session: Any) -> None:
        return None

    cheap = nonblocking(lambda call, tool, session: None)
    figures: dict[str, float] = {}
    per_call: dict[str, list[float]] = {}
    for _ in range(repeats):
        for label, hook in (("none", None), ("nonblocking", cheap), ("threaded", opinion)):
            extra = (
                [inline_plugin(tooldeck_authorize_call=hook, name="bench_policy")]
                if hook is not None
                else []
            )
            deck = Deck.load(
                Config.from_mapping({}),
                plugins=[tools_plugin([bench_add], name="bench"), *extra],
            )
            async with deck:
                session = deck.session()
                base = 20_000_000 * (len(per_call.get(label, ())) + 1)

                async def call(i: int, session: Any = session, base: int = base) -> Any:
                    return await session.call("bench_add", {"a": base + i, "b": 1})

                await call(-1)
                per_call.setdefault(label, []).append(await _per_call_us(call, n, 1))
    none = statistics.median(per_call["none"])
    figures["policy_hook_nonblocking_added_us"] = statistics.median(per_call["nonblocking"]) - none
    figures["policy_hook_threaded_added_us"] = statistics.median(per_call["threaded"]) - none
    return figures


# ---------------------------------------------------------------- start-up, in new processes

#: Modules a command that only runs a tool must not load (seconds of import each).
HEAVY_MODULES = ("torch", "sentence_transformers", "transformers", "faiss")


def _subprocess_env() -> dict[str, str]:
    """The environment of the measured commands.

    With ``PYTHONDONTWRITEBYTECODE`` set (as in this repository's dev shell) every new process
    would compile tooldeck's sources again, which no installed copy does: the commands get a
    private bytecode cache instead (the first run fills it and is not counted).
    """
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    if env.pop("PYTHONDONTWRITEBYTECODE", None) is not None and "PYTHONPYCACHEPREFIX" not in env:
        env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "tooldeck-bench-pycache")
    return env


def _wall_s(argv: list[str], env: dict[str, str], cwd: str) -> float:
    """Wall-clock seconds of one command (its output discarded); raises if it fails."""
    started = time.perf_counter()
    done = subprocess.run(
        argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, timeout=600, check=False,
    )
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(argv[:5])} exited {done.returncode}: {done.stderr[-300:]!r}")
    return elapsed


def heavy_modules_after(argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """The :data:`HEAVY_MODULES` a ``tooldeck`` command (its arguments ``argv``) leaves loaded,
    run in a new process."""
    probe = (
        "import sys\n"
        "from tooldeck.cli import main\n"
        f"code = main({list(argv)!r})\n"
        f"heavy = [m for m in {HEAVY_MODULES!r} if m in sys.modules]\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=dict(env or _subprocess_env()),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, timeout=600, check=False,
    )
    for line in done.stderr.splitlines():
        if line.startswith("HEAVY="):
            return [m for m in line.removeprefix("HEAVY=").split(",") if m]
    raise RuntimeError(f"probe failed: {done.stderr[-500:]}")


def mcp_stdio_timings(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> dict[str, float]:
    """Seconds from starting ``tooldeck serve mcp`` (stdio) until it answered ``initialize``
    and until it answered ``tools/list``, as a client sees them; plus how many tools it listed.

    A minimal JSON-RPC client over the pipes (no SDK in the client, so its own import costs
    nothing): it sends ``initialize``, then ``notifications/initialized`` and ``tools/list``.
    """
    command = list(argv or [sys.executable, "-m", "tooldeck", "serve", "mcp"])
    started = time.perf_counter()
    process = subprocess.Popen(
        command, env=dict(env or _subprocess_env()), cwd=cwd,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None and process.stdout is not None
    figures: dict[str, float] = {}

    def send(message: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write((json.dumps(message) + "\n").encode())
        process.stdin.flush()

    try:
        send({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "tooldeck-bench", "version": "0"},
            },
        })
        for line in process.stdout:
            message = json.loads(line)
            if message.get("id") == 1:
                figures["initialize_s"] = time.perf_counter() - started
                send({"jsonrpc": "2.0", "method": "notifications/initialized"})
                send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
            elif message.get("id") == 2:
                figures["tools_list_s"] = time.perf_counter() - started
                figures["tools_listed"] = float(len(message["result"]["tools"]))
                break
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if "tools_list_s" not in figures:
        raise RuntimeError("the MCP server closed before answering tools/list")
    return figures


def startup_figures(runs: int = 5, *, select_runs: int = 3) -> dict[str, Any]:
    """Start-up of the commands users wait for, each in a new process, in one run.

    ``tooldeck call file_read`` alternates with ``python -c "import trio, pluggy, attrs,
    cattrs"`` (the floor any trio + pluggy program pays), and their ratio is the median of the
    per-round ratios, so both see the same machine. Then ``tooldeck serve mcp`` (stdio) until
    ``tools/list`` answers, and ``tooldeck select`` with the tool embeddings cached
    (``select_runs`` = 0 leaves it out). Medians of ``runs``.
    """
    env = _subprocess_env()
    python = sys.executable
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tooldeck-bench-") as workdir:
        Path(workdir, "notes.txt").write_text("hello\n", encoding="utf-8")
        baseline = [python, "-c", "import trio, pluggy, attrs, cattrs"]
        call = [python, "-m", "tooldeck", "call", "file_read", '{"path": "notes.txt"}',
                "--workdir", workdir]
        _wall_s(baseline, env, workdir)  # fills the bytecode cache, pages in the libraries
        _wall_s(call, env, workdir)
        bases, calls = [], []
        for _ in range(runs):
            bases.append(_wall_s(baseline, env, workdir))
            calls.append(_wall_s(call, env, workdir))
        figures["startup_import_baseline_s"] = statistics.median(bases)
        figures["startup_call_s"] = statistics.median(calls)
        figures["startup_call_vs_import_ratio"] = statistics.median(
            c / b for c, b in zip(calls, bases, strict=True)
        )
        heavy = heavy_modules_after(["call", "file_read", '{"path": "notes.txt"}',
                                     "--workdir", workdir], env)
        figures["startup_call_heavy_modules"] = ", ".join(heavy) or "none"
        mcp_runs = [mcp_stdio_timings(env=env, cwd=workdir) for _ in range(max(1, runs // 2))]
        figures["mcp_stdio_initialize_s"] = statistics.median(r["initialize_s"] for r in mcp_runs)
        figures["mcp_stdio_tools_list_s"] = statistics.median(r["tools_list_s"] for r in mcp_runs)
        if select_runs:
            select = [python, "-m", "tooldeck", "select", "read the notes file and list the folder",
                      "--json", "--workdir", workdir]
            _wall_s(select, env, workdir)  # embeds the catalog once: the runs below reuse it
            figures["select_new_process_s"] = statistics.median(
                _wall_s(select, env, workdir) for _ in range(select_runs)
            )
    return figures


# ---------------------------------------------------------------- sandbox, sustained


async def sandbox_sustained_figures(calls: int = 60) -> dict[str, Any]:
    """``calls`` concurrent ``shell_exec ["echo", i]`` (granted, always allowed) through the
    whole pipeline, in the sandbox and with ``security.sandbox = false``: calls/s each."""
    figures: dict[str, Any] = {}
    for label, table in (("sandboxed", {}), ("unsandboxed", {"sandbox": False})):
        config = {"tools": {"shell_exec": {"security": table}}} if table else {}
        deck = Deck.load(Config.from_mapping(config))
        if "shell_exec" not in deck.catalog:
            return {"sandbox_sustained": "tooldeck-tools-shell not installed"}
        async with deck:
            with tempfile.TemporaryDirectory(prefix="tooldeck-bench-") as workdir:
                session = deck.session(workdir=workdir, grants=["shell"])
                session.always_allow("shell_exec")
                first = await session.call("shell_exec", {"command": ["echo", "warm"]})
                if not first.success:
                    return {"sandbox_sustained": f"shell_exec failed: {first.error}"}
                failures: list[Any] = []

                async def one(i: int, session: Any = session, failures: list[Any] = failures
                              ) -> None:
                    result = await session.call("shell_exec", {"command": ["echo", str(i)]})
                    if not result.success:
                        failures.append(result.error)

                started = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for i in range(calls):
                        nursery.start_soon(one, i)
                elapsed = time.perf_counter() - started
                if failures:
                    return {"sandbox_sustained": f"{len(failures)} calls failed: {failures[0]}"}
                figures[f"{label}_calls_per_s"] = calls / elapsed
                if label == "sandboxed":
                    figures["sandbox_isolation"] = str(first.metadata.get("isolation", "?"))
    figures["sandboxed_vs_unsandboxed_ratio"] = (
        figures["sandboxed_calls_per_s"] / figures["unsandboxed_calls_per_s"]
    )
    return figures


# ---------------------------------------------------------------- the table


#: What each of the core's figures measures, in words: the table shows these, never a bare
#: key. Plugins describe their own figures (``tooldeck_bench_descriptions``).
DESCRIPTIONS: dict[str, str] = {
    "direct_call_us": "trivial async tool called directly, without tooldeck (µs per call)",
    "pipeline_call_us": "the same tool through the whole pipeline, cache misses (µs per call)",
    "pipeline_overhead_us": "what the pipeline adds to an async tool (µs per call)",
    "langchain_ainvoke_us": "LangChain StructuredTool.ainvoke of the same async function (µs)",
    "overhead_vs_langchain_ratio": "async tool: pipeline overhead / LangChain ainvoke",
    "pipeline_vs_langchain_ratio": "async tool: whole pipeline call / LangChain ainvoke",
    "langchain": "LangChain comparison",
    "cache_hit_us": "a call answered from the result cache (µs per call)",
    "pipeline_overhead_awaiting_tool_us": "what the pipeline adds to a tool that suspends (µs)",
    "pipeline_overhead_sync_tool_us": "what the pipeline adds to a plain def tool (µs)",
    "calls_per_s": "throughput of 50 concurrent callers, trivial async tool (calls/s)",
    "policy_hook_nonblocking_added_us": "one extra @nonblocking policy hook adds (µs per call)",
    "policy_hook_threaded_added_us": "one extra unmarked policy hook (run in a thread) adds (µs)",
    "sandbox_isolation": "how calls are isolated on this machine",
    "sandboxed_calls_per_s": "concurrent shell_exec echo calls (60; 20 with --quick), granted "
    "and always allowed, in the sandbox (calls/s)",
    "unsandboxed_calls_per_s": "the same calls outside the sandbox (calls/s)",
    "sandboxed_vs_unsandboxed_ratio": "sustained calls/s: sandboxed / outside the sandbox",
    "sandbox_sustained": "sustained sandbox throughput",
    "startup_import_baseline_s": "new process: python -c 'import trio, pluggy, attrs, cattrs' (s)",
    "startup_call_s": "new process: tooldeck call file_read, whole command (s)",
    "startup_call_vs_import_ratio": "tooldeck call file_read / the import baseline (same run)",
    "startup_call_heavy_modules": "torch / sentence-transformers / transformers / FAISS "
    "loaded by tooldeck call",
    "mcp_stdio_initialize_s": "tooldeck serve mcp (stdio): start until initialize answers (s)",
    "mcp_stdio_tools_list_s": "tooldeck serve mcp (stdio): start until tools/list answers (s)",
    "select_new_process_s": "new process: tooldeck select, tool embeddings cached (s)",
    "startup": "start-up figures",
}

def _bench_plugins() -> TooldeckPluginManager:
    """The installed plugins the configuration allows, loaded for their bench hooks."""
    from ._config import load_config

    manager = TooldeckPluginManager()
    manager.load_entry_points(load_config().allows, strict=False)
    return manager


def _plugin_tables(
    manager: TooldeckPluginManager | None = None,
) -> tuple[dict[str, str], list[BenchComparison]]:
    """Every plugin's ``tooldeck_bench_descriptions``: figure words and side-table lines."""
    manager = manager or _bench_plugins()
    words: dict[str, str] = {}
    lines: list[BenchComparison] = []
    for impl in reversed(manager.impls("tooldeck_bench_descriptions")):  # registration order
        found = impl()
        if found is None:
            continue
        words.update(found.figures)
        lines.extend(found.comparisons)
    return words, lines


def _plugin_descriptions() -> dict[str, str]:
    """What the plugins' figures measure, in words (``tooldeck_bench_descriptions``)."""
    return _plugin_tables()[0]


def describe(key: str, plugin: Mapping[str, str] | None = None) -> str:
    """What the figure ``key`` measures, in words."""
    if key in DESCRIPTIONS:
        return DESCRIPTIONS[key]
    if plugin and key in plugin:
        return plugin[key]
    # A figure nobody described yet still reads as words, and says it is undescribed.
    return key.replace("_", " ") + " (undescribed figure)"


#: One line of the side-by-side table (the contract's, so that plugins add lines too).
Comparison = BenchComparison


#: The core's lines of the side-by-side table (issue 16's table); plugins add theirs
#: (``tooldeck_bench_descriptions``) and every line goes by its ``position``.
COMPARISONS: tuple[BenchComparison, ...] = (
    BenchComparison(
        what="sandboxed shell_exec, concurrent (60; 20 with --quick), vs the same calls outside "
        "the sandbox (calls/s)",
        ours="sandboxed_calls_per_s",
        theirs="unsandboxed_calls_per_s",
        ratio="sandboxed_vs_unsandboxed_ratio",
        goal=">= 100 calls/s",
        position=20,
    ),
    BenchComparison(
        what="tooldeck call file_read in a new process vs python -c 'import trio, pluggy, attrs, "
        "cattrs' (s)",
        ours="startup_call_s",
        theirs="startup_import_baseline_s",
        ratio="startup_call_vs_import_ratio",
        goal="<= 2x",
        position=40,
    ),
    BenchComparison(
        what="tooldeck serve mcp (stdio): until tools/list answers (s)",
        ours="mcp_stdio_tools_list_s",
        goal="<= 1 s",
        position=50,
    ),
    BenchComparison(
        what="tooldeck select in a new process, tool embeddings cached (s)",
        ours="select_new_process_s",
        goal="<= 3 s",
        position=60,
    ),
)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def render_tables(
    figures: Mapping[str, Any], plugins: TooldeckPluginManager | None = None
) -> list[Any]:
    """The rich tables of ``tooldeck bench``: side by side first, then every figure with what
    it measures.

    :param plugins: whose ``tooldeck_bench_descriptions`` to use (default: the installed ones).
    """
    from rich.table import Table

    side = Table(title="tooldeck bench: side by side, one run (ratio = tooldeck / compared)")
    for column in ("what is measured", "tooldeck", "compared with", "ratio", "goal"):
        side.add_column(column, justify="left" if column == "what is measured" else "right")
    plugin, plugin_lines = _plugin_tables(plugins)
    for line in sorted((*COMPARISONS, *plugin_lines), key=lambda line: line.position):
        if line.ours not in figures:
            continue
        side.add_row(
            line.what,
            _cell(figures.get(line.ours)),
            _cell(figures.get(line.theirs)) if line.theirs else "-",
            _cell(figures.get(line.ratio)) if line.ratio else "-",
            line.goal,
        )
    every = Table(title="every figure (medians; lower is better unless it is a rate)")
    every.add_column("what is measured")
    every.add_column("value", justify="right")
    for key, value in figures.items():
        every.add_row(describe(key, plugin), _cell(value))
    return [side, every]


def _make_bench_deck(
    tools: Sequence[ToolDefinition | Callable[..., Any]], config: Mapping[str, Any] | None = None
) -> Deck:
    """A plugin's bench deck: every installed stage, ``tools``, ``config``."""
    return Deck.load(
        Config.from_mapping(dict(config or {})), plugins=[tools_plugin(list(tools), name="bench")]
    )


async def _pipeline_throughput(config: Mapping[str, Any], total: int) -> float:
    return await _throughput(dict(config), total)


def plugin_figures(quick: bool, manager: TooldeckPluginManager | None = None) -> dict[str, Any]:
    """Every plugin's ``tooldeck_bench_figures``, in registration order, as one flat dict; a
    plugin whose bench raises is one line saying so."""
    manager = manager or _bench_plugins()
    figures: dict[str, Any] = {}
    for impl in reversed(manager.impls("tooldeck_bench_figures")):  # registration order
        try:
            found = impl(
                quick=quick, make_deck=_make_bench_deck, pipeline_throughput=_pipeline_throughput
            )
        except Exception as exc:  # one plugin's broken bench costs its lines, not the run
            figures[impl.plugin] = f"skipped: {type(exc).__name__}: {exc}"
            continue
        figures.update(found or {})
    return figures


def run_bench(*, quick: bool = False) -> dict[str, Any]:
    """Run the core's benchmarks and every installed plugin's; return one flat dict."""
    n, repeats = (300, 3) if quick else (2000, 7)
    figures: dict[str, Any] = dict(trio.run(_pipeline_figures, n, repeats))
    if "langchain_ainvoke_us" not in figures:
        figures["langchain"] = "langchain-core not installed"
    figures.update(trio.run(_policy_hook_figures, n // 2, repeats))
    try:
        figures.update(trio.run(sandbox_sustained_figures, 20 if quick else 60))
    except Exception as exc:  # a machine without a usable sandbox still gets the other lines
        figures["sandbox_sustained"] = f"skipped: {type(exc).__name__}: {exc}"
    # Sandbox latency and throughput (runner), Redis (redis), selection (faiss), ...
    figures.update(plugin_figures(quick))
    try:
        figures.update(startup_figures(2 if quick else 7, select_runs=1 if quick else 3))
    except Exception as exc:
        figures["startup"] = f"skipped: {type(exc).__name__}: {exc}"
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in figures.items()}


def run_bench_cli(args: argparse.Namespace) -> int:
    """``tooldeck bench [--json] [--quick]``."""
    figures = run_bench(quick=args.quick)
    if args.json:
        sys.stdout.write(json.dumps(figures, indent=2) + "\n")
        return 0
    from rich.console import Console

    console = Console()
    for table in render_tables(figures):
        console.print(table)
    if "langchain_ainvoke_us" in figures:
        console.print(
            f"pipeline overhead is {figures['overhead_vs_langchain_ratio']:.3f}x of LangChain "
            f"tool.ainvoke ({figures['pipeline_overhead_us']:.1f} µs vs "
            f"{figures['langchain_ainvoke_us']:.1f} µs); "
            f"direct call {figures['direct_call_us']:.2f} µs"
        )
    return 0
