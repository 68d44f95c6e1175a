"""Tools that misbehave, in process, through the whole call path (Deck -> Session.call ->
executor -> result normalisation): the host neither crashes nor hangs, the caller gets a
structured error or the faithful value, and the next call works.

Complements ``test_core_faults.py`` (BaseExceptions, plain JSON at the boundary).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import pytest
import trio

from tooldeck import ErrorCode, ToolCall, ToolDefinition, ToolResult, tool
from tooldeck.adapters import result_messages
from tooldeck.testing import make_deck

STAGES = ["schema", "runner", "cache"]


@tool(category="demo")
def ping() -> str:
    """Answer pong."""
    return "pong"


def _deck(*tools: Any) -> Any:
    return make_deck(load_entry_points=STAGES, tools=[ping, *tools])


async def _call_then_ping(deck: Any, name: str, arguments: dict[str, Any] | None = None) -> Any:
    """The call's result; then the same session and a new one must still work."""
    session = deck.session()
    with trio.fail_after(30):  # a hang fails the test instead of blocking the run
        result = await session.call(name, arguments or {})
        assert (await session.call("ping", {})).data == "pong"
        assert (await deck.session().call("ping", {})).data == "pong"
    return result


def _strict_json(result: Any) -> None:
    """What every consumer does with a result: strict JSON and provider messages."""
    json.dumps(result.data, allow_nan=False)
    call = ToolCall(name="t", arguments={}, id="c1")
    for fmt in ("openai", "anthropic"):
        assert result_messages(fmt, [(call, result)])


# -- exceptions whose text is hostile --------------------------------------------------------


class HugeMessage(Exception):
    def __str__(self) -> str:
        return "x" * 10_000_000


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class StrExits(Exception):
    def __str__(self) -> str:
        raise SystemExit(3)


def _hostile(kind: str) -> BaseException:
    if kind == "huge":
        return HugeMessage()
    if kind == "str-raises":
        return StrRaises()
    if kind == "str-exits":
        return StrExits()
    return ValueError(10**5000)  # str() of the exception raises: int too long to print


@pytest.mark.parametrize("kind", ["huge", "str-raises", "str-exits", "long-int"])
@pytest.mark.parametrize("shape", ["sync", "async"])
async def test_an_exception_with_hostile_text_is_the_tools_bounded_execution_error(
    kind: str, shape: str
) -> None:
    exc = _hostile(kind)
    if shape == "sync":
        def boom() -> None:
            """Raise."""
            raise exc
    else:
        async def boom() -> None:  # type: ignore[misc]
            """Raise."""
            await trio.sleep(0)
            raise exc

    async with _deck(tool(category="demo")(boom)) as deck:
        result = await _call_then_ping(deck, "boom")
    # The tool's failure (not the executor's PLUGIN_ERROR), and never 10 MB of message.
    assert result.error is not None and result.error.code is ErrorCode.EXECUTION_ERROR
    assert type(exc).__name__ in result.error.message
    assert len(result.error.message) < 3_000
    if kind == "huge":
        assert "chars]" in result.error.message  # says how much was cut


# -- trio.Cancelled and KeyboardInterrupt raised by hand -------------------------------------


def _forged_cancelled() -> BaseException:
    return trio.Cancelled._create()  # what a hostile tool can do; trio never raised it


_FORGED = {
    "cancelled": _forged_cancelled,
    "group-of-cancelled": lambda: BaseExceptionGroup("g", [_forged_cancelled()]),
    # From a sync tool only: in a worker thread a Ctrl-C is never the user's (an async tool's
    # KeyboardInterrupt may be, and goes to the caller as before).
    "group-of-keyboard-interrupt": lambda: BaseExceptionGroup("g", [KeyboardInterrupt()]),
}


@pytest.mark.parametrize(
    ("what", "shape"),
    [
        ("cancelled", "sync"),
        ("cancelled", "async"),
        ("cancelled", "async-inline"),
        ("group-of-cancelled", "sync"),
        ("group-of-cancelled", "async"),
        ("group-of-cancelled", "async-inline"),
        ("group-of-keyboard-interrupt", "sync"),
    ],
)
async def test_a_forged_cancellation_is_the_tools_failure_not_the_callers(
    what: str, shape: str
) -> None:
    exc = _FORGED[what]()
    if shape == "sync":
        def forge() -> None:
            """Raise what only trio should."""
            raise exc
    elif shape == "async":
        async def forge() -> None:  # type: ignore[misc]
            """Raise what only trio should."""
            await trio.sleep(0)
            raise exc
    else:
        async def forge() -> None:  # type: ignore[misc]
            """Raise what only trio should (never suspends: runs inline)."""
            raise exc

    async with _deck(tool(category="demo")(forge)) as deck:
        # Before the fix the Cancelled left Session.call: the caller, cancelled by nobody,
        # got a cancellation no scope of its own would catch (the host went down with it).
        result = await _call_then_ping(deck, "forge")
    assert result.error is not None and result.error.code is ErrorCode.EXECUTION_ERROR


