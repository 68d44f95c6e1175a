"""``ToolContext.emit`` reaches the caller: ``Session.call(on_progress=...)`` (issue 15).

In-process tools, async and sync (a worker thread), through the real runner.
"""

from __future__ import annotations

import threading

import trio

from tooldeck import ToolContext, tool
from tooldeck.testing import make_deck

STAGES = ["schema", "runner"]


@tool(category="work")
async def crunch(steps: int, context: ToolContext) -> str:
    """Crunch numbers, reporting progress.

    Args:
        steps: how many steps
    """
    for step in range(1, steps + 1):
        context.emit({"progress": step, "total": steps, "message": f"step {step}"})
        await trio.sleep(0)
    return "done"


@tool(category="work")
def grind(context: ToolContext) -> int:
    """Grind in a thread, reporting progress."""
    context.emit({"progress": 1, "message": "x" * 100_000})
    context.emit("not a mapping")  # type: ignore[arg-type]
    context.emit({"progress": float("nan"), "total": True, "message": "odd numbers dropped"})
    return threading.get_ident()


async def test_async_tool_progress_arrives_in_order_on_the_loop():
    seen: list[tuple[dict, int]] = []
    async with make_deck(load_entry_points=STAGES, tools=[crunch, grind]) as deck:
        session = deck.session()
        result = await session.call("crunch", {"steps": 3}, call_id="c1",
                                    on_progress=lambda e: seen.append((dict(e),
                                                                       threading.get_ident())))
        quiet = await session.call("crunch", {"steps": 2})  # no listener: emit is a no-op
    assert result.success and quiet.success
    assert [e for e, _ in seen] == [
        {"progress": 1, "total": 3, "message": "step 1", "call_id": "c1"},
        {"progress": 2, "total": 3, "message": "step 2", "call_id": "c1"},
        {"progress": 3, "total": 3, "message": "step 3", "call_id": "c1"},
    ]
    assert {thread for _, thread in seen} == {threading.get_ident()}


async def test_sync_tool_progress_crosses_from_its_thread_normalised():
    seen: list[tuple[dict, int]] = []
    async with make_deck(load_entry_points=STAGES, tools=[crunch, grind]) as deck:
        session = deck.session()
        result = await session.call(
            "grind", {}, on_progress=lambda e: seen.append((dict(e), threading.get_ident()))
        )
        await trio.sleep(0.05)  # events posted from the thread run on the loop soon after
    assert result.success and result.data != threading.get_ident()  # it ran in a thread
    events = [e for e, _ in seen]
    assert len(events) == 3
    assert events[0]["progress"] == 1 and len(events[0]["message"]) < 2000  # shortened
    assert events[1]["message"] == "not a mapping"
    assert "progress" not in events[2] and "total" not in events[2]
    assert {thread for _, thread in seen} == {threading.get_ident()}  # delivered on the loop


async def test_a_listener_that_raises_costs_the_call_nothing():
    def broken(event):
        raise RuntimeError("listener bug")

    async with make_deck(load_entry_points=STAGES, tools=[crunch]) as deck:
        result = await deck.session().call("crunch", {"steps": 2}, on_progress=broken)
    assert result.success and result.data == "done"


@tool(category="work")
def leaky(token: str, context: ToolContext) -> str:
    """Report progress that quotes a credential, from a worker thread.

    Args:
        token: the credential
    """
    context.emit({"progress": 1, "message": f"cloning with GITHUB_TOKEN={token}"})
    return "ok"


async def test_progress_messages_pass_the_result_processors_redaction_included():
    """Progress is output as the result is: the policy's redaction reaches it (an audit found
    a token in a progress message going out as is, to the caller and to MCP clients)."""
    import secrets
    import string

    token = "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits)
                             for _ in range(36))
    seen: list[dict] = []
    async with make_deck(load_entry_points=[*STAGES, "policy"], tools=[crunch, leaky]) as deck:
        session = deck.session()
        result = await session.call("leaky", {"token": token}, on_progress=seen.append)
        await trio.sleep(0.05)
    assert result.success
    assert len(seen) == 1 and token not in repr(seen)
    assert "[REDACTED:" in seen[0]["message"] and seen[0]["progress"] == 1


async def test_a_result_processor_that_fails_on_progress_withholds_the_message():
    from tooldeck_hookspecs import hookimpl

    class Broken:
        @hookimpl
        def tooldeck_process_result(self, call, tool, result):
            if result.data == "step 1":
                raise RuntimeError("processor bug")
            return None

    seen: list[dict] = []
    async with make_deck(Broken(), load_entry_points=STAGES, tools=[crunch]) as deck:
        result = await deck.session().call("crunch", {"steps": 2}, on_progress=seen.append)
    assert result.success
    assert seen[0] == {"progress": 1, "total": 2, "call_id": seen[0]["call_id"]}  # withheld
    assert seen[1]["message"] == "step 2"
