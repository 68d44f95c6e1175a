"""The call pipeline of Deck/Session with the real schema and runner plugins and inline policies."""

from __future__ import annotations

from typing import Literal

import pytest
import trio
import trio.testing

from tooldeck import (
    Decision,
    ErrorCode,
    Exclusion,
    RateLimitOutcome,
    ScoredTool,
    SecurityConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolFailure,
    ToolResult,
    tool,
)
from tooldeck.testing import inline_plugin, make_deck

STAGES = ["schema", "runner"]


@tool(category="demo")
def greet(name: str, times: int = 1, style: Literal["plain", "loud"] = "plain") -> str:
    """Greet someone.

    Args:
        name: who to greet
        times: how many times
        style: plain or loud
    """
    text = " ".join([f"hello {name}"] * times)
    return text.upper() if style == "loud" else text


@tool(category="demo")
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await trio.sleep(seconds)
    return "done"


@tool(category="demo")
def explode() -> None:
    """Always fails."""
    raise RuntimeError("boom")


@tool(category="demo")
def refuse() -> None:
    """Fails with a structured error of its own."""
    raise ToolFailure(ErrorCode.PATH_NOT_ALLOWED, "outside", suggestion="stay inside")


def wipe(target: str, context: ToolContext) -> dict:
    """A dangerous tool that records where it ran."""
    return {"target": target, "session": context.session_id}


def _deck(*plugins, config=None, **kw):
    return make_deck(
        *plugins,
        config=config,
        load_entry_points=STAGES,
        tools=[greet, slow, explode, refuse],
        **kw,
    )


async def test_decorated_function_runs_and_metadata_is_filled():
    async with _deck() as deck:
        session = deck.session()
        result = await session.call("greet", {"name": "ada", "times": 2})
    assert result.success and result.data == "hello ada hello ada"
    assert result.metadata["cached"] is False
    assert result.metadata["call_id"].startswith("call_")
    assert result.metadata["duration_s"] >= 0
    tool = deck.catalog.get("greet")
    assert tool.plugin == "inline-tools"
    assert tool.parameters["properties"]["style"]["enum"] == ["plain", "loud"]
    assert tool.parameters["properties"]["name"]["description"] == "who to greet"
    assert tool.entrypoint.endswith(":greet")


async def test_invalid_arguments_give_paths_and_suggestion():
    async with _deck() as deck:
        result = await deck.session().call("greet", {"times": "two", "style": "shout"})
    assert result.error.code is ErrorCode.INVALID_ARGUMENTS
    paths = {e["path"] for e in result.error.details["errors"]}
    assert {"$.name", "$.times", "$.style"} <= paths or {"$", "$.times", "$.style"} <= paths
    assert "$.times" in result.error.suggestion


async def test_unknown_tool_suggests_closest_names():
    async with _deck() as deck:
        result = await deck.session().call("greeet", {"name": "x"})
    assert result.error.code is ErrorCode.TOOL_NOT_FOUND
    assert "greet" in result.error.details["candidates"]
    assert "greet" in result.error.suggestion


async def test_tool_exceptions_become_structured_errors():
    async with _deck() as deck:
        session = deck.session()
        crashed = await session.call("explode", {})
        refused = await session.call("refuse", {})
        still_serving = await session.call("greet", {"name": "b"})
    assert crashed.error.code is ErrorCode.EXECUTION_ERROR and "boom" in crashed.error.message
    assert refused.error.code is ErrorCode.PATH_NOT_ALLOWED
    assert refused.error.suggestion == "stay inside"
    assert still_serving.success


