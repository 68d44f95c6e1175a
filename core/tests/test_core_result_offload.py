"""Big results are processed (redacted) off the event loop, under the call's deadline.

Issue 13 item 2: redaction of a 1 MB output used to run on the loop and freeze every session. The
core now runs a ``tooldeck_process_result`` hook whose function carries a ``tooldeck_offload``
predicate in a worker thread when the predicate holds; past the call's timeout the result is
withheld (TIMEOUT), never returned unredacted. The real policy plugin's redaction is exercised too.
"""

from __future__ import annotations

import random
import string
import threading

import attrs
import trio

from tooldeck import ErrorCode, ExecutionConfig, ToolDefinition, tool
from tooldeck.testing import inline_plugin, make_deck
from tooldeck_hookspecs import call_deadline

STAGES = ["schema", "runner"]


@tool(category="demo")
def quick() -> str:
    """Answer at once."""
    return "ok"


def _big(size: int = 200_000) -> str:
    return "x" * size


BIG = ToolDefinition(
    name="big",
    description="Return a big text.",
    category="demo",
    parameters={"type": "object", "properties": {"size": {"type": "integer"}}},
    execute=_big,
    call_style="kwargs",
    execution=ExecutionConfig(timeout_s=10, max_output_bytes=50_000_000),
)

# The same tool with a short timeout: for the processor that outlives its deadline.
QUICK_BIG = ToolDefinition(
    name="quick_big",
    description="Return a big text, quickly.",
    category="demo",
    parameters={"type": "object", "properties": {"size": {"type": "integer"}}},
    execute=_big,
    call_style="kwargs",
    execution=ExecutionConfig(timeout_s=0.5, max_output_bytes=50_000_000),
)


def _processor(
    name: str, *, block: threading.Event | None = None, seen: list | None = None
) -> object:
    """An inline result processor that offloads results over 100 kB and records its thread."""

    def tooldeck_process_result(call, tool, result):
        if seen is not None:
            seen.append((threading.get_ident(), call_deadline()))
        if block is not None and tool.name != "quick":
            block.wait(30)  # a processor stuck on a big result (the small ones pass)
        return result.with_metadata(processed_by=name)

    tooldeck_process_result.tooldeck_offload = (  # type: ignore[attr-defined]
        lambda result: isinstance(result.data, str) and len(result.data) > 100_000
    )
    return inline_plugin(tooldeck_process_result, name=name)


async def test_a_big_result_is_processed_in_a_worker_thread_with_the_call_deadline():
    seen: list = []
    loop_thread = threading.get_ident()
    async with make_deck(_processor("marker", seen=seen), load_entry_points=STAGES,
                         tools=[quick, BIG]) as deck:
        session = deck.session()
        small = await session.call("quick", {})
        big = await session.call("big", {})
    assert small.success and big.success
    assert small.metadata["processed_by"] == "marker" and big.metadata["processed_by"] == "marker"
    (small_thread, small_deadline), (big_thread, big_deadline) = seen
    assert small_thread == loop_thread and small_deadline is None  # small: inline, no deadline
    assert big_thread != loop_thread and big_deadline is not None  # big: a worker, a deadline


async def test_a_slow_processor_withholds_the_result_and_stalls_nobody():
    release = threading.Event()
    seen: list = []
    outcome: dict = {}
    try:
        async with make_deck(_processor("slowredact", block=release, seen=seen),
                             load_entry_points=STAGES, tools=[quick, QUICK_BIG]) as deck:
            slow, fast = deck.session(), deck.session()

            async def big_call() -> None:
                outcome["big"] = await slow.call("quick_big", {})

            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(big_call)
                    while not seen:
                        await trio.sleep(0.01)
                    # The processor holds its thread; the loop still serves other sessions.
                    for _ in range(10):
                        assert (await fast.call("quick", {})).success
                    assert "big" not in outcome
    finally:
        release.set()
    error = outcome["big"].error
    assert error is not None and error.code is ErrorCode.TIMEOUT
    assert "slowredact" in error.message and "withheld" in error.message
    assert outcome["big"].data is None


