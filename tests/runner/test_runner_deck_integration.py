"""The runner inside a real deck: sandboxed and in-process calls through Session.call, session
cancellation of a sandboxed call, and per-category limits under load."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
import trio

from tooldeck import ExecutionConfig, SecurityConfig, ToolDefinition, tool
from tooldeck.testing import make_deck, marked_pids

SANDBOX_TOOLS = str(Path(__file__).resolve().parents[2] / "plugins" / "runner" / "tests")
MODE = "bubblewrap" if shutil.which("bwrap") else "process"


def sandboxed(name: str, **execution: object) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=f"sandboxed test tool {name}",
        category="code",
        parameters={"type": "object", "properties": {"marker": {"type": "string"}}},
        entrypoint=f"runner_sandbox_tools:{name}",
        security=SecurityConfig(sandbox=True),
        execution=ExecutionConfig(**execution),
    )


@pytest.fixture(autouse=True)
def importable_sandbox_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    # The schema plugin checks at registration that entrypoints import in the host too.
    monkeypatch.syspath_prepend(SANDBOX_TOOLS)


in_flight = {"now": 0, "max": 0}


@tool(category="browser")
async def browse(url: str) -> str:
    """Pretend to load a page."""
    in_flight["now"] += 1
    in_flight["max"] = max(in_flight["max"], in_flight["now"])
    try:
        await trio.sleep(0.01)
    finally:
        in_flight["now"] -= 1
    return url


def deck(**runner: object):
    return make_deck(
        load_entry_points=["schema", "runner"],
        config={
            "runner": {"sandbox": MODE, "python_path": [SANDBOX_TOOLS], **runner},
            "inline-tools": {"depth": 2},
        },
        tools=[
            sandboxed("echo"),
            sandboxed("segfault"),
            sandboxed("thousand_children_then_sleep", timeout_s=60),
            browse,
        ],
    )


async def test_sandboxed_and_in_process_calls_through_the_deck(tmp_path: Path) -> None:
    async with deck() as d:
        session = d.session(workdir=str(tmp_path), attributes={"user": "ada"})
        echoed = await session.call("echo", {"marker": "m"})
        crashed = await session.call("segfault", {})
        again = await session.call("echo", {"marker": "n"})
        browsed = await session.call("browse", {"url": "https://example.org"})
    assert echoed.success and echoed.data["arguments"] == {"marker": "m"}
    assert echoed.data["cwd"] == str(tmp_path.resolve())
    # The session's attributes and the plugin's settings cross into the sandbox.
    assert echoed.data["attributes"] == {"user": "ada"}
    assert echoed.data["settings"] == {"depth": 2}
    assert echoed.metadata["isolation"] in ("bubblewrap", "process (degraded isolation)")
    assert crashed.error is not None and crashed.error.code == "SANDBOX_CRASHED"
    assert "SIGSEGV" in crashed.error.message
    assert again.success and again.metadata["attempts"] == 1
    assert browsed.data == "https://example.org"
    assert browsed.metadata["isolation"] == "in-process"


async def test_session_cancel_kills_a_sandboxed_call(tmp_path: Path) -> None:
    marker = f"tooldeck-deck-{uuid.uuid4().hex}"
    results = []
    async with deck() as d:
        session = d.session(workdir=str(tmp_path))
        async with trio.open_nursery() as nursery:

            async def go() -> None:
                args = {"marker": marker}
                results.append(await session.call("thousand_children_then_sleep", args))

            nursery.start_soon(go)
            with trio.fail_after(30):
                while not marked_pids(marker):
                    await trio.sleep(0.02)
            session.cancel()
    assert results[0].error is not None and results[0].error.code == "CANCELLED"
    for _ in range(100):
        if not marked_pids(marker):
            break
        await trio.sleep(0.02)
    assert marked_pids(marker) == []


@pytest.mark.slow
async def test_category_limit_holds_under_load(tmp_path: Path) -> None:
    in_flight.update(now=0, max=0)
    async with deck(concurrency={"browser": 3}) as d:
        session = d.session(workdir=str(tmp_path))
        async with trio.open_nursery() as nursery:
            for i in range(60):
                nursery.start_soon(session.call, "browse", {"url": f"u{i}"})
        stats = d.executor.statistics()
    assert in_flight["max"] <= 3
    assert stats["browser"].max_in_flight == 3
    assert stats["browser"].completed == 60
