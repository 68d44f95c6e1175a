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

import gc
import importlib
import importlib.util
import os
import re
import signal
import stat
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

_HERE = Path(__file__).resolve().parent
# Set in a zygote started with ``--seccomp`` once it installed the filter on itself: every call
# process it forks inherits the filter from birth, and reports it instead of installing it again
# (assembling and loading it cost a call a few hundred microseconds).
_INHERITED_SECCOMP: str | None = None
#: In a zygote's call process: how stacking the user-namespace rules went (see ``_spare``).
_USERNS_GUARD = "not installed"
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

    def cap(which: int, value: int, hard: int | None = None) -> None:
        try:
            resource.setrlimit(which, (value, value if hard is None else hard))
        except (ValueError, OSError, OverflowError):
            # A limit already lower than ours (set by an admin) stays; one too large for the
            # kernel's type is no limit.
            pass

    if limits.memory_rlimit:
        cap(resource.RLIMIT_AS, limits.memory_mb * 1024 * 1024)
        _fewer_malloc_arenas()
    # The soft limit sends SIGXCPU, which the host reports as the CPU limit (TIMEOUT); with
    # soft == hard the kernel sends SIGKILL straight away, which reads as a crash.
    cap(resource.RLIMIT_CPU, max(1, limits.cpu_s), max(1, limits.cpu_s) + 1)
    cap(resource.RLIMIT_FSIZE, limits.fsize_bytes)
    cap(resource.RLIMIT_NOFILE, limits.nofile)


def _fewer_malloc_arenas() -> None:
    """At most two glibc malloc arenas from now on (``mallopt(M_ARENA_MAX, 2)``).

    RLIMIT_AS counts address space, and glibc reserves a 64 MiB arena for each thread that
    allocates: under the 256 MiB fallback a tool could start only 4 threads. Two arenas
    cost nothing in memory. Not glibc (musl): nothing to do.
    """
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(-8, 2)  # M_ARENA_MAX
    except (AttributeError, OSError):
        pass


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


def _context_limits(limits: Any) -> dict[str, Any]:
    """The ``limits`` of the tool's context: what this worker applies (``_apply_limits``),
    and the call's configured ``timeout_s`` as the in-process context has it."""
    applied: dict[str, Any] = {
        "memory_mb": limits.memory_mb,
        "max_output_bytes": limits.max_output_bytes,
        "memory": "rlimit" if limits.memory_rlimit else "cgroup",
    }
    # getattr: a request from an older host has no timeout_s.
    timeout_s = getattr(limits, "timeout_s", None)
    if timeout_s is not None:
        applied["timeout_s"] = timeout_s
    return {"limits": applied}


def _call(wire: Any, outcomes: Any, request: Any, response_fd: int | None = None) -> Any:
    from tooldeck_hookspecs import CallControl, ToolContext, ToolDefinition, call_tool_function

    ctx = request.context
    # The call's deadline on this process's clock, read before the tool is imported: what the
    # tool has left to stop by itself (and answer) before the host kills it. Nothing else to
    # control here: giving up on a sandboxed call kills it.
    bounds = [] if ctx.deadline is None else [ctx.deadline]
    if ctx.seconds_left is not None:
        bounds.append(time.monotonic() + ctx.seconds_left)
    control = CallControl(deadline=min(bounds)) if bounds else None
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
    context = ToolContext(
        session_id=ctx.session_id,
        workdir=ctx.workdir,
        call_id=ctx.call_id,
        tool_name=ctx.tool_name,
        allowed_paths=tuple(ctx.allowed_paths),
        attributes=ctx.attributes,
        settings=ctx.settings,
        # The deployment's rules, not the defaults: a sandboxed file_write refuses what the
        # same tool refuses outside the sandbox (empty only from an older host: the defaults).
        **({"protected_paths": tuple(ctx.protected_paths)} if ctx.protected_paths else {}),
        logger=logging.getLogger(f"tooldeck.tool.{tool.name}"),
        control=control,
        **({"emit": _emitter(wire, response_fd)} if response_fd is not None else {}),
        **_context_limits(request.limits),
    )
    value = call_tool_function(tool, request.call.arguments, context)
    if hasattr(value, "__await__"):
        value = _run_awaitable(value)
        if hasattr(value, "__await__"):
            # What the tool's coroutine returned is awaitable too: never awaited, never run
            # (closed, with no "never awaited" warning in the call's output).
            return outcomes.not_a_value_result(value)
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


