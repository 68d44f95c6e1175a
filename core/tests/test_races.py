"""Races in the call pipeline: what the session allows changes (or is asked twice) while a call
waits for policy, the user or the approval store. Each interleaving is forced with events, never
with sleeps: a call is parked exactly where the race happens, the other side acts, and the call
goes on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio

from tooldeck import ErrorCode, SecurityConfig, ToolDefinition
from tooldeck._approvals import InMemoryApprovalStore
from tooldeck.testing import inline_plugin, make_deck

STAGES = ["schema", "runner", "policy"]


def _tool(runs: list[str], *, level: str = "moderate", confirm: bool = True) -> ToolDefinition:
    def wipe(target: str) -> str:
        runs.append(target)
        return target

    return ToolDefinition(
        name="wipe",
        version="1.0.0",
        description="Wipe a target.",
        category="shell",
        parameters={
            "type": "object",
            "properties": {"target": {"type": "string"}},
            "required": ["target"],
        },
        security=SecurityConfig(level=level, require_confirm=confirm),
        execute=wipe,
        call_style="kwargs",
    )


def _code(result: Any) -> Any:
    return result.error.code if result.error is not None else None


class _ParkedConfirm:
    """A ``confirm`` callback that parks on ``answer`` (then approves) once it has set
    ``asked``: the user is being asked, and the race's other side acts meanwhile."""

    def __init__(self) -> None:
        self.asked = trio.Event()
        self.answer = trio.Event()
        self.questions: list[str] = []

    async def __call__(self, request: Any) -> bool:
        self.questions.append(request.tool.name)
        self.asked.set()
        await self.answer.wait()
        return True


