"""Garbage on the response channel: a tool (or whatever holds its channel) that writes frames of
its own. The host reads them as a malformed answer, a structured ``EXECUTION_ERROR``: never an
exception out of ``run()``, never a crash with an invented signal."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from tooldeck_runner import RunnerExecutor

from tooldeck_hookspecs import (
    ErrorCode,
    SecurityConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
)

TOOLS_DIR = str(Path(__file__).resolve().parent)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

WRITER = ToolDefinition(
    name="write_on_channel",
    description="a hostile test tool",
    category="code",
    entrypoint="runner_sandbox_tools:write_on_channel",
    security=SecurityConfig(sandbox=True),
)


@pytest.mark.parametrize("zygote", [True, False], ids=["zygote", "single-use"])
@pytest.mark.parametrize(
    "frame",
    [
        {"payload": "!exit zz"},  # the zygote's exit-status frame, with no number
        {"payload": "!exit 99999999999999999999999"},  # a status no process has
        {"payload": "x", "length": 4_000_000_000},  # declares 4 GB, ends after one byte
        {"payload": "\x00\xff not json"},
    ],
    ids=["exit-word", "exit-huge", "incomplete", "not-json"],
)
async def test_a_forged_frame_is_a_malformed_answer(
    frame: dict[str, Any], zygote: bool, tmp_path: Path
) -> None:
    ex = RunnerExecutor.from_settings(
        {"runner": {"sandbox": "bubblewrap", "python_path": [TOOLS_DIR], "zygote": zygote}}
    )
    try:
        context = ToolContext(session_id="channel", workdir=str(tmp_path))
        result = await ex.run(WRITER, ToolCall(name=WRITER.name, arguments=frame), context)
        # The next call of the session is served as usual.
        after = await ex.run(
            WRITER, ToolCall(name=WRITER.name, arguments={"payload": "!exit zz"}), context
        )
    finally:
        await ex.aclose()
    for got in (result, after):
        assert not got.success and got.error is not None
        assert got.error.code == ErrorCode.EXECUTION_ERROR, got.error
        assert "malformed answer" in got.error.message
        assert "signal" not in got.error.details