def _warm_up(wire: Any, outcomes: Any, *, whole_call: bool = False) -> None:
    """Pay one-time costs before the request arrives: cattrs generates its (un)structuring code
    on first use, and the logging module is imported lazily otherwise. The root logger's
    handler is made here too (``_call`` repeats ``basicConfig``, a no-op then): it writes to
    ``sys.stderr``, whose descriptor 2 each call points at its own output before the tool
    runs."""
    import logging

    logging.basicConfig(stream=sys.stderr, level=logging.INFO)

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
    if whole_call:
        # A zygote forks every call from its memory: a whole call of a function of the contract
        # done here once (no call's data: a constant) leaves what a call computes lazily on its
        # first run (signatures, converters, caches) computed, instead of done again per call.
        request = wire.structure_request(
            wire.dumps(
                wire.SandboxRequest(
                    call=ToolCall(name="warm", arguments={"value": {"a": [1, "b", None]}}),
                    context=wire.WireContext(
                        session_id="s", workdir="/", call_id="c", tool_name="warm"
                    ),
                    entrypoint="tooldeck_hookspecs:canonical_json",
                    call_style="kwargs",
                )
            )
        )
        result = _call(wire, outcomes, request).with_metadata(sandbox_seccomp="off")
        wire.encode_frame(wire.dumps(result))


def main() -> None:
    """Serve one request; see the module docstring."""
    if "--zygote" in sys.argv[1:]:
        zygote_main(sys.argv[1:])
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
    _serve(0, response_fd, wire, outcomes, seccomp_module)


def _serve(
    request_fd: int, response_fd: int, wire: Any, outcomes: Any, seccomp_module: Any
) -> None:
    """Read one request, run the tool under the call's limits, answer, exit. Never returns."""
    stdin = os.fdopen(request_fd, "rb", buffering=0, closefd=False)
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
        if _INHERITED_SECCOMP is not None:
            # Installed by the zygote before it forked this process (the same rules: its
            # network is the call's); a filter cannot be removed, only reported. The zygote's
            # leaves new user namespaces allowed (it makes one per call): the call's PID 1
            # stacked the rest on itself once its namespaces existed (``_spare``).
            seccomp = _INHERITED_SECCOMP
            if _USERNS_GUARD != "on":
                seccomp = f"partial (new user namespaces allowed: {_USERNS_GUARD})"
        elif limits.seccomp:
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


# -- zygote ---------------------------------------------------------------------------------
#
# ``--zygote FD --admin FD``: the sandbox's PID 1 stays up and forks one process per call. The
# host sends on the admin socket ``b"p<module>"`` (import a trusted tool module now, like
# --preload), and on the calls socket (both SOCK_SEQPACKET) one ``b"c"`` per call with two
# descriptors (SCM_RIGHTS): the call's own stream socket and the write end of its output pipe.
# A spare call process takes it. The zygote never reads a request: what a call carries is only
# ever in the memory of that call's processes, never in the zygote's (which every later call
# inherits by fork).

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_RDONLY = 1
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
# What of a proc the call's PID 1 makes read-only, like bubblewrap does for its own /proc:
# host-wide knobs (sysctls, IRQ affinity, buses, SysRq) that a uid mapped to the host's root
# could otherwise write even without a capability (``uid = "deck"`` on a root deck).
_PROC_COVERS = ("sys", "sysrq-trigger", "irq", "bus")
_PR_CAPBSET_DROP = 24
_SYS_OPEN_TREE = 428  # the same number on x86-64 and arm64 (syscalls added after 5.0 are)
_SYS_MOVE_MOUNT = 429
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = 0o2000000
_AT_RECURSIVE = 0x8000
_MOVE_MOUNT_F_EMPTY_PATH = 4
_MSG_CMSG_CLOEXEC = 0x40000000
# Call processes kept forked and isolated ahead of their calls.
_SPARES = 2


