"""Sandboxed calls: single-use worker processes under bubblewrap (or a plain process group).

Design of the warm pool. bubblewrap fixes a sandbox's mounts when it starts, and the workdir
mount (read-only or writable) and the network namespace differ per call. So workers are pooled
by :class:`PoolKey` ``(workdir, writes_workdir, network)``: the first call with a new key pays
a cold start and asks for ``warm_workers`` replacements; later calls with the same key take a
pre-started worker whose interpreter has already imported the contract, the wire format and the
tool modules recently used with that key (``--preload``), and is blocked reading its stdin.
Each worker serves one call then exits; a replacement is spawned while the call runs. At most
``max_warm_keys`` keys keep idle workers (least recently used keys are dropped).

Everything a call may configure that is not a mount (memory, CPU, file size, output cap) travels
in the request and is applied by the worker to itself before the tool's module is imported.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import shutil
import signal
import subprocess
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import attrs
import trio

from tooldeck_hookspecs import ErrorCode, ToolCall, ToolContext, ToolDefinition, ToolResult

from ._config import RunnerSettings
from ._outcomes import signal_result
from ._wire import (
    HEADER,
    Limits,
    SandboxRequest,
    WireContext,
    dumps,
    encode_frame,
    structure_result,
)

__all__ = [
    "PoolKey",
    "SandboxPool",
    "SandboxStatistics",
    "ISOLATION_BWRAP",
    "ISOLATION_PROCESS",
    "resolve_isolation",
]

logger = logging.getLogger("tooldeck.runner")

ISOLATION_BWRAP = "bubblewrap"
ISOLATION_PROCESS = "process (degraded isolation)"

_WORKER = str(Path(__file__).resolve().parent / "_worker.py")
# Directories of the host's root that a Python interpreter needs; symlinks are recreated as
# symlinks (merged-/usr systems) so the sandbox looks like the host without exposing /root, /home
# or the rest of /etc.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/mime.types",
    "/etc/alternatives",
)
_warned_degraded = False


@attrs.frozen
class PoolKey:
    """What a sandbox's mounts depend on."""

    workdir: str
    writable: bool
    network: bool


@attrs.frozen(kw_only=True)
class SandboxStatistics:
    """Counters of the sandbox pool."""

    isolation: str
    warm_idle: int
    served_warm: int
    served_cold: int
    spawned: int


@attrs.define(eq=False)
class _Worker:
    process: trio.Process
    key: PoolKey
    warm: bool = False


@attrs.define(eq=False)
class _Exchange:
    """What came back from one worker."""

    frame: bytes | None = None
    output: bytearray = attrs.field(factory=bytearray)
    truncated: bool = False


@functools.cache
def _interpreter_paths(python: str) -> tuple[str, ...]:
    """Directories the worker interpreter reads: prefixes and its default ``sys.path``."""
    code = (
        "import sys, json; "
        "print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path]))"
    )
    out = subprocess.run(
        [python, "-P", "-c", code], capture_output=True, text=True, check=True, env={}
    ).stdout
    paths = [str(Path(p).resolve()) for p in json.loads(out) if p]
    paths.append(str(Path(python).resolve().parent))
    return tuple(dict.fromkeys(p for p in paths if os.path.exists(p)))


def resolve_isolation(mode: str) -> str:
    """The isolation a ``runner.sandbox`` mode gives on this machine."""
    if mode == "process":
        return ISOLATION_PROCESS
    if shutil.which("bwrap"):
        return ISOLATION_BWRAP
    if mode == "bubblewrap":
        from tooldeck_hookspecs import ConfigError

        raise ConfigError(
            "runner.sandbox = 'bubblewrap' but `bwrap` is not installed "
            "(apt-get install bubblewrap)"
        )
    return ISOLATION_PROCESS


