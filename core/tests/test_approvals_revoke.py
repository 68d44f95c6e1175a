"""Taking approvals back and keeping them through failures: an "always allow" lapses when the
tool changes, deny() revokes an approval given but not yet used, and a resume that the approval
store failed (raised, timed out) can be retried."""

from __future__ import annotations

import threading
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from tooldeck import ErrorCode, ExecutionConfig, RateLimit, SecurityConfig, ToolDefinition
from tooldeck._approvals import InMemoryApprovalStore
from tooldeck.testing import inline_plugin, make_deck

STAGES = ["schema", "runner", "policy"]


def _wipe_tool(runs: list[str], **changes: Any) -> ToolDefinition:
    def wipe(target: str) -> str:
        runs.append(target)
        return target

    tool = ToolDefinition(
        name="wipe",
        version="1.0.0",
        description="Wipe a target.",
        category="shell",
        parameters={
            "type": "object",
            "properties": {"target": {"type": "string"}},
            "required": ["target"],
        },
        security=SecurityConfig(level="dangerous"),
        execute=wipe,
        call_style="kwargs",
    )
    return attrs.evolve(tool, **changes)


def _store_plugin(store: Any) -> object:
    return inline_plugin(tooldeck_approval_store=lambda settings: store, name="store")


def _code(result: Any) -> Any:
    return result.error.code if result.error is not None else None


async def _ask(session: Any, target: str = "t") -> str:
    pending = await session.call("wipe", {"target": target})
    assert _code(pending) is ErrorCode.CONFIRMATION_REQUIRED, pending
    return str(pending.error.details["approval_id"])


# ---------------------------------------------------------------- always allow


def _replacement(tool: ToolDefinition, change: str) -> ToolDefinition:
    if change == "version":
        return attrs.evolve(tool, version="2.0.0")
    if change == "description":  # what the user read when they said "always"
        return attrs.evolve(tool, description="Wipe a target and every backup of it.")
    if change == "parameters":
        parameters = {
            **tool.parameters,
            "properties": {"target": {"type": "string"}, "recursive": {"type": "boolean"}},
        }
        return attrs.evolve(tool, parameters=parameters)
    if change == "security":  # allowed without network access, now with it
        return attrs.evolve(tool, security=attrs.evolve(tool.security, network=True))
    assert change == "plugin"  # another pack registering the same name
    return attrs.evolve(tool, plugin="evil-pack")


CHANGES = ["version", "description", "parameters", "security", "plugin"]


@pytest.mark.parametrize("stages", [STAGES, ["schema", "runner"]], ids=["policy", "core-only"])
@pytest.mark.parametrize("change", CHANGES)
async def test_always_allow_lapses_when_the_tool_is_registered_again_differently(change, stages):
    """The user said "always" for the tool they saw: the same name registered again with another
    definition (another plugin, a reloaded MCP server, add_tools at runtime) asks again, in the
    core's baseline and in the policy plugin alike."""
    runs: list[str] = []
    tool = _wipe_tool(runs)
    async with make_deck(load_entry_points=stages, tools=[tool]) as deck:
        session = deck.session()
        session.always_allow("wipe")
        assert (await session.call("wipe", {"target": "before"})).success
        await deck.remove_tools(["wipe"])
        await deck.add_tools([_replacement(tool, change)])
        after = await session.call("wipe", {"target": "after"})
        assert _code(after) is ErrorCode.CONFIRMATION_REQUIRED
        assert not session.is_always_allowed("wipe")
    assert runs == ["before"]


async def test_an_always_answer_binds_to_the_definition_the_user_was_shown():
    runs: list[str] = []
    asked: list[str] = []
    tool = _wipe_tool(runs)

    async def confirm(request: Any) -> Any:
        asked.append(request.tool.description)
        return "always"

    async with make_deck(load_entry_points=STAGES, tools=[tool]) as deck:
        session = deck.session(confirm=confirm)
        assert (await session.call("wipe", {"target": "1"})).success
        assert (await session.call("wipe", {"target": "2"})).success  # not asked again
        await deck.remove_tools(["wipe"])
        changed = _replacement(tool, "description")
        await deck.add_tools([changed])
        assert (await session.call("wipe", {"target": "3"})).success  # asked: a new "always"
        assert (await session.call("wipe", {"target": "4"})).success  # bound to the new one
    assert asked == [tool.description, changed.description]
    assert runs == ["1", "2", "3", "4"]


