"""The sandbox worker: a single-use process that runs one tool call and exits.

Started as ``python -P <this file> [--monitor] [--preload mod,mod]`` (by file path, so that the
package's ``__init__`` and trio are not imported). It prepares everything it can before the
request arrives, which is what makes a pre-started (warm) worker fast:

1. keep the original stdout as the private response channel and point fd 1 at stderr, so that
   whatever the tool prints is captured output and cannot corrupt the protocol;
2. import the wire format, the contract and the ``--preload`` modules (trusted, installed code);
3. block on stdin for one request frame, then apply the call's resource limits (address space
   when no memory cgroup bounds the call, CPU seconds, file size, open files, no core dumps) and
   install the seccomp filter (``_seccomp``) before touching the tool;
4. import the tool's execute function by reference, call it, write one response frame, exit.

The worker makes itself non-dumpable (``PR_SET_DUMPABLE 0``) before anything else. The programs a
tool starts run as the same uid, but the kernel then refuses them ``/proc/<worker>/fd/*``,
``/proc/<worker>/mem``, ``environ`` and ``ptrace``: without a capability (bubblewrap drops them
all) nothing of the sandbox can reach the response channel or read the session's data out of the
worker's memory. Under bubblewrap the worker is the sandbox's PID 1 (``--as-pid-1``), so no
other process holds the response pipe either, and signals from inside cannot kill it.

``--monitor`` (always given) forks once warmed up, before the request arrives (so the fork is
not on the call's path): the parent becomes a child subreaper, waits for the child, which reads
the request and runs the tool (reaping orphans meanwhile), then kills every leftover
descendant (daemons that called setsid included) and exits with ``128 + signal``. Under
bubblewrap the monitor is the sandbox's PID 1 (``--as-pid-1``): the tool runs as PID 2, so its
own signals (``abort()``) behave normally, while the monitor cannot be killed from inside. In the
degraded mode it keeps ``os.kill(os.getppid(), ...)`` in the tool away from the host process.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

_HERE = Path(__file__).resolve().parent
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_DUMPABLE = 4
_PR_SET_PDEATHSIG = 1


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"_tooldeck_runner_worker_{name}", _HERE / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _apply_limits(limits: Any) -> None:
    import resource

    def cap(which: int, value: int) -> None:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            # A limit already lower than ours (set by an admin) stays.
            pass

    if limits.memory_rlimit:
        cap(resource.RLIMIT_AS, limits.memory_mb * 1024 * 1024)
    cap(resource.RLIMIT_CPU, max(1, limits.cpu_s))
    cap(resource.RLIMIT_FSIZE, limits.fsize_bytes)
    cap(resource.RLIMIT_NOFILE, limits.nofile)


def _resolve(entrypoint: str) -> Any:
    module_name, _, qualname = entrypoint.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: fields start after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _kill_descendants() -> None:
    me = os.getpid()
    for _ in range(10_000):
        kids = _children(me)
        if not kids:
            return
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in kids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _monitor(child: int) -> None:
    """Parent side of ``--monitor``: wait, clean up, exit like bubblewrap. Never returns."""

    def on_term(_signum: int, _frame: Any) -> None:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _kill_descendants()
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    while True:
        # Any child: orphans are reparented to us (subreaper, or PID 1 under bubblewrap) and
        # must not pile up as zombies, which would count against the call's process limit.
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            break
    _kill_descendants()
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _become_subreaper() -> None:
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _emitter(wire: Any, response_fd: int) -> Any:
    """``ToolContext.emit`` inside the sandbox: progress frames on the response channel, ahead
    of the result (the host hands them to the caller while the tool runs)."""
    import threading

    lock = threading.Lock()

    def emit(event: Any) -> None:
        try:
            frame = wire.encode_frame(wire.progress_payload(event))
            with lock:
                view = memoryview(frame)
                while view:
                    view = view[os.write(response_fd, view):]
        except Exception:  # progress is best effort; the answer is what counts
            pass

    return emit


def _call(wire: Any, outcomes: Any, request: Any, response_fd: int | None = None) -> Any:
    from tooldeck_hookspecs import ToolContext, ToolDefinition, call_tool_function

    fn = _resolve(request.entrypoint)
    tool = ToolDefinition(
        name=request.context.tool_name or "tool",
        description="",
        category="sandbox",
        execute=fn,
        entrypoint=request.entrypoint,
        call_style=request.call_style,
        context_param=request.context_param,
    )
    import logging

    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    ctx = request.context
    context = ToolContext(
        session_id=ctx.session_id,
        workdir=ctx.workdir,
        call_id=ctx.call_id,
        tool_name=ctx.tool_name,
        allowed_paths=tuple(ctx.allowed_paths),
        attributes=ctx.attributes,
        settings=ctx.settings,
        logger=logging.getLogger(f"tooldeck.tool.{tool.name}"),
        **({"emit": _emitter(wire, response_fd)} if response_fd is not None else {}),
    )
    value = call_tool_function(tool, request.call.arguments, context)
    if hasattr(value, "__await__"):
        value = _run_awaitable(value)
    return outcomes.as_result(value)


def _run_awaitable(awaitable: Any) -> Any:
    async def main() -> Any:
        return await awaitable

    try:
        import trio
    except ImportError:  # pragma: no cover - trio is a dependency of the runner
        import asyncio

        return asyncio.run(main())
    return trio.run(main)


def _warm_up(wire: Any, outcomes: Any) -> None:
    """Pay one-time costs before the request arrives: cattrs generates its (un)structuring code
    on first use, and the logging module is imported lazily otherwise."""
    import logging  # noqa: F401

    from tooldeck_hookspecs import ToolCall, ToolContext, ToolDefinition

    sample = wire.SandboxRequest(
        call=ToolCall(name="warm", arguments={"a": 1}),
        context=wire.WireContext(session_id="s", workdir="/"),
        entrypoint="m:f",
    )
    wire.structure_request(wire.dumps(sample))
    wire.dumps(outcomes.ToolResult.fail("EXECUTION_ERROR", "warm-up"))
    ToolDefinition(name="warm", description="", category="sandbox", execute=print)
    ToolContext(session_id="s", workdir="/")


def main() -> None:
    """Serve one request; see the module docstring."""
    # First: before the response channel exists in a second descriptor, and long before any
    # program of the tool could look at /proc/<this pid>.
    if not _prctl(_PR_SET_DUMPABLE, 0):
        os._exit(4)  # fail closed: a dumpable worker would expose the channel
    # The deck's death ends the worker: SIGTERM, so that the monitor's handler can end the
    # tool's descendants (daemons included) first. The runner forks workers from a thread that
    # lives as long as the deck's process, which is what this signal is tied to.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    response_fd = os.dup(1)  # non-inheritable: the tool's children never hold the channel
    os.dup2(2, 1)
    args = sys.argv[1:]
    monitor = "--monitor" in args
    preload = args[args.index("--preload") + 1].split(",") if "--preload" in args else []

    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    wire = _load("_wire")
    outcomes = _load("_outcomes")
    seccomp_module = _load("_seccomp")  # before the request: its import is not on the call's path
    for name in preload:
        try:
            importlib.import_module(name)
        except BaseException:  # a broken preload must not kill the warm worker
            pass

    _warm_up(wire, outcomes)
    if monitor:
        # Forked now, while idle, not after the request: the fork is not on the call's path.
        _become_subreaper()
        child = os.fork()
        if child:
            os.close(response_fd)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)  # the request is the child's to read
            os.close(devnull)
            _monitor(child)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the tool's process dies with its monitor
    stdin = os.fdopen(0, "rb", buffering=0)
    frame = wire.read_frame(stdin, 256 * 1024 * 1024)
    if frame is None:
        os._exit(3)
    # Tools that read stdin see end of file, not the protocol.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    request = wire.structure_request(frame)

    limits = request.limits
    seccomp = "off"
    try:
        _apply_limits(limits)
        if limits.seccomp:
            seccomp = seccomp_module.install(network=limits.network)
        result = _call(wire, outcomes, request, response_fd)
        # What the host cannot see from outside travels with the answer.
        result = result.with_metadata(sandbox_seccomp=seccomp)
        payload = wire.dumps(result)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt too: always answer
        try:
            result = outcomes.exception_result(exc, memory_mb=limits.memory_mb)
            result = result.with_metadata(sandbox_seccomp=seccomp)
        except MemoryError:
            result = None
        payload = wire.dumps(result) if result is not None else b""
    if len(payload) > limits.max_output_bytes or not payload:
        if payload:
            result = outcomes.ToolResult.fail(
                "OUTPUT_TRUNCATED",
                f"the result is {len(payload)} bytes, more than the limit of "
                f"{limits.max_output_bytes} bytes",
            )
        else:
            result = outcomes.memory_result(limits.memory_mb, "while building the result")
        payload = wire.dumps(result)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # closed or broken streams must not prevent the answer
        pass
    view = memoryview(wire.encode_frame(payload))
    while view:
        written = os.write(response_fd, view)
        view = view[written:]
    # _exit: threads or atexit handlers the tool left behind must not keep the process alive.
    os._exit(0)


if __name__ == "__main__":
    main()