class _GatedStore(InMemoryApprovalStore):
    """The in-memory store, with ``consume`` parked on ``gate`` once ``armed``: a remote store
    (Redis) answers after a round trip, and the session may change meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.reached = trio.Event()
        self.gate = trio.Event()

    async def consume(self, **kwargs: Any) -> bool:
        if self.armed:
            self.reached.set()
            await self.gate.wait()
        return await super().consume(**kwargs)


async def _while_parked(
    call: Callable[[], Awaitable[Any]], parked: trio.Event, act: Callable[[], None]
) -> Any:
    """Run ``call``; once it is ``parked``, ``act`` (the race's other side) and let it go on.
    ``act`` must release the call."""
    results: list[Any] = []

    async def go() -> None:
        results.append(await call())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(go)
        await parked.wait()
        act()
    return results[0]


# ------------------------------------------------- the session changes during the confirmation


@pytest.mark.parametrize("change", ["revoke", "max_level", "assign"])
async def test_a_session_tightened_while_the_user_is_asked_refuses_the_call(change: str) -> None:
    """The user says yes after the application took the grant back (or lowered the level): the
    call was authorized before the wait, but it must be judged by the session as it is when
    its tool would start."""
    runs: list[str] = []
    confirm = _ParkedConfirm()
    async with make_deck(load_entry_points=STAGES, tools=[_tool(runs)]) as deck:
        session = deck.session(grants={"shell"}, confirm=confirm)

        def tighten() -> None:
            if change == "revoke":
                session.revoke("shell")
            elif change == "max_level":
                session.max_level = "safe"
            else:
                session.grants = set()  # assigning the field is obeyed as revoke() is
            confirm.answer.set()

        result = await _while_parked(
            lambda: session.call("wipe", {"target": "a"}), confirm.asked, tighten
        )
    assert _code(result) is ErrorCode.PERMISSION_DENIED, result
    assert runs == []


async def test_a_loosened_session_does_not_ask_the_user_twice() -> None:
    """Judged again after an unrelated change, a call the user already approved runs, without
    a second question."""
    runs: list[str] = []
    confirm = _ParkedConfirm()
    async with make_deck(load_entry_points=STAGES, tools=[_tool(runs)]) as deck:
        session = deck.session(grants={"shell"}, confirm=confirm)

        def loosen() -> None:
            session.grant("filesystem")
            confirm.answer.set()

        result = await _while_parked(
            lambda: session.call("wipe", {"target": "a"}), confirm.asked, loosen
        )
    assert result.success, result
    assert runs == ["a"] and confirm.questions == ["wipe"]


# --------------------------------------------- the session changes while the store is asked


async def test_a_revoke_while_the_approval_is_being_used_refuses_the_call() -> None:
    """The resumed call passed policy and waits for the store to use its approval (a round
    trip to Redis); the application revokes the grant meanwhile: the call must not run."""
    runs: list[str] = []
    store = _GatedStore()
    plugin = inline_plugin(tooldeck_approval_store=lambda settings: store, name="store")
    async with make_deck(plugin, load_entry_points=STAGES, tools=[_tool(runs)]) as deck:
        session = deck.session(grants={"shell"})
        pending = await session.call("wipe", {"target": "a"})
        assert _code(pending) is ErrorCode.CONFIRMATION_REQUIRED
        approval = pending.error.details["approval_id"]
        store.armed = True

        def revoke() -> None:
            session.revoke("shell")
            store.gate.set()

        result = await _while_parked(lambda: session.resume(approval), store.reached, revoke)
    assert _code(result) is ErrorCode.PERMISSION_DENIED, result
    assert runs == []


async def test_an_always_allow_taken_back_while_policy_runs_asks_the_user() -> None:
    """A tool always-allowed when its call was judged, no longer when its tool would start
    (the application cleared the always-allows while a policy hook ran in its thread): the
    call asks for confirmation instead of running unasked."""
    runs: list[str] = []
    entered, leave = trio.Event(), trio.Event()
    token = trio.lowlevel.current_trio_token()

    def slow_policy(call: Any, tool: Any, session: Any) -> None:
        # A blocking hook (it has no @nonblocking): the core runs it in a worker thread.
        token.run_sync_soon(entered.set)
        trio.from_thread.run(leave.wait, trio_token=token)
        return None

    policy = inline_plugin(tooldeck_authorize_call=slow_policy, name="slow")
    async with make_deck(
        policy, load_entry_points=STAGES, tools=[_tool(runs, level="dangerous")]
    ) as deck:
        session = deck.session(grants={"shell"})
        session.always_allow("wipe")

        def take_back() -> None:
            session.always_allowed = set()
            leave.set()

        result = await _while_parked(
            lambda: session.call("wipe", {"target": "a"}), entered, take_back
        )
        assert _code(result) is ErrorCode.CONFIRMATION_REQUIRED, result
        assert session.pending_approvals() != {}
    assert runs == []


# ------------------------------------------- the tool changes while the user is asked


@pytest.mark.parametrize("how", ["removed", "replaced", "same"])
async def test_a_tool_removed_or_replaced_while_the_user_is_asked_does_not_run(how: str) -> None:
    """The user approves the definition they were shown; meanwhile the deck removed the tool
    (or registered another definition under its name: an MCP server reloaded). The removed
    definition used to run all the same. The same definition registered again still runs."""
    runs: list[str] = []
    confirm = _ParkedConfirm()
    original = _tool(runs, level="dangerous")
    async with make_deck(load_entry_points=STAGES, tools=[original]) as deck:
        session = deck.session(grants={"shell"}, confirm=confirm)
        results: list[Any] = []

        async def call() -> None:
            results.append(await session.call("wipe", {"target": "a"}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await confirm.asked.wait()
            plugin = deck.catalog.get("wipe").plugin
            await deck.remove_tools(["wipe"])
            if how == "replaced":
                changed = attrs.evolve(original, description="Wipe everything.")
                await deck.add_tools([changed], plugin=plugin)
            elif how == "same":
                await deck.add_tools([attrs.evolve(original)], plugin=plugin)
            confirm.answer.set()
    expected = {
        "removed": ErrorCode.TOOL_NOT_FOUND,
        "replaced": ErrorCode.PERMISSION_DENIED,
        "same": None,
    }[how]
    assert _code(results[0]) is expected, results[0]
    assert runs == ([] if expected else ["a"])


# ------------------------------------------------------------ one approval, answered twice


@pytest.mark.parametrize("second", ["resume", "deny"])
async def test_one_approval_resumed_twice_or_resumed_and_denied_runs_at_most_once(
    second: str,
) -> None:
    """Two tasks answer the same approval at once, the store parked so that both are inside
    before either is answered: a resume and a resume run the call once; a resume and a deny
    run it at most once, and not at all when the deny came before the approval was used."""
    runs: list[str] = []
    store = _GatedStore()
    plugin = inline_plugin(tooldeck_approval_store=lambda settings: store, name="store")
    async with make_deck(plugin, load_entry_points=STAGES, tools=[_tool(runs)]) as deck:
        session = deck.session(grants={"shell"})
        pending = await session.call("wipe", {"target": "a"})
        approval = pending.error.details["approval_id"]
        store.armed = True
        results: list[Any] = []
        denied: list[bool] = []

        async def resume() -> None:
            results.append(await session.resume(approval))

        async def other() -> None:
            await store.reached.wait()  # the first resume is using the approval right now
            if second == "resume":
                await resume()
            else:
                denied.append(await session.deny(approval))
            store.gate.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(resume)
            nursery.start_soon(other)
    assert len(runs) <= 1
    if second == "resume":
        assert runs == ["a"]
        assert sorted(_code(r) is None for r in results) == [False, True]
    else:
        # The deny came before the store answered: the call is refused (in this session at
        # once, and by the store, which lets a revoke win over a use not yet made).
        assert denied == [True] and runs == []
        assert _code(results[0]) is ErrorCode.PERMISSION_DENIED


# ------------------------------------------------------------- one deck, two trio runs


def test_a_second_trio_run_calling_while_the_first_is_busy_fails_loudly() -> None:
    """A deck's limiters, locks and executor belong to one trio run: a second run (another
    thread) calling while the first has calls in flight used to get scattered PLUGIN_ERRORs
    ("must be called from async context", AssertionError in the executor) and break the first
    run's calls. It is refused with a RuntimeError that names the portal; once the first run
    is idle, another run may use the deck."""
    import threading

    runs: list[str] = []
    inside, release = threading.Event(), threading.Event()

    async def hold(target: str) -> str:
        runs.append(target)
        if target == "first":
            inside.set()
            await trio.to_thread.run_sync(release.wait)
        return target

    tool = ToolDefinition(
        name="hold",
        description="Hold until released.",
        category="api",
        parameters={"type": "object", "properties": {"target": {"type": "string"}}},
        execute=hold,
        call_style="kwargs",
    )
    deck = make_deck(load_entry_points=["schema", "runner"], tools=[tool])
    session = deck.session()
    first: list[Any] = []

    def first_run() -> None:
        first.append(trio.run(session.call, "hold", {"target": "first"}))

    thread = threading.Thread(target=first_run)
    thread.start()
    try:
        assert inside.wait(30)
        with pytest.raises(RuntimeError, match="another trio run.*tooldeck.portal"):
            trio.run(session.call, "hold", {"target": "second"})
    finally:
        release.set()
        thread.join(30)
    assert first[0].success and runs == ["first"]
    later = trio.run(session.call, "hold", {"target": "later"})
    assert later.success and runs == ["first", "later"]


async def test_cancel_while_the_approval_is_being_used_stops_the_call() -> None:
    """cancel() lands while the resumed call waits for the store to use its approval: the call
    answers CANCELLED and its tool never runs, even though the store then says yes."""
    runs: list[str] = []
    store = _GatedStore()
    plugin = inline_plugin(tooldeck_approval_store=lambda settings: store, name="store")
    async with make_deck(plugin, load_entry_points=STAGES, tools=[_tool(runs)]) as deck:
        session = deck.session(grants={"shell"})
        pending = await session.call("wipe", {"target": "a"})
        approval = pending.error.details["approval_id"]
        store.armed = True

        def cancel() -> None:
            session.cancel()
            store.gate.set()

        result = await _while_parked(lambda: session.resume(approval), store.reached, cancel)
    assert _code(result) is ErrorCode.CANCELLED, result
    assert runs == []
