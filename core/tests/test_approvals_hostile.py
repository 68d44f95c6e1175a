"""Hostile cases of the confirmation of dangerous calls: late answers, lying stores, replays,
floods and tools that change between the approval and its use."""

from __future__ import annotations

import io
import os
from typing import Any

import attrs
import pytest
import trio

from tooldeck import ErrorCode, SecurityConfig, ToolDefinition
from tooldeck._approvals import InMemoryApprovalStore
from tooldeck.testing import inline_plugin, make_deck

STAGES = ["schema", "runner", "policy"]


def _wipe_tool(runs: list[str], *, version: str = "1.0.0", sandbox: bool = False) -> ToolDefinition:
    def wipe(target: str) -> str:
        runs.append(target)
        return target

    return ToolDefinition(
        name="wipe",
        version=version,
        description="Wipe a target.",
        category="shell",
        parameters={
            "type": "object",
            "properties": {"target": {"type": "string"}},
            "required": ["target"],
        },
        security=SecurityConfig(level="dangerous", sandbox=sandbox),
        execute=wipe,
        call_style="kwargs",
    )


def _deck(runs: list[str], *plugins: Any, config: dict[str, Any] | None = None) -> Any:
    return make_deck(*plugins, load_entry_points=STAGES, tools=[_wipe_tool(runs)], config=config)


async def test_an_answer_given_after_the_confirm_timeout_is_a_no():
    """A callback that ignores the deck's deadline (it shields itself, or waits on something
    the cancellation cannot reach) and says yes late must not run the call."""
    runs: list[str] = []

    async def confirm(request: Any) -> bool:
        with trio.CancelScope(shield=True):
            await trio.sleep(0.5)  # the deck gave up after 0.05 s
        return True

    async with _deck(runs, config={"approvals": {"confirm_timeout_s": 0.05}}) as deck:
        result = await deck.session(confirm=confirm).call("wipe", {"target": "late"})
    assert result.error is not None and result.error.code is ErrorCode.PERMISSION_DENIED
    assert "did not answer" in result.error.message
    assert runs == []


async def test_the_cli_prompt_gives_up_at_the_confirm_timeout(monkeypatch):
    """The terminal prompt waits on stdin in a thread: the deck's confirm timeout must end the
    wait (a user who walked away leaves the call denied, not the CLI hung)."""
    from tooldeck import cli

    runs: list[str] = []
    read_end, write_end = os.pipe()
    stdin = os.fdopen(read_end, "r")
    monkeypatch.setattr("sys.stdin", stdin)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    fired: list[bool] = []

    async def watchdog() -> None:
        # Unblocks a prompt that ignores the deadline, so that the bug fails the test instead
        # of hanging it: an answer that only this (generous) watchdog gave proves the wait.
        await trio.sleep(20)
        fired.append(True)
        os.write(write_end, b"y\n")

    try:
        async with _deck(runs, config={"approvals": {"confirm_timeout_s": 0.1}}) as deck:
            session = deck.session(confirm=cli._terminal_confirm)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watchdog)
                result = await session.call("wipe", {"target": "x"})
                nursery.cancel_scope.cancel()
    finally:
        if not fired:
            os.write(write_end, b"n\n")  # releases the abandoned reader thread
        os.close(write_end)
    assert fired == []
    assert result.error is not None and result.error.code is ErrorCode.PERMISSION_DENIED
    assert runs == []


def test_the_cli_prompt_shows_control_characters_escaped(monkeypatch):
    """Reasons come from any policy plugin and may quote what the model sent: a carriage
    return or an ANSI sequence must not redraw the prompt the user reads."""
    from tooldeck import cli

    class _Tool:
        name = "wipe\x1b[2K\rsafe_tool"

    class _Request:
        tool = _Tool()
        call = type("C", (), {"arguments": {"target": "x"}})()
        reasons = ("fine\r\x1b[1A\x1b[2Ktool 'x' is harmless\u202e",)

    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    assert trio.run(cli._terminal_confirm, _Request()) is False
    shown = err.getvalue()
    assert "\x1b" not in shown and "\r" not in shown and "\u202e" not in shown
    assert "\\x1b" in shown and "safe_tool" in shown