async def test_a_real_timeout_still_reads_as_timeout_when_the_tool_reraises_cancelled() -> None:
    """The forged-cancellation check must not swallow trio's own cancellation."""

    @tool(category="demo", execution={"timeout_s": 0.2})
    async def slow() -> str:
        """Sleep, and re-raise trio's cancellation wrapped in a group."""
        try:
            await trio.sleep(30)
        except trio.Cancelled as exc:
            raise BaseExceptionGroup("wrapped", [exc]) from None
        return "never"

    async with _deck(slow) as deck:
        result = await _call_then_ping(deck, "slow")
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT


# -- values that are not JSON ----------------------------------------------------------------


@pytest.mark.parametrize("shape", ["bare", "in-list", "as-key", "int-subclass"])
async def test_an_integer_too_long_to_print_is_kept_exactly_as_text(shape: str) -> None:
    big = 10**5000 + 7

    class Big(int):
        pass

    value: Any = {
        "bare": big, "in-list": [big], "as-key": {big: "v"}, "int-subclass": Big(big)
    }[shape]

    @tool(category="demo", execution={"max_output_bytes": 100_000})
    def huge_number() -> Any:
        """Return an integer with 5,001 digits."""
        return value

    async with _deck(huge_number) as deck:
        result = await _call_then_ping(deck, "huge_number")
    assert result.success, result.error
    digits = "1" + "0" * 4999 + "7"
    expected = {"bare": digits, "in-list": [digits], "as-key": {digits: "v"},
                "int-subclass": digits}[shape]
    assert result.data == expected
    _strict_json(result)


async def test_an_integer_too_long_for_decimal_text_is_exact_hexadecimal() -> None:
    huge = 1 << 400_000  # about 120,000 digits: decimal conversion would be quadratic

    @tool(category="demo", execution={"max_output_bytes": 1_000_000})
    def enormous() -> int:
        """Return 2**400000."""
        return huge

    async with _deck(enormous) as deck:
        result = await _call_then_ping(deck, "enormous")
    assert result.success, result.error
    assert int(result.data, 16) == huge


async def test_keys_that_read_the_same_as_text_keep_both_values() -> None:
    @tool(category="demo")
    def clash() -> dict[Any, str]:
        """Return keys that collide once written as JSON."""
        return {1: "int", "1": "str", None: "none", "null": "text"}

    async with _deck(clash) as deck:
        result = await _call_then_ping(deck, "clash")
    assert result.success, result.error
    assert sorted(result.data.values()) == ["int", "none", "str", "text"]
    assert result.data["1"] == "int" and result.data["null"] == "none"
    _strict_json(result)


# -- tools that do not return a value --------------------------------------------------------


def _sync_generator() -> Any:
    """Yield instead of returning."""
    yield 1


async def _async_generator() -> Any:
    """Yield instead of returning."""
    yield 1


@pytest.mark.parametrize("function", [_sync_generator, _async_generator],
                         ids=["generator", "async-generator"])
async def test_a_generator_tool_is_an_error_not_the_text_of_its_generator(function: Any) -> None:
    definition = ToolDefinition(
        name="gen", description="Yield.", category="demo", execute=function,
        parameters={"type": "object", "properties": {}}, call_style="kwargs",
    )
    async with _deck(definition) as deck:
        result = await _call_then_ping(deck, "gen")
    # Before: success with data "<generator object ...>", though nothing of the tool ran.
    assert result.error is not None and result.error.code is ErrorCode.EXECUTION_ERROR
    assert "generator" in result.error.message


async def test_a_sync_tool_returning_a_coroutine_gets_it_awaited() -> None:
    async def later() -> str:
        await trio.sleep(0)
        return "awaited"

    @tool(category="demo")
    def lazy() -> Any:
        """Return a coroutine instead of a value."""
        return later()

    async with _deck(lazy) as deck:
        result = await _call_then_ping(deck, "lazy")
    assert result.success and result.data == "awaited"


# -- a tool that edits its arguments ---------------------------------------------------------