async def test_policy_decisions_combine_deny_over_ask_over_allow():
    def tooldeck_authorize_call(call, tool, session):
        if call.arguments.get("name") == "mallory":
            return Decision.deny("mallory is blocked", suggestion="greet someone else")
        if call.arguments.get("name") == "eve":
            return Decision.ask("eve needs approval")
        return Decision.allow()

    def other_policy(call, tool, session):
        return Decision.ask("second opinion") if call.arguments.get("name") == "mallory" else None

    deck = _deck(
        inline_plugin(tooldeck_authorize_call, name="blocker"),
        inline_plugin(tooldeck_authorize_call=other_policy, name="asker"),
    )
    async with deck:
        session = deck.session()
        denied = await session.call("greet", {"name": "mallory"})
        asked = await session.call("greet", {"name": "eve"})
        allowed = await session.call("greet", {"name": "bob"})
    assert denied.error.code is ErrorCode.PERMISSION_DENIED
    assert denied.error.plugin == "blocker" and "mallory is blocked" in denied.error.message
    assert asked.error.code is ErrorCode.CONFIRMATION_REQUIRED
    assert asked.error.details["approval_id"].startswith("apr_")
    assert allowed.success


async def test_policy_plugin_that_raises_fails_closed_and_deck_keeps_serving():
    def tooldeck_authorize_call(call, tool, session):
        if call.arguments.get("name") == "crash":
            raise ValueError("bug in policy")
        return None

    async with _deck(inline_plugin(tooldeck_authorize_call, name="buggy")) as deck:
        session = deck.session()
        broken = await session.call("greet", {"name": "crash"})
        fine = await session.call("greet", {"name": "ok"})
    assert broken.error.code is ErrorCode.PLUGIN_ERROR and "buggy" in broken.error.message
    assert fine.success


def _dangerous_deck(*plugins, config=None):
    wipe_def = ToolDefinition(
        name="wipe",
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
        context_param="context",
    )
    return make_deck(*plugins, config=config, load_entry_points=STAGES, tools=[wipe_def])


async def test_approval_is_bound_single_use_and_resumable():
    async with _dangerous_deck() as deck:
        session = deck.session()
        first = await session.call("wipe", {"target": "a"})
        approval = first.error.details["approval_id"]
        assert first.error.code is ErrorCode.CONFIRMATION_REQUIRED
        # Not approved yet: using the id fails.
        early = await session.call("wipe", {"target": "a"}, approval_id=approval)
        assert early.error.code is ErrorCode.PERMISSION_DENIED
        again = await session.call("wipe", {"target": "a"})
        approval = again.error.details["approval_id"]
        assert await session.approve(approval)
        # Another call (other arguments) cannot use it...
        other = await session.call("wipe", {"target": "b"}, approval_id=approval)
        assert other.error.code is ErrorCode.PERMISSION_DENIED
        # ...another session cannot use it...
        stranger = deck.session()
        stolen = await stranger.call("wipe", {"target": "a"}, approval_id=approval)
        assert stolen.error.code is ErrorCode.PERMISSION_DENIED
        # ...the exact call can, once.
        ran = await session.call("wipe", {"target": "a"}, approval_id=approval)
        assert ran.success and ran.data == {"target": "a", "session": session.id}
        replay = await session.call("wipe", {"target": "a"}, approval_id=approval)
        assert replay.error.code is ErrorCode.PERMISSION_DENIED


async def test_resume_runs_the_pending_call_or_denies_it():
    async with _dangerous_deck() as deck:
        session = deck.session()
        pending = await session.call("wipe", {"target": "x"})
        result = await session.resume(pending.error.details["approval_id"])
        assert result.success and result.data["target"] == "x"
        pending = await session.call("wipe", {"target": "y"})
        denied = await session.resume(pending.error.details["approval_id"], approved=False)
        assert denied.error.code is ErrorCode.PERMISSION_DENIED


async def test_approval_expires():
    async with _dangerous_deck(config={"approvals": {"ttl_s": 0.05}}) as deck:
        session = deck.session()
        pending = await session.call("wipe", {"target": "x"})
        approval = pending.error.details["approval_id"]
        await trio.sleep(0.1)
        assert not await session.approve(approval)
        late = await session.call("wipe", {"target": "x"}, approval_id=approval)
        assert late.error.code is ErrorCode.PERMISSION_DENIED


