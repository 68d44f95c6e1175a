"""Findings of an operator's audit (plugins that misbehave), through the real deck: one
session's hung policy hooks do not lock the other sessions out, and a plugin's exception text
is redacted before the model sees it."""

from __future__ import annotations

import itertools
import threading
import types

import pytest
import trio

from tooldeck import tool
from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck
from tooldeck_hookspecs import hookimpl


@tool(category="work", execution={"timeout_s": 0.5})
def echo(value: int) -> int:
    """Echo a number.

    Args:
        value: the number
    """
    return value


async def test_one_sessions_hung_policy_hooks_leave_the_others_served() -> None:
    """A blocking policy hook that hangs only for one user's calls: once its abandoned threads
    filled the deck's shared pool, every session's call waited for a thread and failed."""
    release = threading.Event()

    def tooldeck_authorize_call(call, tool, session):
        if session.attributes.get("user") == "mallory":
            release.wait(30)
        return None

    results: list = []
    try:
        async with make_deck(inline_plugin(tooldeck_authorize_call, name="lookup"),
                             load_entry_points=["schema", "runner"], tools=[echo]) as deck:
            mallory = deck.session(attributes={"user": "mallory"})
            alice = deck.session(attributes={"user": "alice"})

            async def hung(i: int) -> None:
                results.append(await mallory.call("echo", {"value": i}))

            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    for i in range(40):  # more than any pool (the deck-wide one held 32)
                        nursery.start_soon(hung, i)
                # Every one of mallory's threads is still stuck in the hook.
                for i in range(3):
                    answer = await alice.call("echo", {"value": i})
                    assert answer.success and answer.data == i
    finally:
        release.set()
    assert len(results) == 40
    assert all(r.error is not None and r.error.code == "PLUGIN_ERROR" for r in results)
    # Those that got a thread blame the hook; the rest say why no check could start.
    assert any("'lookup' did not answer" in r.error.message for r in results)
    assert any("threads are still busy" in r.error.message for r in results)


async def test_a_plugins_exception_text_is_redacted_before_the_model_sees_it() -> None:
    password = "Hx7" + "q9Zk2" * 3

    def tooldeck_argument_validator(tool):
        def validate(arguments):
            raise RuntimeError(f"validator down: postgres://admin:{password}@db.internal/prod")

        return validate

    broken = types.SimpleNamespace(
        __tooldeck_name__="badval",
        tooldeck_argument_validator=hookimpl(tryfirst=True)(tooldeck_argument_validator),
    )
    async with make_deck(broken, load_entry_points=["schema", "runner", "policy"],
                         tools=[echo]) as deck:
        result = await deck.session().call("echo", {"value": 1})
    assert result.error is not None and result.error.code == "PLUGIN_ERROR"
    assert "argument validator failed" in result.error.message
    assert password not in repr(result) and "[REDACTED:" in result.error.message


@tool(category="work", execution={"timeout_s": 0.5})
def other(value: int) -> int:
    """Return a number unchanged, another way.

    Args:
        value: the number
    """
    return value


class _WideningFails(KeywordRetriever):
    """Deals hands normally; the widened search (k = fallback_recall) raises or hangs."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    async def search(self, query: str, k: int) -> list:
        if k == 5:
            if self.how == "raise":
                raise ConnectionError("index at https://svc:Pw9xLq3Zt7Kc2@10.0.0.9 is down")
            await trio.sleep_forever()
        return await super().search(query, k)


@pytest.mark.parametrize("how", ["raise", "hang"])
async def test_a_retriever_failing_in_the_widened_search_refuses_the_call(how: str) -> None:
    """A call of a tool outside the hand widens the search: a retriever that raised there made
    session.call raise (its message with a credential), one that hung hung the call."""
    retriever = _WideningFails(how)
    config = {"hand": {"limit": 1, "recall": 1, "fallback_recall": 5}}
    async with make_deck(inline_plugin(tooldeck_retriever=lambda settings: retriever,
                                       name="words"),
                         load_entry_points=["schema", "runner", "policy"], tools=[echo, other],
                         config=config) as deck:
        session = deck.session()
        hand = await session.select("echo a number")
        assert hand.names == ["echo"]
        with trio.fail_after(10):
            result = await session.call("other", {"value": 1})
    assert result.error is not None
    assert result.error.code == ("PLUGIN_ERROR" if how == "raise" else "TIMEOUT")
    assert "widened search" in result.error.message
    assert "Pw9xLq3Zt7Kc2" not in repr(result)


class _GarbageExecutor:
    """An executor plugin that answers with a dict instead of a ToolResult."""

    async def run(self, tool, call, context):
        return {"ok": True}

    async def aclose(self) -> None:
        return None


async def test_a_stage_that_returns_garbage_fails_the_call_not_session_call() -> None:
    garbage = _GarbageExecutor()
    broken = types.SimpleNamespace(
        __tooldeck_name__="gx",
        tooldeck_executor=hookimpl(tryfirst=True)(lambda settings: garbage),
    )
    async with make_deck(broken, load_entry_points=["schema", "policy"], tools=[echo]) as deck:
        session = deck.session()
        first = await session.call("echo", {"value": 1})
        second = await session.call("echo", {"value": 2})
    for result in (first, second):
        assert result.error is not None and result.error.code == "PLUGIN_ERROR"
        assert "pipeline" in result.error.message


class _BadRecall(KeywordRetriever):
    """A retriever whose every search misbehaves in one way."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    async def search(self, query: str, k: int):
        from tooldeck_hookspecs import ScoredTool

        good = await super().search(query, k)
        if self.how == "raise":
            raise ConnectionError("index at https://svc:Pw9xLq3Zt7Kc2@10.0.0.9 is down")
        if self.how == "hang":
            await trio.sleep_forever()
        if self.how == "none":
            return None
        if self.how == "garbage":
            return [42, "echo", None, {"name": "echo"}, *good]
        if self.how == "repeats":
            return [*good, *good, *good]
        if self.how == "nan":
            return [ScoredTool(name=t.name, score=float("nan")) for t in good]
        raise AssertionError(self.how)