async def test_a_tool_editing_its_arguments_changes_neither_the_call_nor_the_callers_dict() -> None:
    def editor(arguments: dict[str, Any], context: Any) -> str:
        arguments["path"] = "/etc/shadow"
        arguments["extra"] = True
        return "edited"

    definition = ToolDefinition(
        name="editor", description="Edit the arguments.", category="demo", execute=editor,
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
    )

    arguments = {"path": "notes.txt"}
    async with _deck(definition) as deck:
        call = ToolCall(name="editor", arguments=arguments, id="c-edit")
        result = await deck.session().call(call)
    assert result.success and result.data == "edited"
    # The caller's dict and the call (what audit and retries read) are what was validated.
    assert arguments == {"path": "notes.txt"}
    assert call.arguments == {"path": "notes.txt"}


def test_int_limit_is_the_default_one() -> None:
    """The integer tests above rely on Python's default limit of 4,300 digits."""
    assert sys.get_int_max_str_digits() in (0, 4300)


# -- results a tool built itself -------------------------------------------------------------


def _built(kind: str) -> Any:
    from tooldeck_hookspecs import ToolError

    if kind == "failure-without-error":
        return ToolResult(success=False)
    if kind == "success-with-error":
        return ToolResult(success=True, data=1, error=ToolError(code=ErrorCode.TIMEOUT,
                                                                message="late"))
    if kind == "truthy-success":
        return ToolResult(success="yes", data=1)  # type: ignore[arg-type]
    if kind == "metadata-list":
        return ToolResult(success=True, data=1, metadata=[1, 2])  # type: ignore[arg-type]
    if kind == "metadata-objects":
        return ToolResult(success=True, data=1,
                          metadata={"when": object(), "nan": math.nan, "big": 10**5000})
    if kind == "message-object":
        return ToolResult(success=False, error=ToolError(code=ErrorCode.EXECUTION_ERROR,
                                                         message=object()))  # type: ignore
    raise ValueError(kind)


BUILT = ["failure-without-error", "success-with-error", "truthy-success", "metadata-list",
         "metadata-objects", "message-object"]


@pytest.mark.parametrize("kind", BUILT)
async def test_a_result_the_tool_built_itself_is_made_consistent(kind: str) -> None:
    @tool(category="demo")
    def built() -> Any:
        """Return a hand-made ToolResult."""
        return _built(kind)

    async with _deck(built) as deck:
        result = await _call_then_ping(deck, "built")
    # success agrees with error: result_messages() used to fail an assertion on a failure
    # without an error, and the policy's redaction on a message that was not text.
    assert result.success is (result.error is None)
    if result.error is not None:
        assert isinstance(result.error.message, str)
        assert result.error.code is not ErrorCode.PLUGIN_ERROR
    json.dumps(dict(result.metadata), allow_nan=False)
    _strict_json(result)


async def test_an_error_the_tool_built_is_bounded_by_its_output_cap() -> None:
    from tooldeck_hookspecs import ToolFailure

    cap = 10_000

    @tool(category="demo", execution={"max_output_bytes": cap})
    def loud() -> Any:
        """Fail with megabytes of message, suggestion and details."""
        return ToolResult.fail("EXECUTION_ERROR", "m" * 5_000_000, suggestion="s" * 5_000_000,
                               details={"log": "d" * 5_000_000})

    @tool(category="demo", execution={"max_output_bytes": cap})
    def raises_loud() -> Any:
        """Raise a ToolFailure with megabytes of message."""
        raise ToolFailure("EXECUTION_ERROR", "m" * 5_000_000)

    async with _deck(loud, raises_loud) as deck:
        built = await _call_then_ping(deck, "loud")
        raised = await _call_then_ping(deck, "raises_loud")
    for result in (built, raised):
        error = result.error
        assert error is not None and error.code is ErrorCode.EXECUTION_ERROR
        # The data's cap binds the error too (the sandbox's wire always did), with a marker.
        assert len(error.message) < cap + 100 and "chars]" in error.message
        assert len(error.suggestion or "") < cap + 100
        assert len(json.dumps(dict(error.details))) < cap


async def test_a_tool_cannot_claim_an_isolation_or_a_cache_hit() -> None:
    @tool(category="demo")
    def boastful() -> Any:
        """Claim a sandbox and a cache hit."""
        return ToolResult.ok("x", isolation="bubblewrap", cached=True)

    async with _deck(boastful) as deck:
        result = await _call_then_ping(deck, "boastful")
    assert result.metadata["isolation"] == "in-process"
    assert result.metadata["cached"] is False


def test_the_size_of_a_huge_string_is_known_without_encoding_it() -> None:
    import tracemalloc

    from tooldeck._normalise import json_size

    text = "é" * 5_000_000  # 10 MB once encoded
    tracemalloc.start()
    try:
        size = json_size(text, 1_000_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size > 1_000_000
    # Over the cap by its characters alone: nothing was encoded (a 10 MB copy before).
    assert peak < 1_000_000
