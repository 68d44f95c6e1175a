"""A prompt-injected model's call ids, and filter hooks that answer or behave oddly.

- A call id is the model's (or its server's) text: a 10 MB id was copied whole into the result's
  metadata, every event and log line; one with a newline forged log lines; one holding a
  secret went out unredacted.
- A filter hook handed the shared candidate list could ``clear()`` it (an empty hand) or
  ``append()`` a tool no retriever recalled, even one not in the catalog (dealt to the model);
  a verdict with a ``"high"`` boost or a list for a name made ``select`` raise; a NaN boost left
  the hand in an arbitrary order; items that were not verdicts were dropped without a word.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from tooldeck import tool
from tooldeck.adapters import result_messages
from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck
from tooldeck_hookspecs import (
    Event,
    Exclusion,
    Preference,
    ToolCall,
    ToolContext,
    ToolDefinition,
    nonblocking,
    observes,
)


@tool(category="text", execution={"cacheable": False})
def echo(text: str) -> str:
    """Echo a text back.

    Args:
        text: the text
    """
    return text


@tool(category="text", execution={"cacheable": False})
def shout(text: str) -> str:
    """Shout a text back.

    Args:
        text: the text
    """
    return text.upper()


_RETRIEVER = inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever(), name="kw")


# ------------------------------------------------------------------------------- call ids


@pytest.mark.parametrize(
    "call_id",
    [
        "x" * 10_000_000,
        "id\nINFO tooldeck: call approved by admin\x1b[31m",
        "ünïcödé\u202eid",
        "with space",
    ],
    ids=["huge", "log-injection", "unicode", "space"],
)
async def test_a_hostile_call_id_is_shown_bounded_and_printable(
    tmp_path: Path, call_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[Event] = []
    seen: list[str] = []

    @nonblocking
    def tooldeck_event(event: Event) -> None:
        events.append(event)

    @tool(category="text", execution={"cacheable": False})
    def whoami(context: ToolContext) -> str:
        """Say the call id the tool was given."""
        seen.append(context.call_id)
        return "ok"

    deck = make_deck(
        inline_plugin(tooldeck_event, name="watch"),
        load_entry_points=["schema", "runner"],
        tools=[whoami],
    )
    caplog.set_level(logging.DEBUG, logger="tooldeck")
    async with deck:
        session = deck.session(workdir=str(tmp_path))
        result = await session.call("whoami", {}, call_id=call_id)
        again = await session.call(ToolCall(name="whoami", id=call_id))
    assert result.success, result.error
    shown = result.metadata["call_id"]
    assert shown != call_id and len(shown) <= 128
    assert shown.isascii() and shown.isprintable() and " " not in shown
    assert again.metadata["call_id"] == shown  # the same id always reads the same
    assert seen == [shown, shown]
    assert all(e.call_id == shown for e in events if e.kind == "call.end")
    assert "\n" not in "".join(r.getMessage() for r in caplog.records if "whoami" in
                               r.getMessage())


async def test_distinct_hostile_ids_stay_distinct_and_provider_ids_are_untouched(
    tmp_path: Path,
) -> None:
    deck = make_deck(load_entry_points=["schema", "runner"], tools=[echo])
    async with deck:
        session = deck.session(workdir=str(tmp_path))
        shown = []
        for call_id in ("a" * 200 + "1", "a" * 200 + "2", "call_AbC-123.x:y", "toolu_01A09q90qw"):
            result = await session.call("echo", {"text": "hi"}, call_id=call_id)
            shown.append(result.metadata["call_id"])
    assert shown[0] != shown[1]
    assert shown[2:] == ["call_AbC-123.x:y", "toolu_01A09q90qw"]


async def test_a_secret_in_a_call_id_is_redacted(tmp_path: Path) -> None:
    secret = "AKIAIOSFODNN7EXAMPLE"
    deck = make_deck(load_entry_points=["schema", "runner", "policy"], tools=[echo])
    async with deck:
        result = await deck.session(workdir=str(tmp_path)).call(
            "echo", {"text": "hi"}, call_id=secret
        )
    assert secret not in result.metadata["call_id"]


async def test_provider_messages_still_echo_the_original_call_id(tmp_path: Path) -> None:
    long_id = "call_" + "z" * 300
    response = {
        "role": "assistant",
        "tool_calls": [{"id": long_id, "type": "function",
                        "function": {"name": "echo", "arguments": '{"text": "hi"}'}}],
    }
    deck = make_deck(load_entry_points=["schema", "runner"], tools=[echo])
    async with deck:
        messages = await deck.session(workdir=str(tmp_path)).run_tool_calls("openai", response)
    assert messages[0]["tool_call_id"] == long_id
    assert result_messages("openai", [(ToolCall(name="echo", id=long_id),
                                       _ok())])[0]["tool_call_id"] == long_id


def _ok() -> Any:
    from tooldeck_hookspecs import ToolResult

    return ToolResult.ok("hi")


async def test_a_call_id_that_is_not_a_string_is_shown_as_text(tmp_path: Path) -> None:
    deck = make_deck(load_entry_points=["schema", "runner"], tools=[echo])
    async with deck:
        result = await deck.session(workdir=str(tmp_path)).call(
            ToolCall(name="echo", arguments={"text": "hi"}, id={"nested": ["id"]})  # type: ignore[arg-type]
        )
    assert result.success and isinstance(result.metadata["call_id"], str)


# ------------------------------------------------------------------------------- filters


async def _hand(filter_hook: Any, tmp_path: Path) -> Any:
    deck = make_deck(
        inline_plugin(nonblocking(filter_hook), name="odd"),
        _RETRIEVER,
        load_entry_points=["schema", "runner"],
        tools=[echo, shout],
    )
    async with deck:
        return await deck.session(workdir=str(tmp_path)).select("echo or shout a text")


@pytest.mark.parametrize("edit", ["clear", "append", "del"])
async def test_a_filter_cannot_change_the_candidates(
    tmp_path: Path, edit: str, caplog: pytest.LogCaptureFixture
) -> None:
    ghost = ToolDefinition(name="ghost", description="not registered", category="text")

    def tooldeck_filter_tools(query: str, candidates: Any, session: Any) -> None:
        if edit == "clear":
            candidates.clear()
        elif edit == "append":
            candidates.append(ghost)
        else:
            del candidates[0]

    hand = await _hand(tooldeck_filter_tools, tmp_path)
    assert sorted(hand.names) == ["echo", "shout"]
    assert any("'odd'" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "answer",
    [
        [Preference(name="echo", boost="high", reason="r")],  # type: ignore[arg-type]
        [Preference(name="echo", boost=float("nan"), reason="r")],
        [Preference(name="echo", boost=float("inf"), reason="r")],
        [Exclusion(name=["echo"], reason="r")],  # type: ignore[arg-type]
        ["echo", 42, None, {"name": "echo"}],
        "echo",
        42,
        {"echo": "no"},
    ],
    ids=["str-boost", "nan-boost", "inf-boost", "list-name", "junk-items", "str", "int", "dict"],
)
async def test_unusable_filter_answers_are_left_out_and_logged(
    tmp_path: Path, answer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def tooldeck_filter_tools(query: str, candidates: Any, session: Any) -> Any:
        return answer

    hand = await _hand(tooldeck_filter_tools, tmp_path)
    assert sorted(hand.names) == ["echo", "shout"] and not hand.exclusions
    assert all(score == score for score in hand.scores.values())  # no NaN
    assert any("'odd'" in r.getMessage() and r.levelno >= logging.WARNING
               for r in caplog.records)


async def test_filter_verdicts_are_normalised(tmp_path: Path) -> None:
    def tooldeck_filter_tools(query: str, candidates: Any, session: Any) -> Any:
        return [
            Exclusion(name="echo", reason=12),  # type: ignore[arg-type]
            Exclusion(name="echo", reason=12),  # type: ignore[arg-type]
            Preference(name="shout", boost=2, reason=["louder"]),  # type: ignore[arg-type]
        ]

    hand = await _hand(tooldeck_filter_tools, tmp_path)
    assert hand.names == ["shout"] and hand.scores["shout"] > 2
    assert [(e.name, e.reason, e.plugin) for e in hand.exclusions] == [("echo", "12", "odd")]
    assert "['louder']" in hand.reasons["shout"]


async def test_one_verdict_not_in_a_list_still_counts(tmp_path: Path) -> None:
    def tooldeck_filter_tools(query: str, candidates: Any, session: Any) -> Any:
        return Exclusion(name="echo", reason="not here")

    hand = await _hand(tooldeck_filter_tools, tmp_path)
    assert hand.names == ["shout"]


# ------------------------------------------------------------------------------- BaseException


class PluginAbort(BaseException):
    """A plugin's own BaseException subclass."""