_LIBC: Any = None
# clone(2)'s number: the same "fork with flags" ABI everywhere when the stack and the pointers
# are all 0 (x86-64 and arm64 only differ in the order of the last two, both 0 here).
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        import ctypes

        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _call_flags(network: bool) -> int:
    flags = _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWIPC | _CLONE_NEWUTS
    if not network:
        flags |= _CLONE_NEWNET  # its own loopback: concurrent calls cannot talk over 127.0.0.1
    return flags


def _clone_into(flags: int) -> int:
    """``fork()`` straight into new namespaces (``clone(flags | SIGCHLD)``): the child is born
    PID 1 of its own PID namespace, in its own user namespace with its capabilities, so the
    spare needs no second fork. Returns like ``os.fork``; ``OSError`` when the kernel refuses
    (the caller falls back to fork + unshare). Python's fork hooks run as for ``os.fork``
    (``PyOS_AfterFork_Child``: the interpreter's state, and ``random`` reseeds itself)."""
    import ctypes
    import platform

    number = _SYS_CLONE.get(platform.machine())
    if number is None:
        raise OSError(38, "clone: no syscall number for this architecture")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    zero = ctypes.c_ulong(0)
    pid = libc.syscall(
        ctypes.c_long(number), ctypes.c_ulong(flags | signal.SIGCHLD), zero, zero, zero, zero
    )
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    errno = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(errno, f"clone: {os.strerror(errno)}")
    return int(pid)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        import ctypes

        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _write_file(path: str, text: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:  # which write the kernel refused is what the fallback reports
        raise OSError(exc.errno, f"{text.strip()!r} > {path}: {exc.strerror}") from None


def _mounts_below(target: str) -> list[str]:
    """Mount points strictly below ``target``, outermost only (their children come along)."""
    found: list[str] = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            raw = line.split(" ")[4]
            # mountinfo escapes space, tab, newline and backslash as octal.
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), raw)
            if point.startswith(target + "/"):
                found.append(point)
    outer: list[str] = []
    for point in sorted(set(found)):
        if not any(point.startswith(o + "/") for o in outer):
            outer.append(point)
    return outer


def _isolate_call(
    tmp_bytes: int,
    network: bool,
    ids: tuple[int, int],
    *,
    cloned: bool = False,
    carried: dict[str, list[str]] | None = None,
) -> None:
    """Give this call process namespaces of its own (see the module docstring), or, when
    ``cloned`` (born in them by ``_clone_into``), set up the ones it has. It keeps the
    capabilities of its new user namespace: the call's PID 1 mounts the call's ``/proc`` and
    then drops them all (``_drop_capabilities``). ``ids`` are the zygote's uid and gid, read
    before the clone: a process born in a new user namespace sees the overflow ids (65534)
    until its map is written, which would map the wrong uid (and fail where 65534 is not the
    sandbox's uid: a deck that is not root). ``carried``: the mounts below ``/tmp`` and
    ``/dev/shm`` (``_mounts_below``), read once by the zygote, whose mount table this process
    copied and which never changes; read here when not given."""
    import ctypes

    libc = _libc()
    uid, gid = ids
    if not cloned:
        _check(libc.unshare(_call_flags(network)), "unshare")
    # The same ids inside as outside: the tool stays the unprivileged uid of the sandbox. A
    # non-dumpable process's /proc files belong to root, so for these three writes only this
    # process (which holds no call data yet, and is already in a user namespace no other call
    # can ptrace into) is dumpable.
    _prctl(_PR_SET_DUMPABLE, 1)
    try:
        _write_file("/proc/self/uid_map", f"{uid} {uid} 1")
        _write_file("/proc/self/setgroups", "deny")
        _write_file("/proc/self/gid_map", f"{gid} {gid} 1")
    finally:
        if not _prctl(_PR_SET_DUMPABLE, 0):
            os._exit(4)
    options = f"size={tmp_bytes},mode=1777".encode()
    for target in ("/tmp", "/dev/shm"):
        # What bubblewrap mounted below it (a workdir or import path under /tmp) is carried
        # over: cloned (recursively: read-only and protected binds included) before the fresh
        # tmpfs covers it, and attached again at the same place on top.
        below = carried[target] if carried is not None else _mounts_below(target)
        clones = []
        for path in below:
            fd = libc.syscall(
                ctypes.c_long(_SYS_OPEN_TREE),
                ctypes.c_int(-100),  # AT_FDCWD
                path.encode(),
                ctypes.c_uint(_OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE),
            )
            if fd < 0:
                _check(-1, f"open_tree({path})")
            clones.append((path, fd))
        # A fresh tmpfs over the zygote's: nothing a previous call left in /tmp is visible.
        _check(
            libc.mount(b"tmpfs", target.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options),
            f"mount tmpfs on {target}",
        )
        for path, fd in clones:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            ret = libc.syscall(
                ctypes.c_long(_SYS_MOVE_MOUNT),
                ctypes.c_int(fd),
                b"",
                ctypes.c_int(-100),
                path.encode(),
                ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH),
            )
            _check(0 if ret == 0 else -1, f"move_mount({path})")
            os.close(fd)


