"""Audit s39, hostile timing around the zygote: a call given up on just before it is handed to
its zygote, and a session's zygote pushed out by another session while that session's next
call was checking it.

Real bubblewrap, real cgroups, a real zygote per session. The timing is made exact, not
hoped for: the pool's workdir check (``_still_valid``, which runs in a worker thread and lets
the event loop run other calls) is wrapped so that the thing that must happen "meanwhile"
happens right there, through ``trio.from_thread``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from tooldeck_runner import RunnerExecutor
from tooldeck_runner._sandbox import SandboxPool

from tooldeck_hookspecs import (
    ExecutionConfig,
    SecurityConfig,
    ToolCall,
    ToolContext,
    ToolDefinition,
)

TOOLS_DIR = str(Path(__file__).resolve().parent)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="td-s39-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def executor(**runner: Any) -> RunnerExecutor:
    return RunnerExecutor.from_settings(
        {"runner": {"sandbox": "bubblewrap", "python_path": [TOOLS_DIR], "zygote": True, **runner}}
    )


def writing_echo() -> ToolDefinition:
    # Writing: the pool checks the workdir (a walk, in a thread) before it reuses a zygote.
    return ToolDefinition(
        name="echo",
        description="echo",
        category="code",
        entrypoint="runner_sandbox_tools:echo",
        security=SecurityConfig(sandbox=True, writes_workdir=True),
        execution=ExecutionConfig(timeout_s=60),
    )


async def call(ex: RunnerExecutor, workdir: Path, session: str, **arguments: Any) -> Any:
    tool = writing_echo()
    context = ToolContext(session_id=session, workdir=str(workdir))
    return await ex.run(tool, ToolCall(name=tool.name, arguments=arguments), context)


def pipe_fds() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                count += 1
        except OSError:
            continue
    return count


async def test_a_call_cancelled_right_before_its_hand_over_leaks_no_descriptor(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ex = executor()
    try:
        assert (await call(ex, workdir, "s")).success  # the session's zygote runs
        check = SandboxPool._still_valid
        scope: list[trio.CancelScope] = []

        def cancelled_meanwhile(pool: SandboxPool, worker: Any) -> bool:
            # The caller gives up while the workdir is being checked: the next checkpoint is
            # the hand-over of the call's descriptors to the zygote.
            trio.from_thread.run_sync(scope[-1].cancel)
            return check(pool, worker)

        # (slotted class: wrapped on the class, for this test only)
        monkeypatch.setattr(SandboxPool, "_still_valid", cancelled_meanwhile)

        async def given_up() -> None:
            with trio.CancelScope() as cs:
                scope.append(cs)
                await call(ex, workdir, "s")
            assert cs.cancelled_caught

        await given_up()
        before = pipe_fds()
        for _ in range(4):
            await given_up()
        # One pipe end (the call's output) used to stay open per such call, for good.
        assert pipe_fds() == before
        monkeypatch.setattr(SandboxPool, "_still_valid", check)
        assert (await call(ex, workdir, "s")).success  # and the zygote still serves
    finally:
        await ex.aclose()


async def test_a_zygote_pushed_out_during_its_check_is_not_handed_to_the_call(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ex = executor(max_warm_keys=1)  # one zygote kept: a second session's pushes the first out
    try:
        assert (await call(ex, workdir, "a")).success
        check = SandboxPool._still_valid
        others: list[Any] = []

        def other_session_meanwhile(pool: SandboxPool, worker: Any) -> bool:
            if not others:
                # While session a's zygote is checked, session b starts its own and pushes
                # a's out (idle: killed at once).
                others.append(trio.from_thread.run(call, ex, workdir, "b"))
            return check(pool, worker)

        monkeypatch.setattr(SandboxPool, "_still_valid", other_session_meanwhile)
        result = await call(ex, workdir, "a", text="after")
        assert others and others[0].success, others
        # It used to fail: KeyError on the table the zygote was no longer in (PLUGIN_ERROR).
        assert result.success, result.error
        assert result.data["arguments"] == {"text": "after"}
    finally:
        await ex.aclose()


async def test_a_session_that_ends_while_its_zygote_starts_keeps_no_zygote(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ex = executor()
    try:
        spawn = SandboxPool._spawn

        async def session_ends_meanwhile(
            pool: SandboxPool, key: Any, preload: Any, zygote_fds: Any = None
        ) -> Any:
            worker = await spawn(pool, key, preload, zygote_fds)
            if zygote_fds is not None:  # the session's zygote is starting: the session ends
                await pool.release_session("s")
            return worker

        monkeypatch.setattr(SandboxPool, "_spawn", session_ends_meanwhile)
        result = await call(ex, workdir, "s")
        assert result.success, result.error  # served all the same (by a single-use worker)
        pool = ex.sandbox_pool()
        # Its zygote (processes, a mount of the workdir) used to stay until newer sessions
        # pushed it out; and its lock with it.
        assert pool.statistics().zygotes == 0
        assert not pool.holds_session("s")
    finally:
        await ex.aclose()