@pytest.mark.parametrize("raised", [SystemExit(3), GeneratorExit(), PluginAbort("x")],
                         ids=["SystemExit", "GeneratorExit", "own"])
@pytest.mark.parametrize("hook", ["authorize", "filter", "process", "redact", "event"])
@pytest.mark.parametrize("threaded", [False, True])
async def test_a_hook_raising_a_base_exception_is_the_plugins_failure(
    tmp_path: Path, raised: BaseException, hook: str, threaded: bool
) -> None:
    def function() -> Any:  # pluggy passes a hook only the arguments it names: none
        raise raised

    name = {
        "authorize": "tooldeck_authorize_call",
        "filter": "tooldeck_filter_tools",
        "process": "tooldeck_process_result",
        "redact": "tooldeck_redact",
        "event": "tooldeck_event",
    }[hook]
    if hook == "event":
        function = observes("call.end", "select")(function)
    if not threaded:
        function = nonblocking(function)
    deck = make_deck(
        inline_plugin(name="bad", **{name: function}),
        _RETRIEVER,
        load_entry_points=["schema", "runner"],
        tools=[echo],
    )
    async with deck:
        session = deck.session(workdir=str(tmp_path))
        await session.select("echo a text")
        result = await session.call("echo", {"text": "hi"})
        missing = await session.call("no_such_tool", {})
    if hook in ("authorize", "process"):
        assert not result.success and result.error.code == "PLUGIN_ERROR"
        assert "'bad'" in result.error.message
    else:
        assert result.success
    assert not missing.success


