"""A framework's approved call survives a transient approval-store failure.

The integrations (LangChain, llm, Agents SDK, Pydantic AI) book the deck's approval under the
framework's call id and answer it when the user says yes. When the store fails at that moment
(Redis down), the deck keeps the call pending; the book must keep it too, so the framework's
re-run answers the same approval instead of asking the user again.
"""

from __future__ import annotations

from typing import Any

from tooldeck import ErrorCode, ToolCall, tool
from tooldeck._approvals import InMemoryApprovalStore
from tooldeck.integrations._bridge import ApprovalBook, answer_flow, call_flow
from tooldeck.testing import inline_plugin, make_deck

RUNS: list[str] = []


@tool(category="shell", security={"level": "dangerous"})
def wipe(target: str) -> str:
    """Wipe a target.

    Args:
        target: what to wipe
    """
    RUNS.append(target)
    return f"wiped {target}"


class _FailsOnce(InMemoryApprovalStore):
    """``consume`` raises once (the backend blinked); counts the approvals created."""

    def __init__(self) -> None:
        super().__init__()
        self.created = 0
        self.failures = 1

    async def create(self, **kw: Any) -> str:
        self.created += 1
        return await super().create(**kw)

    async def consume(self, **kw: Any) -> bool:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("approval backend unreachable")
        return await super().consume(**kw)


async def test_an_answer_the_store_failed_is_retried_with_the_same_approval() -> None:
    RUNS.clear()
    store = _FailsOnce()
    async with make_deck(
        inline_plugin(tooldeck_approval_store=lambda settings: store, name="store"),
        load_entry_points=["schema", "runner", "policy"],
        tools=[wipe],
    ) as deck:
        session = deck.session()
        book = ApprovalBook()
        call = ToolCall(name="wipe", arguments={"target": "build"}, id="fw_call_1")
        asked = await call_flow(session, book, call)
        assert asked.error is not None and asked.error.code is ErrorCode.CONFIRMATION_REQUIRED
        failed = await answer_flow(session, book, call, True)
        assert failed.error is not None and failed.error.code is ErrorCode.PLUGIN_ERROR
        assert RUNS == []
        retried = await answer_flow(session, book, call, True)
        assert session.pending_approvals() == {}
    assert retried.success and retried.data == "wiped build"
    # The retry answered the booked approval: no second approval was created for the call.
    assert store.created == 1
    assert RUNS == ["build"]