async def test_cancel_during_processing_answers_cancelled():
    release = threading.Event()
    seen: list = []
    outcome: dict = {}
    slow_big = ToolDefinition(
        name="slow_big", description="Return a big text slowly.", category="demo",
        parameters={"type": "object", "properties": {}}, execute=_big, call_style="kwargs",
        execution=ExecutionConfig(timeout_s=20, max_output_bytes=50_000_000),
    )
    try:
        async with make_deck(_processor("slowredact", block=release, seen=seen),
                             load_entry_points=STAGES, tools=[slow_big]) as deck:
            session = deck.session()

            async def big_call() -> None:
                outcome["big"] = await session.call("slow_big", {})

            with trio.fail_after(15):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(big_call)
                    while not seen:
                        await trio.sleep(0.01)
                    session.cancel()
    finally:
        release.set()
    error = outcome["big"].error
    assert error is not None and error.code is ErrorCode.CANCELLED
    assert outcome["big"].data is None


def _secret_line(size: int) -> tuple[str, list[str]]:
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + "/+"
    parts, secrets, total = [], [], 0
    while total < size:
        secret = "".join(rng.choice(alphabet) for _ in range(40))
        parts.append(f"aws_secret={secret} ")
        secrets.append(secret)
        total += len(parts[-1])
    return "".join(parts), secrets


async def test_the_policy_redacts_a_one_megabyte_line_off_the_loop():
    text, secrets = _secret_line(1_000_000)

    def leak() -> str:
        return text

    leaky = ToolDefinition(
        name="leak", description="Print a file full of keys.", category="demo",
        parameters={"type": "object", "properties": {}}, execute=leak, call_style="kwargs",
        execution=ExecutionConfig(timeout_s=120, max_output_bytes=50_000_000),
    )
    async with make_deck(load_entry_points=[*STAGES, "policy"], tools=[leaky]) as deck:
        result = await deck.session().call("leak", {})
    assert result.success, result.error
    assert isinstance(result.data, str)
    leaked = [secret for secret in secrets if secret in result.data]
    assert leaked == []


async def test_the_policy_past_the_deadline_withholds_everything():
    # ~8 MB of findings take seconds to redact on any machine: past the 0.3 s timeout the
    # result is withheld, nothing of it comes back.
    text, secrets = _secret_line(8_000_000)

    def leak() -> str:
        return text

    leaky = ToolDefinition(
        name="leak", description="Print a file full of keys.", category="demo",
        parameters={"type": "object", "properties": {}}, execute=leak, call_style="kwargs",
        execution=ExecutionConfig(timeout_s=0.3, max_output_bytes=50_000_000),
    )
    async with make_deck(load_entry_points=[*STAGES, "policy"], tools=[leaky]) as deck:
        result = await deck.session().call("leak", {})
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
    assert "withheld" in result.error.message  # the redaction's deadline, not the tool's
    assert result.data is None
    assert not any(secret in repr(result) for secret in secrets[:50])


@tool(category="demo")
def fails_big() -> None:
    """Fail with a huge error detail (a failure's data is None)."""
    from tooldeck import ToolFailure

    raise ToolFailure(ErrorCode.EXECUTION_ERROR, "broke", details={"log": "k" * 300_000})


async def test_a_failure_with_big_details_is_processed_off_the_loop_too():
    """The offload predicate is asked for failures (data None) as well: an audit measured a
    1 MB error detail redacted on the loop for 5 s, every session stalled."""
    seen: list = []
    loop_thread = threading.get_ident()
    processor = _processor("marker", seen=seen)
    # This processor's predicate looks at the error details as the policy's does.
    processor.tooldeck_process_result.tooldeck_offload = (  # type: ignore[attr-defined]
        lambda result: result.error is not None and len(str(result.error.details)) > 100_000
    )
    async with make_deck(processor, load_entry_points=STAGES, tools=[fails_big]) as deck:
        result = await deck.session().call("fails_big", {})
    assert result.error is not None and result.error.code == "EXECUTION_ERROR"
    ((thread, deadline),) = seen
    assert thread != loop_thread and deadline is not None


# -- results with millions of items are checked (plain JSON, size cap) off the loop ------------