@attrs.define(eq=False)
class SandboxPool:
    """Starts, pools and reaps sandbox workers; runs one call per worker."""

    settings: RunnerSettings
    isolation: str = ""
    _idle: OrderedDict[PoolKey, list[_Worker]] = attrs.field(factory=OrderedDict)
    _preload: dict[PoolKey, list[str]] = attrs.field(factory=dict)
    _spawning: dict[PoolKey, int] = attrs.field(factory=dict)
    _served_warm: int = 0
    _served_cold: int = 0
    _spawned: int = 0
    _closed: bool = False
    _paths: tuple[str, ...] | None = None
    # Every worker not yet reaped, and the background refills in progress: aclose() waits for
    # the refills and kills all of these, so no worker outlives the pool.
    _live: set[_Worker] = attrs.field(factory=set)
    _refills: int = 0
    _refills_done: trio.Event | None = None

    def __attrs_post_init__(self) -> None:
        global _warned_degraded
        self.isolation = resolve_isolation(self.settings.sandbox)
        if self.isolation == ISOLATION_PROCESS and not _warned_degraded:
            _warned_degraded = True
            logger.warning(
                "tooldeck-runner: bubblewrap (bwrap) is not in use; sandboxed tools run as plain "
                "processes with resource limits only (degraded isolation: no filesystem, network "
                "or PID isolation). Install bubblewrap for real isolation."
            )

    # -- public -------------------------------------------------------------------------------

    async def run(self, tool: ToolDefinition, call: ToolCall, context: ToolContext) -> ToolResult:
        """Run one call in a worker. Cancellation kills the worker's whole process tree."""
        entrypoint = tool.entrypoint or _entrypoint_of(tool)
        if entrypoint is None:
            return ToolResult.fail(
                ErrorCode.EXECUTION_ERROR,
                f"sandboxed tool {tool.name!r} has no importable entrypoint ('module:qualname')",
                suggestion="This tool cannot run in a sandbox; report it to the user.",
            )
        workdir = str(Path(context.workdir or ".").resolve())
        if not os.path.isdir(workdir):
            return ToolResult.fail(
                ErrorCode.EXECUTION_ERROR,
                f"the session's working directory {workdir!r} does not exist",
                suggestion="Ask the user to fix the working directory of this session.",
            )
        key = PoolKey(workdir, tool.security.writes_workdir, tool.security.network)
        self._remember_module(key, entrypoint.partition(":")[0])
        limits = Limits(
            memory_mb=tool.execution.memory_mb,
            # The wall clock is the real limit; CPU seconds only stop a spinning process whose
            # parent cannot be reached (and a few are already spent importing).
            cpu_s=math.ceil(tool.execution.timeout_s) + 2,
            fsize_bytes=self.settings.file_size_mb * 1024 * 1024,
            nofile=self.settings.max_open_files,
            max_output_bytes=tool.execution.max_output_bytes,
        )
        request = SandboxRequest(
            call=call,
            context=WireContext(
                session_id=context.session_id,
                workdir=workdir,
                call_id=context.call_id or call.id,
                tool_name=context.tool_name or tool.name,
                allowed_paths=tuple(context.allowed_paths),
                attributes=dict(context.attributes),
                settings=dict(context.settings),
            ),
            entrypoint=entrypoint,
            call_style=tool.call_style,
            context_param=tool.context_param,
            limits=limits,
        )
        worker = self._take_warm(key)
        if worker is None:
            try:
                worker = await self._spawn(key, preload=())
            except OSError as exc:
                return ToolResult.fail(
                    ErrorCode.EXECUTION_ERROR,
                    f"the sandbox could not be started: {exc}",
                    suggestion="The tool cannot run right now; report it to the user.",
                    plugin="runner",
                )
            self._served_cold += 1
        else:
            self._served_warm += 1
        if self.settings.warm_workers:
            # A system task, not a child of this call: starting the replacement must not delay
            # the answer (it is owned by the pool, and aclose() kills what it starts).
            trio.lowlevel.spawn_system_task(self._refill_quietly, key)
        result = await self._exchange(worker, encode_frame(dumps(request)), limits)
        return result.with_metadata(isolation=self.isolation, warm=worker.warm)

    def statistics(self) -> SandboxStatistics:
        """A snapshot of the pool's counters."""
        return SandboxStatistics(
            isolation=self.isolation,
            warm_idle=sum(len(ws) for ws in self._idle.values()),
            served_warm=self._served_warm,
            served_cold=self._served_cold,
            spawned=self._spawned,
        )

    async def prewarm(self, workdir: str, *, writable: bool = False, network: bool = False) -> None:
        """Start the warm workers for a mount set now rather than at its first call."""
        await self._refill(PoolKey(str(Path(workdir).resolve()), writable, network))

    async def aclose(self) -> None:
        """Kill every worker, idle or starting."""
        self._closed = True
        self._idle.clear()
        with trio.CancelScope(shield=True):
            if self._refills:
                self._refills_done = trio.Event()
                with trio.move_on_after(10):
                    await self._refills_done.wait()
            for worker in list(self._live):
                await self._kill(worker)

    # -- pool ---------------------------------------------------------------------------------

    def _remember_module(self, key: PoolKey, module: str) -> None:
        modules = self._preload.setdefault(key, [])
        if module in modules:
            return
        modules.append(module)
        del modules[:-8]

    def _take_warm(self, key: PoolKey) -> _Worker | None:
        workers = self._idle.get(key)
        if workers is None:
            return None
        self._idle.move_to_end(key)
        while workers:
            # The oldest first: it is the most likely to have finished starting.
            worker = workers.pop(0)
            if worker.process.returncode is None and worker.process.poll() is None:
                return worker
            self._live.discard(worker)  # died while idle (killed from outside): already reaped
        return None

    async def _refill_quietly(self, key: PoolKey) -> None:
        self._refills += 1
        try:
            await self._refill(key)
        except Exception:  # a system task must not crash the run
            logger.exception("tooldeck-runner: starting warm workers failed")
        finally:
            self._refills -= 1
            if self._refills == 0 and self._refills_done is not None:
                self._refills_done.set()

    async def _refill(self, key: PoolKey) -> None:
        want = self.settings.warm_workers
        have = len(self._idle.get(key, ())) + self._spawning.get(key, 0)
        for _ in range(max(0, want - have)):
            if self._closed:
                return
            self._spawning[key] = self._spawning.get(key, 0) + 1
            try:
                worker = await self._spawn(key, preload=tuple(self._preload.get(key, ())))
            except OSError as exc:
                logger.warning("tooldeck-runner: could not start a warm worker: %s", exc)
                return
            finally:
                self._spawning[key] -= 1
            worker.warm = True
            if self._closed:
                await self._kill(worker)
                return
            self._idle.setdefault(key, []).append(worker)
            self._idle.move_to_end(key)
        while len(self._idle) > self.settings.max_warm_keys:
            _, evicted = self._idle.popitem(last=False)
            for worker in evicted:
                await self._kill(worker)

    # -- processes ----------------------------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
        }
        if self.settings.python_path:
            env["PYTHONPATH"] = os.pathsep.join(self.settings.python_path)
        return env

    def _command(self, key: PoolKey, preload: Sequence[str]) -> list[str]:
        python = self.settings.python
        worker = [python, "-P", _WORKER]
        if preload:
            worker += ["--preload", ",".join(preload)]
        if self.isolation == ISOLATION_PROCESS:
            return [*worker, "--monitor"]
        bwrap = shutil.which("bwrap") or "bwrap"
        cmd = [
            bwrap,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
        ]
        if key.network:
            cmd.append("--share-net")
        # Workdir first: the read-only interpreter mounts below stay read-only even when they
        # live inside a writable workdir.
        cmd += ["--bind" if key.writable else "--ro-bind", key.workdir, key.workdir]
        for path in _SYSTEM_DIRS:
            if os.path.islink(path):
                cmd += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                cmd += ["--ro-bind", path, path]
        for path in _ETC_FILES:
            cmd += ["--ro-bind-try", path, path]
        extra = [*(self._paths or ()), *self.settings.python_path]
        extra += [*self.settings.extra_ro_binds, str(Path(_WORKER).parent)]
        for path in dict.fromkeys(str(Path(p).resolve()) for p in extra):
            if os.path.exists(path) and not _under(path, _SYSTEM_DIRS):
                cmd += ["--ro-bind", path, path]
        cmd += ["--chdir", key.workdir, "--clearenv"]
        for name, value in self._environment().items():
            cmd += ["--setenv", name, value]
        return [*cmd, "--", *worker]

    async def _spawn(self, key: PoolKey, preload: Sequence[str]) -> _Worker:
        if self.isolation == ISOLATION_BWRAP and self._paths is None:
            self._paths = await trio.to_thread.run_sync(_interpreter_paths, self.settings.python)
        cmd = self._command(key, preload)
        process = await trio.lowlevel.open_process(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._environment(),
            cwd=key.workdir,
            # Own session and process group: the degraded mode kills the group; both modes keep
            # the tool away from the host's terminal.
            start_new_session=True,
        )
        self._spawned += 1
        worker = _Worker(process=process, key=key)
        self._live.add(worker)
        return worker

    async def _kill(self, worker: _Worker) -> None:
        """Kill the worker's process tree and reap it. Safe to call twice."""
        process = worker.process
        if self.isolation == ISOLATION_PROCESS:
            # The monitor cleans up the descendants it adopted (setsid daemons included) on
            # SIGTERM; the group kill afterwards catches whatever is left in the group.
            if process.returncode is None:
                try:
                    process.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
                with trio.move_on_after(1.0):
                    await process.wait()
            _killpg(process.pid)
        else:
            _kill_bwrap(process)
        await process.wait()
        self._live.discard(worker)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()

    async def _exchange(self, worker: _Worker, request: bytes, limits: Limits) -> ToolResult:
        process = worker.process
        stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
        assert stdin is not None and stdout is not None and stderr is not None
        got = _Exchange()
        cap = limits.max_output_bytes
        # The worker enforces the cap on the result itself; this guards against a worker that
        # does not (leaving room for its small OUTPUT_TRUNCATED answer when the cap is tiny).
        frame_cap = max(cap, 65536) + HEADER.size

        async def read_output() -> None:
            try:
                async for chunk in stderr:
                    room = cap - len(got.output)
                    got.output += chunk[: max(room, 0)]
                    if len(chunk) > room:
                        got.truncated = True
                        await self._kill_quick(worker)
                        return
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass

        try:
            try:
                await stdin.send_all(request)
                await stdin.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the worker died; its exit status tells why
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_output)
                buffer = bytearray()
                async for chunk in stdout:
                    buffer += chunk
                    if len(buffer) > frame_cap:
                        got.truncated = True
                        await self._kill_quick(worker)
                        break
                    if len(buffer) >= HEADER.size:
                        (length,) = HEADER.unpack_from(buffer)
                        if len(buffer) >= HEADER.size + length:
                            got.frame = bytes(buffer[HEADER.size : HEADER.size + length])
                            break
                if got.frame is not None and self.isolation == ISOLATION_BWRAP:
                    # The answer is the worker's last act: end the sandbox now rather than wait
                    # for the namespace to wind down by itself.
                    _kill_bwrap(process)
                # The worker exits right after answering; one that lingers (a tool's thread or
                # child holding it up) is killed.
                with trio.move_on_after(2.0) as lingering:
                    await process.wait()
                if lingering.cancelled_caught:
                    await self._kill_quick(worker)
                    await process.wait()
                if self.isolation == ISOLATION_PROCESS:
                    _killpg(process.pid)
                nursery.cancel_scope.cancel()
            # What the tool printed is already in the pipe; take it without waiting for end of
            # file, which an escaped process could hold back.
            if not got.truncated:
                room = cap - len(got.output)
                # trio's pipe streams are FdStreams on Unix: non-blocking fds.
                rest = _drain_now(stderr.fileno(), room + 1)  # type: ignore[attr-defined]
                got.output += rest[:room]
                got.truncated = len(rest) > room
        except BaseException:
            # Timeout, cancellation or a bug: never leave the process tree behind.
            with trio.CancelScope(shield=True):
                await self._kill(worker)
            raise
        await self._kill(worker)
        return self._interpret(got, process.returncode, limits)

    async def _kill_quick(self, worker: _Worker) -> None:
        process = worker.process
        if self.isolation == ISOLATION_PROCESS:
            try:
                process.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            with trio.move_on_after(0.5):
                await process.wait()
            _killpg(process.pid)
        else:
            _kill_bwrap(process)

    def _interpret(self, got: _Exchange, returncode: int | None, limits: Limits) -> ToolResult:
        tail = got.output[-4000:].decode("utf-8", "replace")
        if got.truncated:
            return ToolResult.fail(
                ErrorCode.OUTPUT_TRUNCATED,
                f"the tool produced more than {limits.max_output_bytes} bytes of output; "
                "it was stopped",
                details={"max_output_bytes": limits.max_output_bytes},
            )
        if got.frame is not None:
            try:
                result = structure_result(got.frame)
            except Exception as exc:  # a malformed answer is the tool's failure, not ours
                return ToolResult.fail(
                    ErrorCode.EXECUTION_ERROR, f"the sandbox worker sent a malformed answer: {exc}"
                )
            if got.output:
                result = result.with_metadata(output=got.output.decode("utf-8", "replace"))
            return result
        code = returncode if returncode is not None else -1
        # bubblewrap and the degraded mode's monitor both report "killed by N" as 128 + N.
        signum = -code if code < 0 else code - 128 if code > 128 else 0
        if signum:
            return signal_result(signum, tail, memory_mb=limits.memory_mb)
        return ToolResult.fail(
            ErrorCode.SANDBOX_CRASHED,
            f"the tool's process exited with status {code} without answering",
            details={"exit_status": code, "output_tail": tail[-2000:]},
        )


def _drain_now(fd: int, limit: int) -> bytes:
    """Read what a non-blocking pipe holds right now, up to ``limit`` bytes."""
    chunks = []
    while limit > 0:
        try:
            chunk = os.read(fd, min(limit, 65536))
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


def _kill_bwrap(process: trio.Process) -> None:
    """Kill a bubblewrap sandbox and everything in it.

    Once set up, the sandbox's processes die with bwrap (--die-with-parent, then the PID
    namespace's init). A sandbox still being set up is different: bwrap's child has not yet
    asked for that signal and would wait forever for its dead parent. It is still in bwrap's
    process group then, so the group is killed too. Only while bwrap is unreaped, so that the
    group id cannot have been reused.
    """
    if process.returncode is not None or process.poll() is not None:
        return
    _killpg(process.pid)
    try:
        process.kill()
    except ProcessLookupError:
        pass


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root + "/") for root in roots)


def _entrypoint_of(tool: ToolDefinition) -> str | None:
    fn = tool.execute
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    return f"{module}:{qualname}"