def _mount_private_proc() -> None:
    """Cover the zygote's ``/proc`` with a fresh ``proc`` of the call's own PID namespace.

    Done by the call's PID 1 (a proc instance is that of the mounting process's PID namespace,
    and mounting it needs ``CAP_SYS_ADMIN`` over that namespace's user namespace: the call's,
    whose capabilities this process still holds). The kernel allows a new proc in a user
    namespace only when an existing proc mount is *fully visible* (``mount_too_revealing``: no
    locked mount over a non-empty directory in it; the covers bubblewrap made are locked in
    the call's mount namespace). Where bubblewrap runs as a uid that does not map the host's
    root (a root deck's uid 65534, a deck that is not root), it skips its read-only covers of
    ``/proc/sys``, ``irq``, ``bus`` and ``sysrq-trigger`` (it could not write them anyway), and
    the zygote's ``/proc`` is fully visible. Where it maps the host's root (``uid = "deck"`` on
    a root deck) it covers ``irq`` and ``bus``; the pool then gives the zygote a proc of the
    deck's own with no cover, bound where no path leads (``_sandbox._HIDDEN_PROC_DIR``), which
    satisfies the rule. If the mount fails all the same, the pool goes to single-use workers
    (``zygote_fallback``). Then this process makes the same four entries read-only in the new
    proc (``_PROC_COVERS``), whatever bubblewrap did.
    """
    libc = _libc()
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    _check(libc.mount(b"proc", b"/proc", b"proc", flags, None), "mount a private /proc")
    for name in _PROC_COVERS:
        path = f"/proc/{name}".encode()
        if not os.path.exists(path):
            continue
        # Made in the call's own user namespace, these covers are not locked for it, but the
        # tool has no capability left to undo them, and a namespace it might nest inside
        # would see them locked (so no uncovered proc could be mounted there either).
        _check(libc.mount(path, path, None, _MS_BIND | _MS_REC, None), f"bind {name}")
        _check(
            libc.mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags, None),
            f"make {name} read-only",
        )


def _drop_capabilities() -> None:
    """Drop the bounding set and every capability the call's user namespace gave."""
    import ctypes

    libc = _libc()
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break  # EINVAL: past the kernel's last capability
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capset(header, data), "capset")