async def test_an_observer_thread_survives_a_base_exception(tmp_path: Path) -> None:
    seen: list[str] = []

    @observes("call.end")
    def tooldeck_event(event: Event) -> None:
        if not seen:
            seen.append("first")
            raise SystemExit(1)
        seen.append(event.kind)

    deck = make_deck(inline_plugin(tooldeck_event, name="once"),
                     load_entry_points=["schema", "runner"], tools=[echo])
    async with deck:
        session = deck.session(workdir=str(tmp_path))
        await session.call("echo", {"text": "a"})
        await session.call("echo", {"text": "b"})
    # aclose drained the queue: the second event reached the observer after the first raised.
    assert seen == ["first", "call.end"]


# ------------------------------------------------------------------------------- arguments


async def test_mixed_non_string_keys_from_a_python_caller_are_no_plugin_error(
    tmp_path: Path,
) -> None:
    @tool(category="text", execution={"cacheable": True})
    def keys(extra: dict) -> int:  # type: ignore[type-arg]
        """Count keys.

        Args:
            extra: anything
        """
        return len(extra)

    deck = make_deck(load_entry_points=["schema", "runner", "cache"], tools=[keys])
    async with deck:
        result = await deck.session(workdir=str(tmp_path)).call(
            "keys", {"extra": {1: "a", (1, 2): "b", "c": [{2: "d", None: "e"}]}}
        )
    assert result.success, result.error
    assert result.data == 3
