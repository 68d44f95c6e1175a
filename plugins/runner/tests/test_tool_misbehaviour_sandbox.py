"""Sandboxed tools that misbehave: a result the wire's JSON cannot carry as it is, an exception
whose text is hostile, a generator. Each gets the same answer it would get in process (the
faithful value, or a bounded structured error), never a lost result or a crashed worker.

The tools live at the end of ``runner_sandbox_tools.py`` and are imported by reference.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_runner import RunnerExecutor

from tooldeck_hookspecs import SecurityConfig, ToolCall, ToolContext, ToolDefinition, ToolResult

TOOLS_DIR = str(Path(__file__).resolve().parent)
MODES = [
    pytest.param(
        "bubblewrap",
        marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap"),
    ),
    "process",
]


def sandboxed(name: str) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description="a misbehaving test tool",
        category="code",
        entrypoint=f"runner_sandbox_tools:{name}",
        security=SecurityConfig(sandbox=True),
    )


async def call(
    ex: RunnerExecutor, workdir: Path, tool: ToolDefinition, **arguments: Any
) -> ToolResult:
    context = ToolContext(session_id="misbehaviour", workdir=str(workdir), call_id=uuid.uuid4().hex)
    return await ex.run(tool, ToolCall(name=tool.name, arguments=arguments), context)


async def next_call_works(ex: RunnerExecutor, workdir: Path) -> None:
    result = await call(ex, workdir, sandboxed("echo"), after="misbehaviour")
    assert result.success, result.error
    assert result.data["arguments"] == {"after": "misbehaviour"}


@pytest.fixture
async def executor(request: Any, tmp_path: Path) -> AsyncIterator[tuple[RunnerExecutor, Path]]:
    ex = RunnerExecutor.from_settings(
        {"runner": {"sandbox": request.param, "python_path": [TOOLS_DIR], "warm_workers": 1}}
    )
    yield ex, tmp_path
    await ex.aclose()


_CUT = "<cut: nested deeper than 200 levels>"


def _nested(depth: int) -> Any:
    value: Any = _CUT
    for _ in range(depth):
        value = [value]
    return value


ODD_VALUES = [
    # (kind, the data the caller gets: what the in-process path gives for the same value)
    ("bytes", {"$bytes_base64": "AP9ieXRlcw=="}),
    ("set", [1, 2, 3]),
    ("tuple-key", {"(1, 2)": "tuple key", "null": "none"}),
    ("colliding-keys", {"1": "int", "1 (str)": "str"}),
    ("unprintable", ["<unprintable _Unprintable>"]),
    ("surrogate", "a\ud800b"),
    ("long-int", ["1" + "0" * 4999 + "7"]),
    ("self-reference", _nested(201)),
]


@pytest.mark.parametrize("executor", MODES, indirect=True)
@pytest.mark.parametrize(("kind", "expected"), ODD_VALUES, ids=[k for k, _ in ODD_VALUES])
async def test_a_result_json_cannot_carry_as_is_arrives_as_in_process(
    executor: tuple[RunnerExecutor, Path], kind: str, expected: Any
) -> None:
    ex, workdir = executor
    with trio.fail_after(60):
        result = await call(ex, workdir, sandboxed("odd_value"), kind=kind)
        # Before: bytes and sets arrived as their repr ("b'...'", "{1, 2, 3}"); tuple keys,
        # an unprintable object, a lone surrogate, a long int and a cycle lost the result to
        # an EXECUTION_ERROR about the wire's own encoding.
        assert result.success, result.error
        assert result.data == expected
        await next_call_works(ex, workdir)


@pytest.mark.parametrize("executor", ["process"], indirect=True)
async def test_a_deeply_nested_result_is_cut_with_a_marker(
    executor: tuple[RunnerExecutor, Path],
) -> None:
    ex, workdir = executor
    with trio.fail_after(60):
        result = await call(ex, workdir, sandboxed("odd_value"), kind="deep")
    assert result.success, result.error
    assert _CUT in json.dumps(result.data)


@pytest.mark.parametrize("executor", MODES, indirect=True)
@pytest.mark.parametrize("kind", ["str-raises", "huge", "long-int"])
async def test_an_exception_with_hostile_text_is_a_bounded_execution_error(
    executor: tuple[RunnerExecutor, Path], kind: str
) -> None:
    ex, workdir = executor
    with trio.fail_after(60):
        result = await call(ex, workdir, sandboxed("hostile_exception"), kind=kind)
        # Before: SANDBOX_CRASHED (the worker died building the answer) or OUTPUT_TRUNCATED
        # (a 5 MB message read as a too-large result).
        assert result.error is not None and result.error.code == "EXECUTION_ERROR", result.error
        assert len(result.error.message) < 3_000
        await next_call_works(ex, workdir)


@pytest.mark.parametrize("executor", ["process"], indirect=True)
async def test_a_generator_tool_is_an_error_in_the_sandbox_too(
    executor: tuple[RunnerExecutor, Path],
) -> None:
    ex, workdir = executor
    with trio.fail_after(60):
        result = await call(ex, workdir, sandboxed("generator_tool"))
    assert result.error is not None and result.error.code == "EXECUTION_ERROR"
    assert "generator" in result.error.message


@pytest.mark.parametrize("executor", ["process"], indirect=True)
async def test_a_hand_made_inconsistent_result_is_made_consistent_in_the_sandbox(
    executor: tuple[RunnerExecutor, Path],
) -> None:
    ex, workdir = executor
    with trio.fail_after(60):
        result = await call(ex, workdir, sandboxed("hand_made_result"))
    # Before: the worker failed encoding the metadata, or the host got success=False with no
    # error at all (which result_messages() rejects).
    assert result.success is False and result.error is not None
    assert result.error.code == "EXECUTION_ERROR"
    assert result.metadata["when"] == [1, 2]
    json.dumps(dict(result.metadata), allow_nan=False)