async def test_always_allow_survives_the_same_definition_registered_again():
    runs: list[str] = []
    tool = _wipe_tool(runs)
    async with make_deck(load_entry_points=STAGES) as deck:
        await deck.add_tools([tool])
        session = deck.session()
        session.always_allow("wipe")
        await deck.remove_tools(["wipe"])
        await deck.add_tools([tool])
        assert session.is_always_allowed("wipe")
        # Not bound to the arguments: any arguments of the same tool.
        assert (await session.call("wipe", {"target": "a"})).success
        assert (await session.call("wipe", {"target": "b"})).success
    assert runs == ["a", "b"]


async def test_an_always_allow_given_by_assignment_binds_at_its_first_use():
    """``session.always_allowed`` is a plain set an application may assign: a name put there
    directly is bound to the definition it first runs as, and lapses like the others."""
    runs: list[str] = []
    tool = _wipe_tool(runs)
    async with make_deck(load_entry_points=STAGES, tools=[tool]) as deck:
        session = deck.session()
        session.always_allowed = {"wipe"}
        assert (await session.call("wipe", {"target": "1"})).success
        await deck.remove_tools(["wipe"])
        await deck.add_tools([_replacement(tool, "version")])
        assert _code(await session.call("wipe", {"target": "2"})) is (
            ErrorCode.CONFIRMATION_REQUIRED
        )
    assert runs == ["1"]


# ---------------------------------------------------------------- deny revokes


async def test_deny_revokes_an_approval_given_but_not_yet_used():
    runs: list[str] = []
    async with make_deck(load_entry_points=STAGES, tools=[_wipe_tool(runs)]) as deck:
        session = deck.session()
        approval = await _ask(session)
        assert await session.approve(approval)
        assert await session.deny(approval)  # the user changed their mind
        direct = await session.call("wipe", {"target": "t"}, approval_id=approval)
        resumed = await session.resume(approval)
        assert not await session.approve(approval)  # a denial is final
    assert _code(direct) is ErrorCode.PERMISSION_DENIED
    assert _code(resumed) is ErrorCode.PERMISSION_DENIED
    assert runs == []


async def test_resume_with_a_no_revokes_an_approval_given_earlier():
    runs: list[str] = []
    async with make_deck(load_entry_points=STAGES, tools=[_wipe_tool(runs)]) as deck:
        session = deck.session()
        approval = await _ask(session)
        assert await session.approve(approval)
        refused = await session.resume(approval, approved=False)
        direct = await session.call("wipe", {"target": "t"}, approval_id=approval)
    assert _code(refused) is ErrorCode.PERMISSION_DENIED
    assert _code(direct) is ErrorCode.PERMISSION_DENIED
    assert runs == []


async def test_deny_of_a_used_approval_answers_false():
    runs: list[str] = []
    async with make_deck(load_entry_points=STAGES, tools=[_wipe_tool(runs)]) as deck:
        session = deck.session()
        approval = await _ask(session)
        assert (await session.resume(approval)).success
        assert not await session.deny(approval)  # too late: it ran
    assert runs == ["t"]


async def test_another_session_cannot_revoke_an_approval():
    """Revoking is deciding: only the session that asked may do it (one session must not be
    able to cancel what another session's user approved)."""
    runs: list[str] = []
    store = InMemoryApprovalStore()
    async with make_deck(
        _store_plugin(store), load_entry_points=STAGES, tools=[_wipe_tool(runs)]
    ) as deck:
        owner = deck.session(session_id="owner")
        approval = await _ask(owner)
        assert await owner.approve(approval)
        assert not await deck.session(session_id="intruder").deny(approval)
        assert (await owner.resume(approval)).success
    assert runs == ["t"]


async def test_deny_during_a_resume_stops_the_call_before_it_runs():
    """The user takes the approval back while its call is still in policy: the approval store
    arbitrates, and the call is refused."""
    runs: list[str] = []
    blocking, entered, gate = threading.Event(), threading.Event(), threading.Event()

    def slow_policy(call: Any, tool: Any, session: Any) -> None:
        if blocking.is_set():
            entered.set()
            gate.wait(10)

    async with make_deck(
        inline_plugin(tooldeck_authorize_call=slow_policy, name="slow"),
        load_entry_points=STAGES,
        tools=[_wipe_tool(runs)],
    ) as deck:
        session = deck.session()
        approval = await _ask(session)
        blocking.set()
        results: list[Any] = []

        async def resume() -> None:
            results.append(await session.resume(approval))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(resume)
            await trio.to_thread.run_sync(entered.wait, 10)
            assert await session.deny(approval)
            gate.set()
    assert _code(results[0]) is ErrorCode.PERMISSION_DENIED
    assert runs == []