def _spare(
    calls_fd: int, notify_fd: int, tmp_bytes: int, network: bool, wire: Any, outcomes: Any,
    seccomp_module: Any, ids: tuple[int, int], cloned: bool = False,
    carried: dict[str, list[str]] | None = None,
) -> None:
    """A call's process, forked by the zygote ahead of its call. Never returns.

    Born by ``_clone_into`` (``cloned``), it already is the call's PID 1 (P1) in its namespaces;
    else it isolates itself (M) and forks P1, then exits. P1 forks the tool's
    process (T, PID 2: its own signals behave normally): all of that is off the call's path. P1
    takes one call message from the calls socket, tells the zygote to fork a replacement, and
    hands the call's descriptors to T. T tells the host it is ready (the host reads T's pid
    from the socket's credentials and moves it into the call's cgroup), waits for the go, and
    serves the request. P1 reaps orphans until T is done and reports T's exit status as a last
    frame ``!exit N``; when P1 exits, the kernel ends every process left in the call's PID
    namespace. P1 and T die with the zygote
    (the sandbox's PID 1: its PID namespace contains the call's).
    """
    global _USERNS_GUARD
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    failure = ""
    try:
        _isolate_call(tmp_bytes, network, ids, cloned=cloned, carried=carried)
        if not cloned and os.fork():
            os._exit(0)
        # The call's PID 1 from here on: the first process of its PID namespace.
        _mount_private_proc()
        _drop_capabilities()
        if _INHERITED_SECCOMP is not None:
            # The zygote's filter leaves new user namespaces allowed (it makes one per call);
            # from here on this call and everything it starts are refused them. Off the
            # call's path: this process is forked ahead of its call.
            _USERNS_GUARD = seccomp_module.install_userns_guard()
    except OSError as exc:
        # This process takes the call all the same, only to say why it cannot serve it (and
        # with no capability left: it runs no tool, but it may still hold some).
        failure = f"tooldeck-runner: cannot isolate the call: {exc}\n"
        try:
            _drop_capabilities()
        except OSError:
            os._exit(126)
    _call_init(calls_fd, notify_fd, failure, wire, outcomes, seccomp_module)


def _call_init(
    calls_fd: int, notify_fd: int, failure: str, wire: Any, outcomes: Any, seccomp_module: Any
) -> None:
    """P1 of ``_spare``. Never returns."""
    import socket

    tool = -1
    if not failure:
        # The tool's process too is forked ahead: it waits for the call's descriptors, which
        # this process hands it on a private socket pair.
        handoff, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        tool = os.fork()
        if tool == 0:
            handoff.close()
            os.close(calls_fd)
            os.close(notify_fd)
            _tool_process(theirs, wire, outcomes, seccomp_module)
        theirs.close()
    calls = socket.socket(fileno=calls_fd)
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(calls, 16, 4, _MSG_CMSG_CLOEXEC)
            break
        except InterruptedError:
            continue
        except OSError:
            os._exit(0)
    calls.close()  # one call only: nothing of this process ever sees another call's message
    try:
        os.write(notify_fd, b"x")
    except OSError:
        pass
    os.close(notify_fd)
    if message != b"c" or len(fds) != 2:
        os._exit(0)  # end of file: the pool is done with this zygote
    call_fd, out_fd = fds
    if failure:
        os.dup2(out_fd, 2)
        try:
            os.write(2, failure.encode())
        except OSError:
            pass
        os._exit(126)
    try:
        socket.send_fds(handoff, [b"c"], [call_fd, out_fd])
    except OSError:
        os._exit(126)
    handoff.close()
    os.close(out_fd)
    while True:  # PID 1: reap orphans until the tool's process is done
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == tool:
            break
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    try:
        view = memoryview(wire.encode_frame(f"!exit {code}".encode()))
        while view:
            view = view[os.write(call_fd, view):]
    except OSError:
        pass
    os._exit(0)


def _tool_process(handoff: Any, wire: Any, outcomes: Any, seccomp_module: Any) -> None:
    """T of ``_spare``: gets the call's descriptors from P1, reports ready, serves. Never
    returns."""
    import socket

    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        message, fds, _flags, _addr = socket.recv_fds(handoff, 16, 4, _MSG_CMSG_CLOEXEC)
    except OSError:
        os._exit(0)
    handoff.close()
    if message != b"c" or len(fds) != 2:
        os._exit(0)  # P1 ended without a call (the zygote is closing)
    call_fd, out_fd = fds
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    channel = socket.socket(fileno=call_fd)
    channel.sendall(b"r")
    if channel.recv(1) != b"a":
        os._exit(125)  # the host gave up (cancelled, or could not place it in its cgroup)
    channel.detach()
    _serve(call_fd, call_fd, wire, outcomes, seccomp_module)