@pytest.mark.parametrize("answer", ["no", 1, {"ok": False}, None])
async def test_a_store_that_answers_consume_with_garbage_fails_closed(answer):
    """Only True from ``consume`` lets a call run; anything else a store answers (a truthy
    string, a dict, an int) is a refusal with a structured error naming the store."""
    runs: list[str] = []

    class Lying(InMemoryApprovalStore):
        async def consume(self, **kw: Any) -> Any:
            return answer

    async with _deck(
        runs, inline_plugin(tooldeck_approval_store=lambda settings: Lying(), name="lying")
    ) as deck:
        result = await deck.session().call("wipe", {"target": "a"}, approval_id="apr_forged")
    assert result.error is not None
    assert result.error.code in {ErrorCode.PERMISSION_DENIED, ErrorCode.PLUGIN_ERROR}
    assert runs == []


@pytest.mark.parametrize("new_id", ["", 42, None, b"apr_x"])
async def test_a_store_that_answers_create_with_garbage_is_a_structured_error(new_id):
    runs: list[str] = []

    class Lying(InMemoryApprovalStore):
        async def create(self, **kw: Any) -> Any:
            return new_id

    async with _deck(
        runs, inline_plugin(tooldeck_approval_store=lambda settings: Lying(), name="lying")
    ) as deck:
        session = deck.session()
        result = await session.call("wipe", {"target": "a"})
    assert result.error is not None
    assert result.error.code in {ErrorCode.PLUGIN_ERROR, ErrorCode.TIMEOUT}
    assert "approval store" in result.error.message
    assert session.pending_approvals() == {} and runs == []


async def test_resume_runs_the_call_once_even_when_it_no_longer_needs_the_approval():
    """The tool became always-allowed between the request and its resume: the call runs
    without consuming the approval, and a second resume (a retried request, a double click)
    must not run it again."""
    runs: list[str] = []
    async with _deck(runs) as deck:
        session = deck.session()
        pending = await session.call("wipe", {"target": "once"})
        approval = pending.error.details["approval_id"]
        session.always_allow("wipe")
        first = await session.resume(approval)
        second = await session.resume(approval)
    assert first.success
    assert second.error is not None and second.error.code is ErrorCode.PERMISSION_DENIED
    assert runs == ["once"]


async def test_concurrent_resumes_of_one_approval_run_it_once():
    runs: list[str] = []
    async with _deck(runs) as deck:
        session = deck.session()
        pending = await session.call("wipe", {"target": "race"})
        approval = pending.error.details["approval_id"]
        session.always_allow("wipe")  # no consume() left to arbitrate between the two
        results: list[Any] = []

        async def resume() -> None:
            results.append(await session.resume(approval))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(resume)
            nursery.start_soon(resume)
    assert sorted(r.success for r in results) == [False, True]
    assert runs == ["race"]


@pytest.mark.parametrize("change", ["version", "security", "description"])
async def test_an_approval_does_not_survive_a_change_of_the_tool(change):
    """The user approved the tool as it was (its version, its security, what it said it does):
    the same name registered again with another definition needs a new approval."""
    runs: list[str] = []
    tool = _wipe_tool(runs, sandbox=False)
    async with make_deck(load_entry_points=STAGES, tools=[tool]) as deck:
        session = deck.session()
        pending = await session.call("wipe", {"target": "t"})
        approval = pending.error.details["approval_id"]
        assert await session.approve(approval)
        await deck.remove_tools(["wipe"])
        if change == "version":
            replacement = attrs.evolve(tool, version="2.0.0")
        elif change == "security":  # approved without network access, now with it
            replacement = attrs.evolve(tool, security=attrs.evolve(tool.security, network=True))
        else:
            replacement = attrs.evolve(tool, description="Wipe a target and its backups.")
        await deck.add_tools([replacement])
        result = await session.call("wipe", {"target": "t"}, approval_id=approval)
    assert result.error is not None and result.error.code is ErrorCode.PERMISSION_DENIED
    assert runs == []


async def test_an_approval_survives_the_same_tool_registered_again():
    """The same definition registered again (by the same plugin) keeps the approval valid."""
    runs: list[str] = []
    tool = _wipe_tool(runs)
    async with make_deck(load_entry_points=STAGES) as deck:
        await deck.add_tools([tool])
        session = deck.session()
        pending = await session.call("wipe", {"target": "t"})
        approval = pending.error.details["approval_id"]
        assert await session.approve(approval)
        await deck.remove_tools(["wipe"])
        await deck.add_tools([tool])
        result = await session.call("wipe", {"target": "t"}, approval_id=approval)
    assert result.success and runs == ["t"]