class _OldStore(InMemoryApprovalStore):
    """A third-party store written before ``resolve`` took ``session_id``."""

    async def resolve(self, approval_id: str, approved: bool) -> bool:  # type: ignore[override]
        return await super().resolve(approval_id, approved)


async def test_deny_reaches_a_store_without_session_id():
    runs: list[str] = []
    store = _OldStore()
    async with make_deck(
        _store_plugin(store), load_entry_points=STAGES, tools=[_wipe_tool(runs)]
    ) as deck:
        session = deck.session()
        approval = await _ask(session)
        assert await session.approve(approval)
        assert await session.deny(approval)
        direct = await session.call("wipe", {"target": "t"}, approval_id=approval)
    assert _code(direct) is ErrorCode.PERMISSION_DENIED
    assert runs == []


async def test_a_deny_the_store_failed_to_record_still_holds_in_this_session():
    """The store raised while the user denied: the application hears of it, and this session
    refuses the approval all the same (it cannot be resumed or answered any more)."""
    runs: list[str] = []

    class DenyFails(InMemoryApprovalStore):
        async def resolve(self, approval_id: str, approved: bool, **kw: Any) -> bool:
            if not approved:
                raise ConnectionError("store unreachable")
            return await super().resolve(approval_id, approved, **kw)

    async with make_deck(
        _store_plugin(DenyFails()), load_entry_points=STAGES, tools=[_wipe_tool(runs)]
    ) as deck:
        session = deck.session()
        approval = await _ask(session)
        assert await session.approve(approval)
        with pytest.raises(ConnectionError):
            await session.deny(approval)
        direct = await session.call("wipe", {"target": "t"}, approval_id=approval)
        resumed = await session.resume(approval)
    assert _code(direct) is ErrorCode.PERMISSION_DENIED
    assert _code(resumed) is ErrorCode.PERMISSION_DENIED
    assert runs == []


async def test_the_in_memory_store_revokes_only_what_was_not_used():
    store = InMemoryApprovalStore()
    call = {"session_id": "s", "tool": "wipe", "arguments_hash": "h"}
    revoked = await store.create(**call, ttl_s=60)
    assert await store.resolve(revoked, True, session_id="s")
    assert not await store.resolve(revoked, False, session_id="other")
    assert await store.resolve(revoked, False, session_id="s")
    assert not await store.resolve(revoked, True, session_id="s")
    assert not await store.resolve(revoked, False, session_id="s")
    assert not await store.consume(approval_id=revoked, **call)
    used = await store.create(**call, ttl_s=60)
    assert await store.resolve(used, True, session_id="s")
    assert await store.consume(approval_id=used, **call)
    assert not await store.resolve(used, False, session_id="s")


# ---------------------------------------------------------------- a failed resume is retried


class _FlakyStore(InMemoryApprovalStore):
    """``consume`` fails the first ``failures`` times: raises, or hangs past the deadline."""

    def __init__(self, failures: int, how: str) -> None:
        super().__init__()
        self.failures = failures
        self.how = how
        self.consumes = 0

    async def consume(self, **kw: Any) -> bool:
        self.consumes += 1
        if self.failures > 0:
            self.failures -= 1
            if self.how == "raise":
                raise ConnectionError("approval store unreachable")
            await trio.sleep(30)
        return await super().consume(**kw)


def _quick(runs: list[str]) -> ToolDefinition:
    return _wipe_tool(runs, execution=ExecutionConfig(timeout_s=0.2))


@pytest.mark.parametrize(
    ("how", "code"), [("raise", ErrorCode.PLUGIN_ERROR), ("hang", ErrorCode.TIMEOUT)]
)
async def test_a_resume_the_store_failed_can_be_retried(how, code):
    runs: list[str] = []
    store = _FlakyStore(1, how)
    async with make_deck(
        _store_plugin(store), load_entry_points=STAGES, tools=[_quick(runs)]
    ) as deck:
        session = deck.session()
        approval = await _ask(session)
        failed = await session.resume(approval)
        assert _code(failed) is code
        assert approval in session.pending_approvals()
        retried = await session.resume(approval)
        again = await session.resume(approval)
    assert retried.success
    assert _code(again) is ErrorCode.PERMISSION_DENIED
    assert store.consumes == 2 and runs == ["t"]


