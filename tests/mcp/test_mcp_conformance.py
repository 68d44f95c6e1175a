"""``serve mcp`` against what the official MCP conformance suite checks.

Always: the features the suite needed that tooldeck lacked, with the official client in process
(``logging/setLevel`` and tools' log records as ``notifications/message`` at or above the level;
sampling and elicitation requested by a tool through :func:`tooldeck_mcp.server.current_client`),
on the suite's own reference tools (``tests/mcp/conformance/site``).

When Node 22 and ``@modelcontextprotocol/conformance`` are installed in the cache directory
(``nox -s conformance`` installs them; CI does not, so there the test is skipped with the
reason): the whole suite against ``tooldeck serve mcp --transport http``, which must fail
exactly the scenarios of ``tests/mcp/conformance/baseline.yml``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
from mcp import Client, types
from tooldeck_mcp.server import DeckMcpServer, current_client

from tooldeck import ToolContext, tool
from tooldeck.testing import make_deck

CONFORMANCE = Path(__file__).with_name("conformance")


def _load(name: str, path: Path) -> ModuleType:
    # Test modules are imported without a package: the helpers are loaded from their files.
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


pack = _load("tooldeck_conformance", CONFORMANCE / "site" / "tooldeck_conformance" / "__init__.py")
run_suite = _load("tooldeck_conformance_run_suite", CONFORMANCE / "run_suite.py")

# logging/setLevel and sampling are deprecated by the 2026-07-28 revision only; these tests use
# them on purpose.
pytestmark = [
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
    pytest.mark.filterwarnings("ignore:The sampling capability is deprecated"),
]


@tool(category="work")
def chatty() -> str:
    """Log one record at each level, from a sync tool."""
    logger = logging.getLogger("tooldeck.tool.chatty")
    logger.debug("a debug line")
    logger.info("an info line")
    logger.warning("a warning line")
    logger.error("an error line")
    return "done"


@tool(category="work")
async def ask_nobody(context: ToolContext) -> str:
    """Say whether an MCP client is reachable."""
    client = current_client()
    return "none" if client is None else f"sample={client.can_sample} elicit={client.can_elicit}"


def _deck(*extra: Any) -> Any:
    return make_deck(load_entry_points=["schema", "runner"], tools=[*pack.TOOLS, *extra])


@asynccontextmanager
async def _server(deck: Any, workdir: Path) -> AsyncIterator[DeckMcpServer]:
    """A server closed afterwards (which also gives the tools' logging back as it was)."""
    server = DeckMcpServer(deck, workdir=str(workdir))
    try:
        yield server
    finally:
        await server.aclose()


async def test_logging_capability_and_tool_logs_reach_the_client(workdir: Path) -> None:
    received: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        received.append(params)

    async with _deck() as deck:
        async with (
            _server(deck, workdir) as server,
            Client(server.server, mode="legacy", logging_callback=on_log) as client,
        ):
            assert client.server_capabilities.logging is not None
            assert await client.set_logging_level("debug") is not None
            result = await client.call_tool("test_tool_with_logging", {})
            await trio.sleep(0.05)  # notifications may trail the result on the stream
    assert not result.is_error
    assert [(m.level, m.data) for m in received] == [
        ("info", "Tool execution started"),
        ("info", "Tool processing data"),
        ("info", "Tool execution completed"),
    ]
    assert {m.logger for m in received} == {"tooldeck.tool.test_tool_with_logging"}
    # The server closed: the tools' logging is as it was before the client asked.
    assert logging.getLogger("tooldeck.tool").propagate is True


async def _until(condition: Any, limit_s: float = 10.0) -> None:
    """Wait for ``condition()`` (a loaded machine delivers notifications late)."""
    with trio.fail_after(limit_s):
        while not condition():
            await trio.sleep(0.01)


async def test_only_records_at_or_above_the_client_level_are_sent(workdir: Path) -> None:
    received: list[tuple[str, Any]] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        received.append((params.level, params.data))

    async with _deck(chatty) as deck:
        async with (
            _server(deck, workdir) as server,
            Client(server.server, mode="legacy", logging_callback=on_log) as client,
        ):
            await client.set_logging_level("warning")
            first = await client.call_tool("chatty", {})
            # Notifications are delivered on their own: wait for the last one the tool logs
            # (the stream is ordered, so whatever came before it has arrived too).
            await _until(lambda: ("error", "an error line") in received)
            warned = list(received)
            received.clear()
            await client.set_logging_level("error")
            await client.call_tool("chatty", {})
            await _until(lambda: ("error", "an error line") in received)
    assert not first.is_error
    assert warned == [("warning", "a warning line"), ("error", "an error line")]
    assert received == [("error", "an error line")]


async def test_2026_clients_opt_in_per_request(workdir: Path) -> None:
    received: list[tuple[str, Any]] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        received.append((params.level, params.data))

    async with _deck(chatty) as deck:
        async with (
            _server(deck, workdir) as server,
            Client(server.server, logging_callback=on_log) as client,
        ):
            await client.call_tool("chatty", {})  # no opt-in: nothing
            await trio.sleep(0.05)
            assert received == []
            await client.call_tool(
                "chatty", {}, meta={"io.modelcontextprotocol/logLevel": "warning"}
            )
            await _until(lambda: ("error", "an error line") in received)
    assert received == [("warning", "a warning line"), ("error", "an error line")]


async def test_no_set_level_no_log_notifications_and_logging_untouched(workdir: Path) -> None:
    received: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        received.append(params)

    async with _deck(chatty) as deck:
        async with (
            _server(deck, workdir) as server,
            Client(server.server, mode="legacy", logging_callback=on_log) as client,
        ):
            await client.call_tool("chatty", {})
            assert logging.getLogger("tooldeck.tool").handlers == []
            await trio.sleep(0.05)
    assert received == []


async def test_client_logging_does_not_spill_debug_records_to_the_process_logs(
    workdir: Path,
) -> None:
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Collect()
    tooldeck_logger = logging.getLogger("tooldeck")
    tooldeck_logger.addHandler(handler)
    previous = tooldeck_logger.level
    tooldeck_logger.setLevel(logging.WARNING)
    try:
        async with _deck(chatty) as deck:
            async with (
                _server(deck, workdir) as server,
                Client(server.server, mode="legacy") as client,
            ):
                await client.set_logging_level("debug")  # the client wants everything...
                await client.call_tool("chatty", {})
    finally:
        tooldeck_logger.removeHandler(handler)
        tooldeck_logger.setLevel(previous)
    # ... the process's own logs still get what their level lets through, no more.
    assert seen == ["a warning line", "an error line"]


async def test_tool_samples_the_client_model(workdir: Path) -> None:
    prompts: list[str] = []

    async def sample(context: Any, params: types.CreateMessageRequestParams) -> Any:
        content = params.messages[0].content
        prompts.append(getattr(content, "text", ""))
        assert params.max_tokens == 100
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="forty-two"),
            model="test-model", stop_reason="endTurn",
        )

    async with _deck() as deck, _server(deck, workdir) as server:
        # Sampling is a handshake-era feature: 2026-07-28 clients have no back-channel for it.
        async with Client(server.server, mode="legacy", sampling_callback=sample) as client:
            result = await client.call_tool("test_sampling", {"prompt": "What is the answer?"})
        async with Client(server.server, mode="legacy") as plain:  # no sampling: an error
            refused = await plain.call_tool("test_sampling", {"prompt": "What is the answer?"})
    assert prompts == ["What is the answer?"]
    assert not result.is_error
    assert "LLM response: forty-two" in result.content[0].text  # type: ignore[union-attr]
    assert refused.is_error
    assert "supports sampling" in refused.content[0].text  # type: ignore[union-attr]