def _zygote(
    calls_fd: int, admin_fd: int, tmp_bytes: int, network: bool, wire: Any, outcomes: Any,
    seccomp_module: Any,
) -> None:
    """Keep ``_SPARES`` call processes ready, one more each time one takes a call; import the
    modules the host names on the admin socket. Never returns."""
    import select
    import socket

    # Auto-reap the call processes and the orphans that come to PID 1: no zombie piles up.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    admin = socket.socket(fileno=admin_fd)
    notify_r, notify_w = os.pipe()
    flags = _call_flags(network)
    ids = (os.getuid(), os.getgid())  # the sandbox's, as the call's maps must name them
    clone = [True]  # until the kernel refuses it once: then fork + unshare for good
    # Per zygote, not per call: its mount table is bubblewrap's, fixed for its whole life.
    carried = {target: _mounts_below(target) for target in ("/tmp", "/dev/shm")}
    # What is alive now (modules, the warm-up's objects) is inherited by every call process:
    # frozen, the collector of a call never walks it, so it does not write (and copy) those
    # pages. The calls' own garbage is collected as usual.
    gc.collect()
    gc.freeze()

    def fork_spare() -> None:
        cloned = clone[0]
        try:
            pid = _clone_into(flags) if cloned else os.fork()
        except OSError:
            if not cloned:
                return
            clone[0] = cloned = False
            try:
                pid = os.fork()
            except OSError:
                return
        if pid == 0:
            admin.close()
            os.close(notify_r)
            _spare(
                calls_fd, notify_w, tmp_bytes, network, wire, outcomes, seccomp_module, ids,
                cloned, carried,
            )

    for _ in range(_SPARES):
        fork_spare()
    while True:
        try:
            ready, _, _ = select.select([admin.fileno(), notify_r], [], [])
        except InterruptedError:
            continue
        if notify_r in ready:
            for _ in os.read(notify_r, 64):
                fork_spare()
        if admin.fileno() in ready:
            try:
                message = admin.recv(4096)
            except OSError:
                message = b""
            if not message:
                os._exit(0)  # the host closed the admin socket: the pool is done with us
            if message[:1] == b"p":
                try:
                    importlib.import_module(message[1:].decode())
                except BaseException:  # a broken preload must not kill the zygote
                    pass
                gc.freeze()  # the new module's objects too (see above)


def zygote_main(args: list[str]) -> None:
    """``--zygote FD --admin FD --tmp-bytes N [--network] [--seccomp]``: see ``_zygote``.

    ``--seccomp``: install the seccomp filter (``_seccomp``) on the zygote itself, before any
    call process exists, instead of in each call's tool process after its request. What it
    refuses, the zygote and its call processes never need (they mount, clone and pass
    descriptors; they create only stream socket pairs and no set-id file)."""
    global _INHERITED_SECCOMP
    if not _prctl(_PR_SET_DUMPABLE, 0):
        os._exit(4)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    calls_fd = int(args[args.index("--zygote") + 1])
    admin_fd = int(args[args.index("--admin") + 1])
    tmp_bytes = int(args[args.index("--tmp-bytes") + 1])
    network = "--network" in args
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.close(devnull)
    wire = _load("_wire")
    outcomes = _load("_outcomes")
    seccomp_module = _load("_seccomp")
    preload = args[args.index("--preload") + 1].split(",") if "--preload" in args else []
    for name in preload:
        try:
            importlib.import_module(name)
        except BaseException:
            pass
    _warm_up(wire, outcomes, whole_call=True)
    if "--seccomp" in args and seccomp_module.install(network=network, new_userns=True) == "on":
        # Else each call installs it itself (and reports why not), as a single-use worker does.
        _INHERITED_SECCOMP = "on"
    _zygote(calls_fd, admin_fd, tmp_bytes, network, wire, outcomes, seccomp_module)


if __name__ == "__main__":
    main()