@pytest.mark.parametrize("answer", [False, "raise", "hang"])
async def test_confirm_callback_that_says_no_raises_or_hangs_means_deny(answer):
    async def confirm(request):
        if answer == "raise":
            raise RuntimeError("ui crashed")
        if answer == "hang":
            await trio.sleep_forever()
        return answer

    async with _dangerous_deck(config={"approvals": {"confirm_timeout_s": 0.1}}) as deck:
        result = await deck.session(confirm=confirm).call("wipe", {"target": "x"})
    assert result.error.code is ErrorCode.PERMISSION_DENIED


async def test_confirm_callback_yes_and_always():
    seen = []

    async def confirm(request):
        seen.append((request.tool.name, dict(request.call.arguments), request.reasons))
        return "always"

    async with _dangerous_deck() as deck:
        session = deck.session(confirm=confirm)
        first = await session.call("wipe", {"target": "1"})
        second = await session.call("wipe", {"target": "2"})
    assert first.success and second.success
    assert len(seen) == 1 and seen[0][0] == "wipe"
    assert "wipe" in session.info().always_allow


async def test_level_above_session_max_is_refused_even_without_policy_plugin():
    async with _dangerous_deck() as deck:
        result = await deck.session(max_level="moderate").call("wipe", {"target": "x"})
    assert result.error.code is ErrorCode.PERMISSION_DENIED


class DictCache:
    def __init__(self):
        self.store, self.gets = {}, 0

    async def get(self, key):
        self.gets += 1
        return self.store.get(key)

    async def put(self, key, result, ttl_s):
        self.store[key] = result

    def statistics(self):
        return {"entries": len(self.store)}


async def test_cache_hit_skips_rate_limit_and_execution():
    calls = []

    @tool(category="demo")
    def counted(x: int) -> int:
        """Count calls."""
        calls.append(x)
        return x * 2

    class Limiter:
        def __init__(self):
            self.hits = 0

        async def hit(self, tool, session):
            self.hits += 1
            return RateLimitOutcome(allowed=self.hits <= 1, retry_after_s=2.5, limit="1/min")

    cache, limiter = DictCache(), Limiter()
    plugin = inline_plugin(
        tooldeck_cache=lambda settings: cache,
        tooldeck_rate_limiter=lambda settings: limiter,
        name="stores",
    )
    tools = make_deck(
        plugin,
        load_entry_points=STAGES,
        tools=[counted],
    )
    # Make the tool cacheable and rate limited through configuration overrides.
    deck = make_deck(
        plugin,
        load_entry_points=STAGES,
        tools=[counted],
        config={
            "tools": {
                "counted": {
                    "execution": {"cacheable": True, "cache_ttl_s": 60},
                    "security": {"rate_limit": {"max_calls": 1, "window_s": 60}},
                }
            }
        },
    )
    await tools.aclose()
    async with deck:
        session = deck.session()
        first = await session.call("counted", {"x": 2})
        hit = await session.call("counted", {"x": 2})
        limited = await session.call("counted", {"x": 3})
    assert first.success and first.metadata["cached"] is False
    assert hit.success and hit.metadata["cached"] is True and hit.data == 4
    assert calls == [2]
    assert limiter.hits == 2  # the hit was not counted
    assert limited.error.code is ErrorCode.RATE_LIMIT_EXCEEDED
    assert limited.error.retry_after_s == 2.5


async def test_failures_are_not_cached():
    cache = DictCache()
    deck = make_deck(
        inline_plugin(tooldeck_cache=lambda settings: cache, name="c"),
        load_entry_points=STAGES,
        tools=[explode],
        config={"tools": {"explode": {"execution": {"cacheable": True}}}},
    )
    async with deck:
        await deck.session().call("explode", {})
    assert cache.store == {}