async def test_tool_elicits_from_the_client_user(workdir: Path) -> None:
    asked: list[dict[str, Any]] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(dict(params.requested_schema))
        return types.ElicitResult(action="accept", content={"name": "Jane", "age": 25})

    async with _deck() as deck:
        async with (
            _server(deck, workdir) as server,
            Client(server.server, mode="legacy", elicitation_callback=elicit) as client,
        ):
            result = await client.call_tool("test_elicitation_sep1034_defaults", {})
    assert not result.is_error
    text = json.loads(result.content[0].text)["data"]  # type: ignore[union-attr]
    assert text == 'Elicitation completed: action=accept, content={"name": "Jane", "age": 25}'
    # The schema reaches the client as the tool wrote it (defaults included, SEP-1034).
    assert asked[0]["properties"]["status"]["default"] == "active"
    assert asked[0]["properties"]["verified"]["default"] is True


async def test_current_client_is_none_outside_mcp(workdir: Path) -> None:
    async with _deck(ask_nobody) as deck:
        async with deck.session(workdir=str(workdir)) as session:
            direct = await session.call("ask_nobody", {})
        async with (
            _server(deck, workdir) as server,
            Client(server.server) as client,
        ):
            served = await client.call_tool("ask_nobody", {})
    assert direct.success and direct.data == "none"
    assert "sample=False elicit=False" in served.content[0].text  # type: ignore[union-attr]


def _suite_cache() -> Path | None:
    cache = Path(run_suite.DEFAULT_CACHE)
    return cache if run_suite.installed(cache) else None


@pytest.mark.skipif(
    _suite_cache() is None,
    reason=(
        f"Node 22 and @modelcontextprotocol/conformance are not installed in "
        f"{run_suite.DEFAULT_CACHE} (run `nox -s conformance` once; it needs npm)"
    ),
)
def test_official_conformance_suite_fails_only_the_baseline(tmp_path: Path) -> None:
    cache = _suite_cache()
    assert cache is not None
    # Exit 0: every failing scenario is in baseline.yml and every baseline entry still fails.
    assert run_suite.run(cache, workdir=tmp_path) == 0


async def test_every_record_a_sync_tool_logs_reaches_the_client_call_after_call(
    workdir: Path,
) -> None:
    """A sync tool's records were handed from its thread to the loop after the call could
    already have returned (the executor's quick path waits for the thread directly), and were
    dropped against the call's closed log channel: after some other tests in the same
    process, the logging tests here saw no record at all. Every call's records arrive now."""
    received: list[tuple[str, Any]] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        received.append((params.level, params.data))

    calls = 30
    async with _deck(chatty) as deck:
        async with (
            _server(deck, workdir) as server,
            Client(server.server, mode="legacy", logging_callback=on_log) as client,
        ):
            await client.set_logging_level("warning")
            for _ in range(calls):
                done = await client.call_tool("chatty", {})
                assert not done.is_error
            await _until(lambda: received.count(("error", "an error line")) == calls)
    assert received == [("warning", "a warning line"), ("error", "an error line")] * calls