@pytest.mark.parametrize("how", ["raise", "hang", "none", "garbage", "repeats", "nan"])
async def test_select_survives_a_retriever_that_misbehaves(how: str, monkeypatch) -> None:
    """select() raised whatever the retriever raised (or its answer caused), hung with it, and
    dealt a tool as often as the retriever repeated it (providers refuse duplicate function
    names). Now the hand is dealt from what is usable, with the problem said."""
    import tooldeck._deck as deck_module

    monkeypatch.setattr(deck_module, "_RECALL_TIMEOUT_S", 0.5)
    retriever = _BadRecall(how)
    async with make_deck(inline_plugin(tooldeck_retriever=lambda settings: retriever,
                                       name="words"),
                         load_entry_points=["schema", "runner", "policy"], tools=[echo, other],
                         ) as deck:
        session = deck.session(pinned=["other"])
        with trio.fail_after(10):
            hand = await session.select("echo a number")
    assert len(hand.names) == len(set(hand.names))
    assert "other" in hand.names  # pinned tools are dealt whatever the retriever did
    if how in ("repeats", "nan", "garbage"):
        assert "echo" in hand.names
    else:
        assert hand.names == ["other"]
    if how != "nan":
        assert hand.problems and "words" in hand.problems[0]
    assert "Pw9xLq3Zt7Kc2" not in repr(hand)
    assert all(score == score for score in hand.scores.values())  # no NaN reaches the hand


class _Overflowing(KeywordRetriever):
    """A retriever that answers an endless stream, or a million entries, or essays as reasons."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.read = 0

    async def search(self, query: str, k: int):
        from tooldeck_hookspecs import ScoredTool

        good = await super().search(query, k)
        if self.how == "long reason":
            return [ScoredTool(name=t.name, score=t.score, reason="because " * 100_000)
                    for t in good]
        count = None if self.how == "endless" else 1_000_000

        def stream():
            for i in itertools.islice(itertools.count(), count):
                self.read += 1
                yield ScoredTool(name=f"unknown_{i}" if i else "echo", score=1.0 / (i + 1))

        return stream()


@pytest.mark.parametrize("how", ["endless", "million", "long reason"])
async def test_select_reads_a_bounded_answer_from_the_retriever(how: str) -> None:
    """An endless answer hung every session of the deck (it was read on the event loop), a
    million entries stalled them, and a reason of any length was printed in every hand."""
    retriever = _Overflowing(how)
    async with make_deck(inline_plugin(tooldeck_retriever=lambda settings: retriever,
                                       name="words"),
                         load_entry_points=["schema", "runner", "policy"], tools=[echo, other],
                         ) as deck:
        with trio.fail_after(10):
            hand = await deck.session().select("echo a number", limit=5)
    assert hand.names[0] == "echo"
    if how == "long reason":
        (why,) = [r for r in hand.reasons["echo"] if r.startswith("because")]
        assert len(why) <= 300 and why.endswith("…")
        return
    assert retriever.read <= 4 * 20 + 64 + 1  # recall is 20 by default
    assert any("answered more than" in p and "not read" in p for p in hand.problems)


@pytest.mark.parametrize("on_the_loop", [True, False])
async def test_a_filter_answering_an_endless_stream_is_read_up_to_a_bound(on_the_loop) -> None:
    """An endless iterator of verdicts hung the loop (a @nonblocking filter) or, from its
    thread, grew memory until the process died; a verdict per candidate is all that counts."""
    from tooldeck_hookspecs import Exclusion, nonblocking

    def endless(query, candidates, session):
        for i in itertools.count():
            yield Exclusion(name="other" if i == 0 else f"unknown_{i}", reason="not today")

    filter_hook = nonblocking(endless) if on_the_loop else endless
    async with make_deck(inline_plugin(tooldeck_filter_tools=filter_hook, name="endless"),
                         inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever(),
                                       name="words"),
                         load_entry_points=["schema", "runner", "policy"], tools=[echo, other],
                         ) as deck:
        session = deck.session(pinned=["other"])
        with trio.fail_after(20):
            hand = await session.select("echo a number")
            refused = await session.call("other", {"value": 1})
    assert hand.names == ["echo"]  # the first verdict was read and applied
    assert refused.error is not None and "not today" in refused.error.message


async def test_select_survives_a_retriever_whose_index_fails_and_tries_again() -> None:
    class _IndexFailsOnce(KeywordRetriever):
        failures = 1

        async def index(self, tools):
            if self.failures:
                self.failures -= 1
                raise OSError("index store at postgres://u:Pw9xLq3Zt7Kc2@db/x unreachable")
            await super().index(tools)

    retriever = _IndexFailsOnce()
    async with make_deck(inline_plugin(tooldeck_retriever=lambda settings: retriever,
                                       name="words"),
                         load_entry_points=["schema", "runner", "policy"], tools=[echo, other],
                         ) as deck:
        session = deck.session(pinned=["other"])
        first = await session.select("echo a number")
        second = await session.select("echo a number")
    assert first.names == ["other"] and "could not index" in first.problems[0]
    assert "Pw9xLq3Zt7Kc2" not in repr(first)
    assert "echo" in second.names and not second.problems  # indexed on the next selection