def _many(count: int = 300_000) -> list:
    return [{"i": i, "tags": ("a", "b")} for i in range(count // 3)]


MANY = ToolDefinition(
    name="many", description="Return many rows.", category="demo",
    parameters={"type": "object", "properties": {"count": {"type": "integer"}}},
    execute=_many, call_style="kwargs",
    execution=ExecutionConfig(timeout_s=10, max_output_bytes=50_000_000),
)


async def test_a_result_with_many_items_is_normalised_in_a_worker_thread(monkeypatch):
    import tooldeck._deck as deck_module

    threads: list[int] = []
    original = deck_module._normalised

    def recording(result, cap):
        threads.append(threading.get_ident())
        return original(result, cap)

    monkeypatch.setattr(deck_module, "_normalised", recording)
    loop_thread = threading.get_ident()
    async with make_deck(load_entry_points=STAGES, tools=[MANY]) as deck:
        session = deck.session()
        result = await session.call("many", {"count": 300_000})
        small = await session.call("many", {"count": 30})
    assert result.success, result.error
    # Converted all the same (tuples became lists), off the loop.
    assert len(result.data) == 100_000 and result.data[7] == {"i": 7, "tags": ["a", "b"]}
    assert small.success and small.data[1] == {"i": 1, "tags": ["a", "b"]}
    big_thread, small_thread = threads
    assert big_thread != loop_thread
    assert small_thread == loop_thread  # small results pay no thread hop


async def test_checking_a_result_past_the_deadline_withholds_it(monkeypatch):
    import time

    import tooldeck._deck as deck_module

    original = deck_module._normalised

    def slow(result, cap):
        time.sleep(1.5)  # a walk that outlives the call's 0.5 s timeout
        return original(result, cap)

    monkeypatch.setattr(deck_module, "_normalised", slow)
    quick_many = attrs.evolve(MANY, name="quick_many",
                              execution=ExecutionConfig(timeout_s=0.5, max_output_bytes=50_000_000))
    async with make_deck(load_entry_points=STAGES, tools=[quick_many, quick]) as deck:
        session = deck.session()
        with trio.fail_after(10):
            result = await session.call("quick_many", {"count": 300_000})
            other = await session.call("quick", {})  # the session is not stuck behind it
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
    assert "withheld" in result.error.message and result.data is None
    assert other.success and other.data == "ok"


async def test_an_unmarked_result_processor_runs_in_a_thread_and_a_hung_one_is_withheld():
    """A custom processor with neither @nonblocking nor a tooldeck_offload predicate may call a
    service: it runs in a worker thread under the call's deadline, so a hung one withholds its
    own call's result (TIMEOUT) and stalls no other session."""
    from tooldeck_hookspecs import nonblocking

    release = threading.Event()
    loop_thread = threading.get_ident()
    seen: dict[str, list[int]] = {"slow": [], "cheap": []}

    def tooldeck_process_result(call, tool, result):
        seen["slow"].append(threading.get_ident())
        if call.arguments.get("size") == 7:
            release.wait(30)
        return result.with_metadata(checked=True)

    @nonblocking
    def cheap(call, tool, result):
        seen["cheap"].append(threading.get_ident())
        return None

    try:
        async with make_deck(
            inline_plugin(tooldeck_process_result, name="audit"),
            inline_plugin(tooldeck_process_result=cheap, name="cheap"),
            load_entry_points=STAGES, tools=[quick, QUICK_BIG],
        ) as deck:
            stuck, other = deck.session(), deck.session()
            outcome: dict = {}

            async def stuck_call() -> None:
                outcome["stuck"] = await stuck.call("quick_big", {"size": 7})

            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(stuck_call)
                    await trio.sleep(0.05)
                    # The hung thread is still blocked (released below): calls go on.
                    for _ in range(5):
                        fine = await other.call("quick", {})
                        assert fine.success and fine.metadata.get("checked") is True
    finally:
        release.set()
    result = outcome["stuck"]
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
    assert "audit" in result.error.message and result.data is None
    assert loop_thread not in seen["slow"]
    assert set(seen["cheap"]) == {loop_thread}