async def test_session_cancel_cancels_running_calls():
    async with _deck() as deck:
        session = deck.session()
        results = []

        async def run():
            results.append(await session.call("slow", {"seconds": 30}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            nursery.start_soon(run)
            await trio.sleep(0.2)
            session.cancel()
    assert [r.error.code for r in results] == [ErrorCode.CANCELLED, ErrorCode.CANCELLED]


async def test_process_result_chain_sees_every_result_and_fails_closed():
    def tooldeck_process_result(call, tool, result):
        if result.success and isinstance(result.data, str):
            return ToolResult.ok(result.data.replace("ada", "[name]"))
        return None

    def broken(call, tool, result):
        if call.arguments.get("name") == "leak":
            raise RuntimeError("redactor bug")
        return None

    deck = _deck(
        inline_plugin(tooldeck_process_result, name="rename"),
        inline_plugin(tooldeck_process_result=broken, name="broken"),
    )
    async with deck:
        session = deck.session()
        ok = await session.call("greet", {"name": "ada"})
        withheld = await session.call("greet", {"name": "leak"})
    assert ok.data == "hello [name]"
    assert withheld.error.code is ErrorCode.PLUGIN_ERROR and "leak" not in withheld.error.message


class ListRetriever:
    """A deterministic retriever for pipeline tests: ranks tools by shared words with the query."""

    def __init__(self):
        self.tools = {}

    async def index(self, tools):
        self.tools = {t.name: t for t in tools}

    async def add(self, tools):
        self.tools.update({t.name: t for t in tools})

    async def remove(self, names):
        for n in names:
            self.tools.pop(n, None)

    async def search(self, query, k):
        words = set(query.lower().split())
        scored = [
            ScoredTool(
                name=n,
                score=len(
                    words & set((t.name + " " + t.description).lower().replace("_", " ").split())
                ),
            )
            for n, t in self.tools.items()
        ]
        scored.sort(key=lambda s: (-s.score, s.name))
        # The best one says why, as a retriever may (ScoredTool.reason).
        if scored:
            scored[0] = ScoredTool(name=scored[0].name, score=scored[0].score, reason="top words")
        return scored[:k]


def _select_deck(*plugins, config=None):
    retriever = ListRetriever()
    return make_deck(
        inline_plugin(tooldeck_retriever=lambda settings: retriever, name="words"),
        *plugins,
        load_entry_points=STAGES,
        tools=[greet, slow, explode, refuse],
        config=config,
    )


async def test_hand_pins_sticky_and_fallback():
    config = {"hand": {"limit": 2, "recall": 2, "fallback_recall": 4, "pinned": ["refuse"]}}
    async with _select_deck(config=config) as deck:
        session = deck.session()
        hand = await session.select("greet someone please")
        assert hand.names[0] == "refuse" and "greet" in hand.names
        assert hand.reasons["refuse"] == ("pinned",)
        assert hand.reasons["greet"] == ("retrieved", "top words")
        # explode was not dealt: the wider search finds it (4 tools), so it proceeds with a note.
        result = await session.call("explode", {})
        assert result.error.code is ErrorCode.EXECUTION_ERROR
        assert result.metadata["fallback"]["widened_to"] == 4
        # greet was used: it stays in the next hand even if the task is unrelated.
        await session.call("greet", {"name": "z"})
        nxt = await session.select("sleep for a while")
        assert "greet" in nxt.names and "sticky" in nxt.reasons["greet"]
        exported = nxt.export("anthropic")
        assert {t["name"] for t in exported} == set(nxt.names)


async def test_fallback_refuses_tools_outside_the_wider_search_and_excluded_ones():
    def tooldeck_filter_tools(query, candidates, session):
        return [
            Exclusion(name=t.name, reason="no sleeping here")
            for t in candidates
            if t.name == "slow"
        ]

    config = {"hand": {"limit": 1, "recall": 1, "fallback_recall": 1}}
    async with _select_deck(
        inline_plugin(tooldeck_filter_tools, name="nosleep"), config=config
    ) as deck:
        session = deck.session()
        hand = await session.select("greet")
        assert hand.names == ["greet"]
        outside = await session.call("explode", {})
        assert outside.error.code is ErrorCode.PERMISSION_DENIED
        assert "greet" in outside.error.suggestion
        no_hand = deck.session()
        excluded = await no_hand.call("slow", {"seconds": 0})
        assert excluded.error.code is ErrorCode.PERMISSION_DENIED
        assert "no sleeping here" in excluded.error.message and "nosleep" in excluded.error.message


async def test_runtime_add_and_remove_update_retriever_and_catalog():
    async with _select_deck() as deck:
        session = deck.session()
        await session.select("greet")
        extra = ToolDefinition(
            name="weather_report",
            description="Report the weather",
            category="api",
            execute=lambda arguments, context: "sunny",
        )
        await deck.add_tools([extra])
        hand = await session.select("weather report")
        assert hand.names[0] == "weather_report"
        assert (await session.call("weather_report", {})).data == "sunny"
        assert await deck.remove_tools(["weather_report", "nope"]) == ["weather_report"]
        gone = await session.call("weather_report", {})
        assert gone.error.code is ErrorCode.TOOL_NOT_FOUND


async def test_parsed_call_objects_are_accepted():
    async with _deck() as deck:
        result = await deck.session().call(ToolCall(id="c1", name="greet", arguments={"name": "q"}))
    assert result.metadata["call_id"] == "c1" and result.success


async def test_events_reach_observers():
    events = []
    async with _deck(
        inline_plugin(tooldeck_event=lambda event: events.append(event), name="obs")
    ) as deck:
        await deck.session().call("greet", {"name": "a"})
    assert events and events[-1].kind == "call.end" and events[-1].data["success"] is True


async def test_tooldeck_approval_store_provider_is_used():
    from tooldeck._approvals import InMemoryApprovalStore

    store = InMemoryApprovalStore()
    created = []
    original = store.create

    async def create(**kw):
        approval_id = await original(**kw)
        created.append(approval_id)
        return approval_id

    store.create = create
    deck = _dangerous_deck(
        inline_plugin(tooldeck_approval_store=lambda settings: store, name="shared")
    )
    async with deck:
        result = await deck.session().call("wipe", {"target": "q"})
    assert deck.providers["approvals"] == "shared"
    assert created == [result.error.details["approval_id"]]


async def test_context_carries_attributes_and_the_plugins_settings_and_close_is_observed():
    seen = {}
    events = []

    def probe(context: ToolContext) -> str:
        """Report what the tool was given."""
        seen["attributes"] = dict(context.attributes)
        seen["settings"] = dict(context.settings)
        return "ok"

    def tooldeck_register_tools(register, settings):
        seen["register_settings"] = settings.get("probe_pack")
        register(probe, category="demo")

    deck = make_deck(
        inline_plugin(tooldeck_register_tools, name="probe_pack"),
        inline_plugin(tooldeck_event=lambda event: events.append(event.kind), name="obs"),
        load_entry_points=STAGES,
        config={"probe_pack": {"depth": 3}},
    )
    async with deck:
        async with deck.session(attributes={"user": "ada"}) as session:
            assert (await session.call("probe", {})).success
    assert seen == {
        "register_settings": {"depth": 3},
        "attributes": {"user": "ada"},
        "settings": {"depth": 3},
    }
    assert events[-1] == "session.closed"


async def test_a_failing_approval_store_fails_closed_with_a_structured_error():
    class DownStore:
        async def create(self, **kw):
            raise ConnectionError("store at redis://127.0.0.1:1 is down")

        async def consume(self, **kw):
            raise ConnectionError("store at redis://127.0.0.1:1 is down")

        async def resolve(self, approval_id, approved):
            raise ConnectionError("down")

    deck = _dangerous_deck(
        inline_plugin(tooldeck_approval_store=lambda settings: DownStore(), name="down")
    )
    async with deck:
        session = deck.session()
        asked = await session.call("wipe", {"target": "a"})
        used = await session.call("wipe", {"target": "a"}, approval_id="apr_x")
    assert asked.error.code is ErrorCode.PLUGIN_ERROR and "approval store" in asked.error.message
    assert used.error.code is ErrorCode.PLUGIN_ERROR


async def test_select_is_observed_and_a_broken_observer_does_not_fail_the_call():
    kinds = []

    def tooldeck_event(event):
        kinds.append(event.kind)
        raise RuntimeError("observer bug")

    async with _select_deck(inline_plugin(tooldeck_event, name="obs")) as deck:
        session = deck.session()
        hand = await session.select("greet someone")
        result = await session.call("greet", {"name": "a"})
    assert hand.names and result.success
    assert kinds == ["select", "call.end"]


async def test_hook_implementations_may_take_a_subset_of_arguments_in_any_order():
    # pluggy's rule: an implementation names the arguments it wants, in any order.
    seen = []

    def tooldeck_process_result(result, call):
        seen.append((call.name, result.data))
        return None

    def tooldeck_authorize_call(tool):
        return Decision.deny("no greeting today") if tool.name == "greet" else None

    async with _deck(
        inline_plugin(tooldeck_process_result, name="subset"),
        inline_plugin(tooldeck_authorize_call, name="only-tool"),
    ) as deck:
        session = deck.session()
        denied = await session.call("greet", {"name": "a"})
        ran = await session.call("slow", {"seconds": 0})
    assert denied.error.code is ErrorCode.PERMISSION_DENIED
    assert denied.error.plugin == "only-tool"
    assert ran.success
    assert ("slow", "done") in seen


async def test_observes_limits_an_observer_to_its_event_kinds():
    from tooldeck import observes

    everything, closed_only = [], []

    @observes("session.closed")
    def tooldeck_event(event):
        closed_only.append(event.kind)

    async with _deck(
        inline_plugin(tooldeck_event, name="closed-only"),
        inline_plugin(tooldeck_event=lambda event: everything.append(event.kind), name="all"),
    ) as deck:
        session = deck.session()
        await session.call("greet", {"name": "a"})
        await session.aclose()
    assert closed_only == ["session.closed"]
    assert everything == ["call.end", "session.closed"]
    with pytest.raises(TypeError):
        observes()


async def never_suspending_add(a: int, b: int) -> int:
    """Add two integers without ever awaiting."""
    return a + b


async def test_calls_that_never_suspend_still_let_other_tasks_run_and_can_be_cancelled():
    add = tool(category="demo", execution={"cacheable": False})(never_suspending_add)
    deck = make_deck(load_entry_points=STAGES, tools=[add])
    async with deck:
        session = deck.session()
        ticks = []

        async def ticker():
            while True:
                ticks.append(len(ticks))
                await trio.sleep(0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            await trio.sleep(0)
            before = len(ticks)
            for i in range(64):
                result = await session.call("never_suspending_add", {"a": i, "b": 1})
                assert result.success and result.data == i + 1
            # At least every 16th call yields to the scheduler, so the ticker moved on.
            assert len(ticks) - before >= 3
            nursery.cancel_scope.cancel()

        # Each call is a cancellation point, even one that would never reach the scheduler.
        with trio.CancelScope() as scope:
            scope.cancel()
            await session.call("never_suspending_add", {"a": 1, "b": 1})
            raise AssertionError("a call in a cancelled scope must raise Cancelled")
        assert scope.cancelled_caught


async def test_a_hung_filter_hook_is_left_out_and_stalls_no_other_session(monkeypatch):
    """A rule filter that waits on a dead service (not marked @nonblocking) runs in a worker
    thread: past its deadline the hand is dealt without its verdicts, and other sessions'
    selections and calls go on meanwhile. A @nonblocking filter runs on the loop."""
    import threading

    import tooldeck._deck as deck_module
    from tooldeck_hookspecs import Exclusion, nonblocking

    monkeypatch.setattr(deck_module, "_FILTER_TIMEOUT_S", 2.0)
    release = threading.Event()
    loop_thread = threading.get_ident()
    threads: dict[str, list[int]] = {"slow": [], "cheap": []}

    def tooldeck_filter_tools(query, candidates, session):
        threads["slow"].append(threading.get_ident())
        if session.attributes.get("stuck"):
            release.wait(60)
        return [Exclusion(name="explode", reason="explode is off for this user")]

    @nonblocking
    def cheap_filter(query, candidates, session):
        threads["cheap"].append(threading.get_ident())
        return [Exclusion(name="slow", reason="slow is off")]

    deck = _select_deck(
        inline_plugin(tooldeck_filter_tools, name="slowfilter"),
        inline_plugin(tooldeck_filter_tools=cheap_filter, name="cheapfilter"),
    )
    try:
        async with deck:
            stuck = deck.session(attributes={"stuck": True})
            other = deck.session()
            hands: dict = {}

            async def stuck_select() -> None:
                hands["stuck"] = await stuck.select("greet slow explode")

            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(stuck_select)
                    await trio.sleep(0.05)
                    # The loop is free: another session selects and calls meanwhile.
                    hand = await other.select("greet slow explode")
                    assert "explode" not in hand.names and "slow" not in hand.names
                    assert (await other.call("greet", {"name": "ada"})).success
                    assert "stuck" not in hands
    finally:
        release.set()
    # The hung filter's verdict is left out (logged); the cheap one's still applies.
    assert "explode" in hands["stuck"].names and "slow" not in hands["stuck"].names
    assert loop_thread not in threads["slow"]
    assert set(threads["cheap"]) == {loop_thread}


async def test_an_observer_that_blocks_gets_events_on_its_own_thread_in_order(monkeypatch):
    """An unmarked observer may do I/O: it gets events on the deck's observer thread, in order,
    and a hung one delays no call. A @nonblocking one is called on the loop. The queue is
    bounded (events beyond it are dropped and counted) and closing the deck drains it."""
    import threading

    import tooldeck._events as events_module
    from tooldeck_hookspecs import nonblocking

    monkeypatch.setattr(events_module, "MAX_PENDING", 5)
    release = threading.Event()
    loop_thread = threading.get_ident()
    slow_seen: list[tuple[int, str]] = []
    cheap_seen: list[int] = []

    def tooldeck_event(event):
        release.wait(30)  # an observer posting to a dead webhook
        slow_seen.append((threading.get_ident(), event.kind))

    @nonblocking
    def cheap(event):
        cheap_seen.append(threading.get_ident())

    deck = _deck(
        inline_plugin(tooldeck_event, name="webhook"),
        inline_plugin(tooldeck_event=cheap, name="counter"),
    )
    async with deck:
        session = deck.session()
        with trio.fail_after(10):
            for i in range(8):  # the observer is hung: calls go on regardless
                assert (await session.call("greet", {"name": str(i)})).success
        assert slow_seen == [] and len(cheap_seen) == 8
        # One event is with the hung observer, five wait: two were dropped and counted.
        assert deck._events.dropped >= 2
        release.set()
    # Closing the deck delivered what was queued, in order, on one thread other than the loop.
    assert 1 <= len(slow_seen) <= 6 and {kind for _, kind in slow_seen} == {"call.end"}
    assert len({thread for thread, _ in slow_seen}) == 1 and slow_seen[0][0] != loop_thread
    assert set(cheap_seen) == {loop_thread}