class _HangingApprove(InMemoryApprovalStore):
    """``resolve`` (the approve step of a resume) hangs the first time."""

    def __init__(self) -> None:
        super().__init__()
        self.hung = False

    async def resolve(self, approval_id: str, approved: bool, **kw: Any) -> bool:
        if approved and not self.hung:
            self.hung = True
            await trio.sleep_forever()
        return await super().resolve(approval_id, approved, **kw)


async def test_a_resume_whose_approve_step_hangs_times_out_and_can_be_retried():
    runs: list[str] = []
    store = _HangingApprove()
    async with make_deck(
        _store_plugin(store), load_entry_points=STAGES, tools=[_quick(runs)]
    ) as deck:
        session = deck.session()
        approval = await _ask(session)
        with trio.fail_after(10):  # the call's 0.2 s deadline bounds it, not this guard
            hung = await session.resume(approval)
        assert _code(hung) is ErrorCode.TIMEOUT
        assert approval in session.pending_approvals() and runs == []
        retried = await session.resume(approval)
    assert retried.success and runs == ["t"]


async def test_a_resume_refused_by_the_store_is_dropped():
    runs: list[str] = []
    async with make_deck(load_entry_points=STAGES, tools=[_wipe_tool(runs)]) as deck:
        session = deck.session()
        approval = await _ask(session)
        deck._approvals._items[approval].state = "denied"  # decided elsewhere (another worker)
        refused = await session.resume(approval)
        assert _code(refused) is ErrorCode.PERMISSION_DENIED
        assert approval not in session.pending_approvals()
    assert runs == []


async def test_a_failure_after_the_approval_was_used_does_not_bring_it_back():
    """The rate limiter broke after ``consume`` used the approval: a PLUGIN_ERROR too, but the
    approval is gone, so the pending call is too (a retry could only be refused)."""
    runs: list[str] = []

    class BrokenLimiter:
        async def hit(self, tool: Any, session: Any) -> Any:
            raise ConnectionError("limiter unreachable")

    limited = _wipe_tool(
        runs,
        security=SecurityConfig(level="dangerous", rate_limit=RateLimit(max_calls=5, window_s=60)),
    )
    async with make_deck(
        inline_plugin(tooldeck_rate_limiter=lambda settings: BrokenLimiter(), name="broken"),
        load_entry_points=STAGES,
        tools=[limited],
    ) as deck:
        session = deck.session()
        approval = await _ask(session)
        failed = await session.resume(approval)
        assert _code(failed) is ErrorCode.PLUGIN_ERROR
        assert approval not in session.pending_approvals()
    assert runs == []


async def test_a_resume_denied_while_the_store_was_failing_is_not_brought_back():
    """The user denies while a resume is stuck on the store; the resume then fails: the denial
    wins, nothing comes back to resume."""
    runs: list[str] = []
    release = trio.Event()

    class Stuck(InMemoryApprovalStore):
        async def consume(self, **kw: Any) -> bool:
            await release.wait()
            raise ConnectionError("approval store unreachable")

    async with make_deck(
        _store_plugin(Stuck()), load_entry_points=STAGES, tools=[_wipe_tool(runs)]
    ) as deck:
        session = deck.session()
        approval = await _ask(session)
        results: list[Any] = []

        async def resume() -> None:
            results.append(await session.resume(approval))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(resume)
            await trio.testing.wait_all_tasks_blocked()
            await session.deny(approval)
            release.set()
        assert _code(results[0]) is ErrorCode.PLUGIN_ERROR
        assert approval not in session.pending_approvals()
        assert _code(await session.resume(approval)) is ErrorCode.PERMISSION_DENIED
    assert runs == []


async def test_concurrent_resumes_while_the_store_fails_run_the_call_at_most_once():
    runs: list[str] = []
    store = _FlakyStore(1, "raise")
    async with make_deck(
        _store_plugin(store), load_entry_points=STAGES, tools=[_wipe_tool(runs)]
    ) as deck:
        session = deck.session()
        approval = await _ask(session)
        results: list[Any] = []

        async def resume() -> None:
            results.append(await session.resume(approval))

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(resume)
        results.append(await session.resume(approval))
    assert [_code(r) for r in results].count(ErrorCode.PLUGIN_ERROR) == 1
    assert [r.success for r in results].count(True) == 1
    assert runs == ["t"]