async def test_an_approval_is_bound_to_the_working_directory(tmp_path):
    """Relative paths mean other files in another workdir: an approval given in one session
    is not valid for the same session id opened on another directory (workers sharing a
    store, a session re-opened elsewhere)."""
    runs: list[str] = []
    store = InMemoryApprovalStore()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with _deck(
        runs, inline_plugin(tooldeck_approval_store=lambda settings: store, name="shared")
    ) as deck:
        first = deck.session(session_id="conv-1", workdir=tmp_path / "a")
        pending = await first.call("wipe", {"target": "notes.txt"})
        approval = pending.error.details["approval_id"]
        assert await first.approve(approval)
        elsewhere = deck.session(session_id="conv-1", workdir=tmp_path / "b")
        result = await elsewhere.call("wipe", {"target": "notes.txt"}, approval_id=approval)
        assert result.error is not None and result.error.code is ErrorCode.PERMISSION_DENIED
        again = await first.call("wipe", {"target": "notes.txt"}, approval_id=approval)
    assert again.success and runs == ["notes.txt"]


async def test_one_sessions_flood_does_not_evict_another_sessions_approval():
    """A model that asks for thousands of approvals in its session must not push out the
    approval another session's user already gave."""
    store = InMemoryApprovalStore(max_pending=100)
    approval = await store.create(session_id="victim", tool="wipe", arguments_hash="h", ttl_s=600)
    assert await store.resolve(approval, True, session_id="victim")
    for i in range(1000):
        await store.create(session_id="attacker", tool="wipe", arguments_hash=str(i), ttl_s=600)
    assert await store.consume(
        approval_id=approval, session_id="victim", tool="wipe", arguments_hash="h"
    )


async def test_the_store_stays_bounded_under_a_flood_of_many_sessions():
    store = InMemoryApprovalStore(max_pending=50)
    for i in range(500):
        await store.create(session_id=f"s{i % 7}", tool="wipe", arguments_hash=str(i), ttl_s=600)
    assert len(store._items) <= 50


@pytest.mark.parametrize("how", ["assign_level", "assign_grants"])
async def test_tightening_a_session_by_assignment_applies_to_the_next_call(how):
    """``session.max_level`` and friends are plain attributes: an application that lowers the
    level (or replaces the grants) mid-conversation must not keep being judged by the snapshot
    taken before."""
    runs: list[str] = []
    moderate = attrs.evolve(
        _wipe_tool(runs), name="tidy", security=SecurityConfig(level="moderate")
    )
    async with make_deck(load_entry_points=STAGES, tools=[_wipe_tool(runs), moderate]) as deck:
        session = deck.session(grants=["shell"])

        async def yes(request: Any) -> bool:
            return True

        session.confirm = yes
        assert (await session.call("tidy", {"target": "1"})).success
        assert (await session.call("wipe", {"target": "1"})).success
        # Both used this turn already: the snapshot taken by this call stays current.
        assert (await session.call("tidy", {"target": "1"})).success
        if how == "assign_level":
            session.max_level = "safe"  # type: ignore[assignment]
            refused = [await session.call(n, {"target": "2"}) for n in ("tidy", "wipe")]
        else:
            session.grants = set()
            refused = [await session.call("tidy", {"target": "2"})]
    assert all(r.error is not None for r in refused), refused
    assert all(r.error.code is ErrorCode.PERMISSION_DENIED for r in refused)
    assert runs == ["1", "1", "1"]


async def test_a_policy_allow_does_not_skip_the_confirmation_of_a_tool_configured_dangerous():
    """Per-tool configuration marks the tool dangerous; a policy plugin that says allow (or
    thinks it safe) does not lift the confirmation: deny > ask > allow."""
    from tooldeck import Decision

    runs: list[str] = []
    safe = attrs.evolve(_wipe_tool(runs), security=SecurityConfig(level="safe"))

    def lenient(call: Any, tool: Any, session: Any) -> Any:
        return Decision.allow()

    deck = make_deck(
        inline_plugin(tooldeck_authorize_call=lenient, name="lenient"),
        load_entry_points=STAGES,
        tools=[safe],
        config={"tools": {"wipe": {"security": {"level": "dangerous"}}}},
    )
    async with deck:
        result = await deck.session().call(
            "wipe", {"target": "x", "confirmed": True, "__approved__": True}
        )
        plain = await deck.session().call("wipe", {"target": "x"})
    # Extra fields that look like an approval are either refused by the schema or ignored.
    assert result.error is not None
    assert result.error.code in {ErrorCode.CONFIRMATION_REQUIRED, ErrorCode.INVALID_ARGUMENTS}
    assert plain.error is not None and plain.error.code is ErrorCode.CONFIRMATION_REQUIRED
    assert runs == []
