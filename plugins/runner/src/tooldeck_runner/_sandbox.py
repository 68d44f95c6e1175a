"""Sandboxed calls: single-use worker processes under bubblewrap (or a plain process group).

Design of the warm pool. bubblewrap fixes a sandbox's mounts when it starts, and the workdir
mount (read-only or writable), the protected paths bound read-only inside it and the network
namespace differ per call. So workers are pooled by :class:`PoolKey` ``(workdir, writes_workdir,
network, protected rules)``: the first call with a new key pays a cold start and asks for
``warm_workers`` replacements; later calls with the same key take a pre-started worker whose
interpreter has already imported the contract, the wire format and the tool modules recently
used with that key (``--preload``), and is blocked reading its stdin. Each worker serves one
call then exits; a replacement is spawned while the call runs. At most ``max_warm_keys`` keys
keep idle workers (least recently used keys are dropped). A warm worker is only used when what
its mounts were made from still holds: the workdir is the same directory (``st_dev``,
``st_ino``; a deleted and recreated workdir is another one) and, for a writable workdir, the set
of protected paths in it is unchanged. Otherwise it is discarded and the call starts cold.

The call is bounded as a whole, not per process (see ``_cgroup``): each worker is born in its own
cgroup (memory and pids), created beneath the deck's own cgroup and removed after the call;
``/tmp`` is a tmpfs of ``tmp_size_mb``; a writing call's growth of the workdir's file system is
watched (``statvfs`` every 50 ms, plus ``RLIMIT_FSIZE`` per file) and the sandbox is killed past
``workdir_write_mb``. Where no cgroup can be created the worker falls back to ``RLIMIT_AS`` per
process, and ``metadata["limits"]`` says so. Everything that is not a mount (memory, CPU, file
size, output cap, seccomp rules) is applied when the call arrives: the cgroup's memory limit by
the host, the rest by the worker to itself before the tool's module is imported.

Threads. bubblewrap's ``--die-with-parent`` is ``PR_SET_PDEATHSIG``, which the kernel ties to the
*thread* that forked bubblewrap, not to the process. trio retires idle worker threads after a
few seconds, which used to kill sandboxes mid-call. Every sandbox is therefore started by one
dedicated thread that lives as long as the process (:class:`_Spawner`): a sandbox lives until it
finishes, times out or is cancelled, and still dies with the deck's process.

Identity (see ``_idmap``). A root deck starts bubblewrap in a user namespace of its own whose
only uid is ``runner.uid`` (65534), with the workdir and the read-only import paths bound from
id-mapped clones: on the host the tool is that unprivileged uid, while the deck's files look like
its own and what it writes lands as the deck's uid. The clones are staged in the spawner thread's
private mount namespace (the same thread, for that reason too): the pool's import paths once,
each worker's workdir at its spawn (detached when the worker is reaped). Where that cannot be
done, the previous mapping (uid 0 inside as the deck's uid) is used and ``limits`` says why.

After a writing call (the sandbox is dead by then, nothing races with these):

- protected paths the call created (:func:`tooldeck_hookspecs.find_protected` before and after;
  a Python environment counts whole, whatever its name) are removed and the result becomes
  ``PATH_NOT_ALLOWED``; a protected folder that was moved (same inode, new name) is moved back,
  and a folder of the user's that became protected is moved back or defused, never deleted
  (:func:`_undo_protected`);
- set-user-ID / set-group-ID bits on files changed during the call are cleared (a backstop of the
  seccomp filter) and reported in ``metadata["limits"]["setid_cleared"]``.
"""

from __future__ import annotations

import array
import errno
import functools
import json
import logging
import math
import os
import queue
import shutil
import signal
import socket
import stat
import struct
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from tooldeck_hookspecs import (
    DEFAULT_PROTECTED_PATHS,
    ErrorCode,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolResult,
    find_protected,
    host_which,
    normalise_rules,
    protected_message,
)
from tooldeck_hookspecs import cgroups as _cgroup
from tooldeck_hookspecs.protected import ENVIRONMENT_MARKERS

from . import _idmap
from ._config import RunnerSettings
from ._isolation import (
    ISOLATION_BWRAP,
    ISOLATION_PROCESS,
    ISOLATION_UNAVAILABLE,
    resolve_isolation,
    warn_isolation,
)
from ._outcomes import HOST_METADATA, consistent, host_owned, memory_result, signal_result
from ._wire import (
    HEADER,
    Limits,
    SandboxRequest,
    WireContext,
    dumps,
    encode_frame,
    parse_progress,
    structure_result,
)

__all__ = [
    "PoolKey",
    "SandboxPool",
    "SandboxStatistics",
    "ISOLATION_BWRAP",
    "ISOLATION_PROCESS",
    "ISOLATION_UNAVAILABLE",
    "resolve_isolation",
]

logger = logging.getLogger("tooldeck.runner")


#: The largest RLIMIT_CPU a call gets (68 years): a timeout beyond it is simply that long.
_MAX_CPU_S = 2**31 - 3


def cpu_seconds(timeout_s: float) -> int:
    """The CPU time (RLIMIT_CPU, in seconds) a call with this wall-clock timeout may use.

    The wall clock is the real limit; CPU seconds only stop a spinning process whose parent
    cannot be reached. RLIMIT_CPU counts every thread of a process, so a tool running two busy
    threads spends two CPU seconds per second: a limit equal to the timeout killed it at half
    of its time (with SIGKILL, reported as a crash). So the timeout is multiplied by the CPUs
    the process could ever run on, plus 2 s for importing. Clamped: a huge timeout (or inf,
    "no deadline") must not overflow the rlimit.
    """
    cpus = os.cpu_count() or 1
    return math.ceil(min(timeout_s * cpus, _MAX_CPU_S)) + 2


#: Metadata of a sandboxed result that only the host writes: what every result's host owns,
#: and ``output`` (what the process printed, as the host captured it). ``sandbox_seccomp`` is
#: the worker's own report and stays.
_SANDBOX_HOST_METADATA = HOST_METADATA | {"output"}


#: What the tool runs as, on the host, per isolation (documented in the README).
_UID_NONROOT = (
    "uid {uid} / gid {gid} on the host, no supplementary group (a user namespace of the deck's, "
    "uid_map '{uid} {uid} 1'); the workdir and import paths are id-mapped mounts: the deck's "
    "files appear as the tool's own and what it writes lands as uid {deck_uid}; no capability, "
    "no_new_privs, setuid/setgid bits refused"
)
_UID_BWRAP = (
    "uid {inside} inside a user namespace mapped to the deck's uid {deck_uid}; no capability on "
    "the host (all dropped), no_new_privs, setuid/setgid bits refused"
)
# A zygote of a deck running as root without an id-mapped uid (``uid = "deck"``): bubblewrap
# names the sandbox this uid instead of 0, because a call's user namespace may map uid 0 of its
# parent only with CAP_SETFCAP there (Linux >= 5.12), which the zygote does not have. Only the
# number seen inside changes: on the host it is the deck's uid all the same.
_ZYGOTE_ROOT_INSIDE_UID = 65534
# Where such a zygote keeps a proc of the deck's own, covered by an empty read-only tmpfs: see
# _SandboxPool._command.
_HIDDEN_PROC_DIR = "/.tooldeck-proc"
_UID_PROCESS = "the deck's own uid (degraded: no user namespace)"

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
_WRITE_POLL_S = 0.05
_SWEEP_MAX_ENTRIES = 50_000
#: Mount sets whose preload hint (the modules their tools import) is remembered: well above
#: ``max_warm_keys``, the sets that have workers or zygotes at all.
_PRELOAD_KEYS = 256
#: Answers bigger than this are decoded in a worker thread (a few ms of JSON on the loop at most).
_INLINE_FRAME_BYTES = 256 * 1024
#: Levels the protected-path walk descends: as deep as a path can be spelled (PATH_MAX is 4096,
#: two characters a level). The entry budget bounds the walk's cost, not this: at 64 levels a
#: call planted a .envrc 70 folders down that no scan saw (its result was withheld, the file
#: stayed). Deeper than PATH_MAX a folder cannot be listed by path, which makes the scan
#: incomplete (fail closed).
_PROTECTED_DEPTH = 2048
#: Rounds of fixing up and scanning again after a writing call (see ``_undo_protected``).
_FIXUP_ROUNDS = 8
#: Sessions whose zygote failed to start a call before the whole pool stops using zygotes.
_ZYGOTE_BROKEN_AFTER_SESSIONS = 3
_ZYGOTE_FAILED_SESSIONS_KEPT = 1024
_PROTECTED_ENTRIES = 50_000
# The zygote's own cgroup (it imports and forks; the calls run in cgroups of their own).
_ZYGOTE_MEMORY_MB = 512
_ZYGOTE_DESCRIPTION = (
    "forked in the session's zygote: own user, mount, PID, IPC, UTS (and, without network, "
    "network) namespaces, fresh /tmp and /dev/shm, own cgroup"
)
# struct ucred: pid, uid, gid.
_UCRED = struct.Struct("iII")


@attrs.frozen
class PoolKey:
    """What a sandbox's mounts depend on."""

    workdir: str
    writable: bool
    network: bool
    #: The protected path rules of the call (bound read-only in a writable workdir).
    protected: tuple[str, ...] = DEFAULT_PROTECTED_PATHS


@attrs.frozen(kw_only=True)
class SandboxStatistics:
    """Counters of the sandbox pool."""

    isolation: str
    warm_idle: int
    served_warm: int
    served_cold: int
    spawned: int
    #: Warm workers thrown away because their mounts no longer matched (workdir replaced,
    #: protected paths appeared or vanished).
    discarded_stale: int = 0
    #: ``"cgroup v1"``, ``"cgroup v2"`` or why per-call cgroups are not in use.
    cgroups: str = ""
    #: Live zygotes (``zygote = true``: one sandbox per session and mount set, forking per call).
    zygotes: int = 0
    #: Calls served by a fork inside a zygote.
    served_zygote: int = 0
    #: Why calls went to single-use workers although ``zygote = true`` (empty: they did not).
    zygote_fallback: str = ""


@attrs.frozen
class _Protected:
    """The protected paths under a workdir when a sandbox was made for it."""

    #: ``relative path -> (st_dev, st_ino, symlink target or None)``.
    entries: dict[str, tuple[int, int, str | None]]
    complete: bool
    #: ``relative path -> the rule that covers it``, as :func:`find_protected` told it (it
    #: knows whether the entry is a file: a ``HEAD`` file is protected, a folder is not).
    rules: dict[str, str] = attrs.field(factory=dict)
    #: Entries the walk counted (below the top folder).
    seen: int = 0
    #: Entries that are Python environments (protected whole, whatever their name).
    environments: frozenset[str] = frozenset()
    #: ``inode -> relative path`` of the folders no rule covers: after a call, a protected
    #: folder whose inode is here was the user's (renamed, or made an environment by the call)
    #: and is put back or defused, never deleted.
    folders: dict[int, str] = attrs.field(factory=dict)

    @classmethod
    def scan(
        cls, workdir: str, rules: Sequence[str], max_entries: int = 0
    ) -> _Protected:
        # Deeper than find_protected's default (4): a .pth or .git nested in a project's
        # sub-folders must be seen too. After a call, with room for what it may have made.
        found = find_protected(
            workdir, rules, max_depth=_PROTECTED_DEPTH,
            max_entries=max(max_entries, _PROTECTED_ENTRIES), record_folders=True,
        )
        entries: dict[str, tuple[int, int, str | None]] = {}
        matched: dict[str, str] = {}
        environments: set[str] = set()
        for match in found.matches:
            path = os.path.join(workdir, match.path)
            try:
                st = os.lstat(path)
                target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
            except OSError:
                continue
            entries[match.path] = (st.st_dev, st.st_ino, target)
            matched[match.path] = match.rule
            if match.environment:
                environments.add(match.path)
        return cls(
            entries, found.complete, matched, found.seen, frozenset(environments), found.folders
        )

    def same_paths(self, other: _Protected) -> bool:
        return set(self.entries) == set(other.entries)


@attrs.define(eq=False)
class _Worker:
    process: trio.Process
    key: PoolKey
    warm: bool = False
    cgroup: _cgroup.Cgroup | None = None
    #: (st_dev, st_ino) of the workdir the sandbox has mounted.
    identity: tuple[int, int] = (0, 0)
    protected: _Protected | None = None
    #: Read from the cgroup just before it is removed: (OOM kill seen, pids.max hit).
    events: tuple[bool, bool] = (False, False)
    #: The id-mapped clone of the workdir this sandbox was made from (spawner's namespace).
    staged: str | None = None
    #: ``metadata["limits"]`` entries saying what the tool runs as on the host.
    identity_limits: dict[str, Any] = attrs.field(factory=dict)


@attrs.define(eq=False)
class _Zygote:
    """A long-lived sandbox of one session and mount set that forks one process per call."""

    worker: _Worker
    #: The host's end of the SOCK_SEQPACKET calls socket (see ``_worker._zygote``).
    control: trio.socket.SocketType
    #: The host's end of the admin socket (module imports; closing it ends the zygote).
    admin: trio.socket.SocketType
    #: Tool modules it has imported (forked calls find them loaded).
    modules: set[str] = attrs.field(factory=set)
    in_flight: int = 0
    retired: bool = False


@attrs.define(eq=False)
class _Ids:
    """The pool's decision, made once, about the sandboxes' host uid (see ``_idmap``)."""

    mapper: _idmap.IdMapper | None
    #: Why not, when ``mapper`` is None.
    reason: str = ""
    #: Read-only host paths -> their staged (id-mapped) clones.
    staged_ro: dict[str, str] = attrs.field(factory=dict)
    #: Read-only paths whose file system refused an id map (staged as plain clones).
    not_mapped: list[str] = attrs.field(factory=list)


@attrs.define(eq=False)
class _Exchange:
    """What came back from one worker."""

    frame: bytes | None = None
    output: bytearray = attrs.field(factory=bytearray)
    truncated: bool = False
    #: Bytes the workdir's file system grew by, when that went over the budget.
    wrote_too_much: int = 0
    #: Files and folders (inodes) the workdir's file system gained, when over the budget.
    made_too_many: int = 0
    #: Why what came back on the response channel is no answer (garbage the tool wrote there).
    malformed: str = ""


class _Spawner:
    """One long-lived thread that starts every sandbox (see the module docstring: threads)."""

    _lock = threading.Lock()
    _jobs: queue.SimpleQueue[tuple[Callable[[], Any], Callable[[Any, BaseException | None], None]]]
    _thread: threading.Thread | None = None

    @classmethod
    def submit(
        cls, fn: Callable[[], Any], done: Callable[[Any, BaseException | None], None]
    ) -> None:
        with cls._lock:
            if cls._thread is None:
                cls._jobs = queue.SimpleQueue()
                # Never stopped: a sandbox's PR_SET_PDEATHSIG fires when this thread exits, so it
                # must live exactly as long as the process. Daemon: it never holds up exit.
                cls._thread = threading.Thread(
                    target=cls._serve, name="tooldeck-sandbox-spawner", daemon=True
                )
                cls._thread.start()
        cls._jobs.put((fn, done))

    @classmethod
    def _serve(cls) -> None:
        while True:
            fn, done = cls._jobs.get()
            try:
                value = fn()
            except BaseException as exc:  # handed to the caller, never lost
                done(None, exc)
            else:
                done(value, None)


async def _on_spawner(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on the spawner thread (its mount namespace: see ``_idmap``) and wait."""
    token = trio.lowlevel.current_trio_token()
    finished = trio.Event()
    box: list[Any] = []

    def done(value: Any, error: BaseException | None) -> None:
        box.append((value, error))
        token.run_sync_soon(finished.set)

    _Spawner.submit(fn, done)
    # Shielded: a process started (or a tree staged) while we were cancelled must still be
    # handed back (and then killed or unstaged by the caller), never leaked.
    with trio.CancelScope(shield=True):
        await finished.wait()
    value, error = box[0]
    if error is not None:
        raise error
    return value


def _on_spawner_later(fn: Callable[[], Any]) -> None:
    """Run ``fn`` on the spawner thread without waiting (errors are logged)."""

    def done(_value: Any, error: BaseException | None) -> None:
        if error is not None:
            logger.warning("tooldeck-runner: background sandbox clean-up failed: %s", error)

    _Spawner.submit(fn, done)


async def _open_process(
    command: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    pass_fds: Sequence[int] = (),
) -> trio.Process:
    """Like :func:`trio.lowlevel.open_process` with three pipes, forked by the spawner thread."""
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    ours = [stdin_w, stdout_r, stderr_r]
    # No extra_groups=[] here (the sandbox must not carry root's group 0): it would turn the
    # vfork() of the deck into a full fork(); the spawner thread dropped its groups instead.
    extra: dict[str, Any] = {"pass_fds": tuple(pass_fds)}
    try:
        popen = await _on_spawner(
            functools.partial(
                subprocess.Popen,
                command,
                stdin=stdin_r,
                stdout=stdout_w,
                stderr=stderr_w,
                env=env,
                cwd=cwd,
                # Own session and process group: the degraded mode kills the group; both modes
                # keep the tool away from the host's terminal.
                start_new_session=True,
                **extra,
            )
        )
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:
        for fd in (stdin_r, stdout_w, stderr_w):
            os.close(fd)
    # trio.Process has no public constructor; _create is what open_process itself calls with
    # these three FdStreams (trio 0.22 - 0.30+).
    return trio.Process._create(  # type: ignore[attr-defined,no-any-return]
        popen,
        trio.lowlevel.FdStream(stdin_w),
        trio.lowlevel.FdStream(stdout_r),
        trio.lowlevel.FdStream(stderr_r),
    )


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


def _unavailable_result(tool: ToolDefinition) -> ToolResult:
    return ToolResult.fail(
        ErrorCode.PERMISSION_DENIED,
        f"the tool {tool.name!r} must run in a sandbox, and bubblewrap (bwrap), the sandbox's "
        "isolation (file system, network and PID namespaces), is not installed on this machine",
        suggestion=(
            "This tool cannot run here; tell the user. (Administrators: install bubblewrap, "
            "e.g. `apt-get install bubblewrap`, or opt into degraded isolation with "
            "[tool.tooldeck.runner] sandbox = \"process\" or allow_degraded = true.)"
        ),
        details={"isolation": ISOLATION_UNAVAILABLE, "missing": "bubblewrap"},
    )


def _usage(path: str) -> tuple[int, int] | None:
    """(bytes, inodes) in use on the file system holding ``path``."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree


@attrs.define(eq=False)
class SandboxPool:
    """Starts, pools and reaps sandbox workers; runs one call per worker."""

    settings: RunnerSettings
    isolation: str = ""
    _idle: OrderedDict[PoolKey, list[_Worker]] = attrs.field(factory=OrderedDict)
    # Modules to import in the next worker of a mount set: a hint, least recently used first
    # out past _PRELOAD_KEYS sets (one per workdir a session ever had, otherwise).
    _preload: OrderedDict[PoolKey, list[str]] = attrs.field(factory=OrderedDict)
    # Workers being started per mount set; a set starting none has no entry.
    _spawning: dict[PoolKey, int] = attrs.field(factory=dict)
    _served_warm: int = 0
    _served_cold: int = 0
    _spawned: int = 0
    _discarded_stale: int = 0
    _closed: bool = False
    _paths: tuple[str, ...] | None = None
    _cgroups: _cgroup.CgroupSupport | None = None
    # Cgroups whose processes were still leaving when the call ended: removed later.
    _leftover_cgroups: list[_cgroup.Cgroup] = attrs.field(factory=list)
    _reaping: bool = False
    _leftover_lock: threading.Lock = attrs.field(factory=threading.Lock)
    # Every worker not yet reaped, and the background refills in progress: aclose() waits for
    # the refills and kills all of these, so no worker outlives the pool.
    _live: set[_Worker] = attrs.field(factory=set)
    _refills: int = 0
    _refills_done: trio.Event | None = None
    # The sandboxes' host uid: decided at the first bubblewrap spawn (see ``_idmap``).
    _ids: _Ids | None = None
    _ids_lock: trio.Lock = attrs.field(factory=trio.Lock)
    # zygote = true: (session id, mount set) -> its zygote; never shared across either.
    _zygotes: OrderedDict[tuple[str, PoolKey], _Zygote] = attrs.field(factory=OrderedDict)
    _zygote_locks: dict[tuple[str, PoolKey], trio.Lock] = attrs.field(factory=dict)
    _served_zygote: int = 0
    # Set when forking inside a zygote proved impossible here (no nested user namespaces, say):
    # from then on, single-use workers.
    _zygote_broken: str = ""
    # Sessions whose zygote could not start a call process, and why. A call can bring that
    # about in its own session (what it does to its workdir's mounts), so that session alone
    # goes to single-use workers; the whole pool only once sessions of their own keep failing.
    _zygote_failed_sessions: dict[str, str] = attrs.field(factory=dict)
    # (session, mount set) released while a call held its zygote lock (starting the zygote):
    # that call retires what it started. Only ever holds keys whose lock is held.
    _released_while_busy: set[tuple[str, PoolKey]] = attrs.field(factory=set)

    def __attrs_post_init__(self) -> None:
        if not self.isolation:  # else decided at the deck's start-up (the executor's)
            self.isolation = resolve_isolation(
                self.settings.sandbox, self.settings.allow_degraded
            )
        warn_isolation(self.isolation)
        if self.settings.cgroups:
            self._cgroups = _cgroup.detect()
            if self._cgroups.available:
                _cgroup.remove_stale(self._cgroups)
            else:
                logger.warning(
                    "tooldeck-runner: no per-call cgroup (%s); sandboxed calls fall back to "
                    "per-process rlimits (RLIMIT_AS) and no process-count limit",
                    self._cgroups.reason,
                )
        else:
            self._cgroups = _cgroup.CgroupSupport("", reason="disabled by runner.cgroups = false")

    @property
    def cgroups(self) -> str:
        """``"cgroup v1"`` / ``"cgroup v2"``, or why calls fall back to rlimits."""
        support = self._cgroups
        if support is not None and support.available:
            return f"cgroup {support.version}"
        return f"unavailable: {support.reason if support else 'not detected'}"

    # -- public -------------------------------------------------------------------------------

    async def run(self, tool: ToolDefinition, call: ToolCall, context: ToolContext) -> ToolResult:
        """Run one call in a worker. Cancellation kills the worker's whole process tree."""
        if self.isolation == ISOLATION_UNAVAILABLE:
            return _unavailable_result(tool).with_metadata(isolation=self.isolation)
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
        try:
            # Extend-only: whatever the context says, the defaults stay protected.
            rules = normalise_rules(context.protected_paths)
        except ValueError:
            rules = DEFAULT_PROTECTED_PATHS
        key = PoolKey(workdir, tool.security.writes_workdir, tool.security.network, rules)
        self._remember_module(key, entrypoint.partition(":")[0])
        # A workdir that is (or contains) the call's fresh /tmp would be covered by it.
        if (
            self._zygote_usable()
            and context.session_id not in self._zygote_failed_sessions
            and workdir not in ("/", "/tmp", "/dev", "/dev/shm")
        ):
            served = await self._run_in_zygote(key, tool, call, context, entrypoint, rules)
            if served is not None:
                return served
        worker = await self._take_warm(key)
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
        applied = self._apply_call_limits(worker, tool)
        limits, request = self._request(key, tool, call, context, entrypoint, rules, applied)
        started = time.time()
        try:
            result = await self._exchange(
                worker, encode_frame(dumps(request)), limits, progress=context.emit
            )
        except BaseException:
            # Timed out or cancelled: the sandbox is dead, but what it wrote is not. Protected
            # paths it created and setuid bits it set are cleaned up all the same.
            if key.writable:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(
                        self._check_workdir, worker, None, applied, started
                    )
            raise
        return await self._finish(worker, result, applied, started)

    def _request(
        self,
        key: PoolKey,
        tool: ToolDefinition,
        call: ToolCall,
        context: ToolContext,
        entrypoint: str,
        rules: tuple[str, ...],
        applied: dict[str, Any],
    ) -> tuple[Limits, SandboxRequest]:
        workdir = key.workdir
        limits = Limits(
            memory_mb=tool.execution.memory_mb,
            cpu_s=cpu_seconds(tool.execution.timeout_s),
            fsize_bytes=self.settings.file_size_mb * 1024 * 1024,
            nofile=self.settings.max_open_files,
            max_output_bytes=tool.execution.max_output_bytes,
            memory_rlimit=applied["memory"] != "cgroup",
            seccomp=self.settings.seccomp,
            network=key.network,
            timeout_s=(
                float(tool.execution.timeout_s)
                if math.isfinite(tool.execution.timeout_s)
                else None
            ),
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
                protected_paths=rules,
                deadline=context.deadline,
                seconds_left=context.seconds_left(),
            ),
            entrypoint=entrypoint,
            call_style=tool.call_style,
            context_param=tool.context_param,
            limits=limits,
        )
        return limits, request

    async def _finish(
        self, worker: _Worker, result: ToolResult, applied: dict[str, Any], started: float
    ) -> ToolResult:
        if worker.key.writable:
            # Walks of the workdir: off the event loop, and never interrupted half-way.
            with trio.CancelScope(shield=True):
                result = await trio.to_thread.run_sync(
                    self._after_call, worker, result, applied, started
                )
        else:
            result = self._after_call(worker, result, applied, started)
        return result.with_metadata(isolation=self.isolation, warm=worker.warm, limits=applied)

    def statistics(self) -> SandboxStatistics:
        """A snapshot of the pool's counters."""
        return SandboxStatistics(
            isolation=self.isolation,
            warm_idle=sum(len(ws) for ws in self._idle.values()),
            served_warm=self._served_warm,
            served_cold=self._served_cold,
            spawned=self._spawned,
            discarded_stale=self._discarded_stale,
            cgroups=self.cgroups,
            zygotes=len(self._zygotes),
            served_zygote=self._served_zygote,
            zygote_fallback=self._zygote_broken if self.settings.zygote else "",
        )

    async def prewarm(self, workdir: str, *, writable: bool = False, network: bool = False) -> None:
        """Start the warm workers for a mount set now rather than at its first call."""
        await self._refill(PoolKey(str(Path(workdir).resolve()), writable, network))

    async def aclose(self) -> None:
        """Kill every worker, idle or starting, and remove their cgroups."""
        self._closed = True
        self._idle.clear()
        zygotes = list(self._zygotes.values())
        self._zygotes.clear()
        for zygote in zygotes:
            zygote.retired = True
            zygote.control.close()
            zygote.admin.close()
        with trio.CancelScope(shield=True):
            if self._refills:
                self._refills_done = trio.Event()
                with trio.move_on_after(10):
                    await self._refills_done.wait()
            for worker in list(self._live):
                await self._kill(worker)
            ids = self._ids
            if ids is not None and ids.mapper is not None:
                for staged in ids.staged_ro.values():
                    _on_spawner_later(functools.partial(_idmap.unstage, staged))
                # A spawn after this (a pool used again) stages its read-only paths anew.
                self._ids = None
            for _ in range(500):
                if self._sweep_leftover_cgroups():
                    break
                await trio.sleep(0.01)

    # -- zygotes ------------------------------------------------------------------------------

    def _zygote_usable(self) -> bool:
        support = self._cgroups
        return bool(
            self.settings.zygote
            and self.settings.warm_workers
            and not self._zygote_broken
            and not self._closed
            and self.isolation == ISOLATION_BWRAP
            # The call's limits are its own cgroup's: without cgroups, single-use workers.
            and support is not None
            and support.available
        )

    async def _zygote_for(self, session: str, key: PoolKey) -> tuple[_Zygote, bool] | None:
        """The session's zygote for this mount set (started if needed), and whether it was
        already running; None if none could be started."""
        zkey = (session, key)
        lock = self._zygote_locks.setdefault(zkey, trio.Lock())
        released = False
        try:
            async with lock:
                try:
                    return await self._zygote_for_locked(zkey)
                finally:
                    released = zkey in self._released_while_busy
                    self._released_while_busy.discard(zkey)
        finally:
            # release_session() left the lock to us: dropped with the session's last user.
            if (
                released
                and self._zygote_locks.get(zkey) is lock
                and not lock.locked()
                and not lock.statistics().tasks_waiting
            ):
                del self._zygote_locks[zkey]

    async def _zygote_for_locked(self, zkey: tuple[str, PoolKey]) -> tuple[_Zygote, bool] | None:
        """``_zygote_for`` under the lock of ``zkey``."""
        key = zkey[1]
        zygote = self._zygotes.get(zkey)
        if zygote is not None:
            worker = zygote.worker
            alive = worker.process.returncode is None and worker.process.poll() is None
            if alive and worker.protected is not None:  # a walk of the workdir: off the loop
                valid = await trio.to_thread.run_sync(self._still_valid, worker)
            else:
                valid = alive and self._still_valid(worker)
            # The walk above let other calls run, and one of them may have retired this
            # zygote meanwhile (pushed out by another session's new zygote, or its session
            # released): it is no longer in the table, and killed once idle. It used to be
            # handed out all the same (a KeyError here, the call failing as PLUGIN_ERROR).
            if valid and not zygote.retired:
                self._zygotes.move_to_end(zkey)
                return zygote, True
            if alive and not zygote.retired:
                self._discarded_stale += 1
            await self._retire(zkey, zygote)
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        admin, admin_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            worker = await self._spawn(
                key,
                preload=tuple(self._preload.get(key, ())),
                zygote_fds=(child.fileno(), admin_child.fileno()),
            )
        except OSError as exc:
            parent.close()
            admin.close()
            logger.warning("tooldeck-runner: could not start a zygote: %s", exc)
            return None
        finally:
            child.close()
            admin_child.close()
        if worker.cgroup is not None:
            # The zygote's own group (calls are moved out to theirs): it only imports and
            # forks, so a fixed bound suffices.
            try:
                worker.cgroup.set_memory(_ZYGOTE_MEMORY_MB * 1024 * 1024)
            except OSError:
                pass
        zygote = _Zygote(
            worker,
            trio.socket.from_stdlib_socket(parent),
            trio.socket.from_stdlib_socket(admin),
            modules=set(self._preload.get(key, ())),
        )
        self._zygotes[zkey] = zygote
        while len(self._zygotes) > max(1, self.settings.max_warm_keys):
            oldest = next(iter(self._zygotes))
            if oldest == zkey:
                break
            await self._retire(oldest, self._zygotes[oldest])
            old_lock = self._zygote_locks.get(oldest)
            if old_lock is not None and not old_lock.locked():
                del self._zygote_locks[oldest]
        if zkey in self._released_while_busy and not zygote.retired:
            # The session ended while its zygote was starting: release_session() could not
            # see it yet, and it stayed (processes, mounts of the workdir) until newer
            # sessions pushed it out, for good on a deck gone quiet.
            with trio.CancelScope(shield=True):
                await self._retire(zkey, zygote)
        if zygote.retired:
            # Pushed out by another session while the oldest was being killed above (or
            # released just now), and killed already (no call in it yet): this call goes
            # to a single-use worker.
            return None
        return zygote, False

    async def _retire(self, zkey: tuple[str, PoolKey], zygote: _Zygote) -> None:
        """No new calls for this zygote; killed now, or when its last call ends."""
        if self._zygotes.get(zkey) is zygote:
            del self._zygotes[zkey]
        zygote.retired = True
        if zygote.in_flight == 0:
            zygote.control.close()
            zygote.admin.close()
            await self._kill(zygote.worker)

    def holds_session(self, session_id: str) -> bool:
        """Whether anything is kept for ``session_id`` (a zygote, or its lock)."""
        return any(zkey[0] == session_id for zkey in (*self._zygotes, *self._zygote_locks))

    async def release_session(self, session_id: str) -> int:
        """The session ended: retire its zygotes now (each is killed once its calls are done)
        rather than when newer sessions' zygotes push them out; returns how many.

        Every session gets zygotes of its own: a closed session's stayed alive (processes, the
        memory of their imports, mounts of a workdir perhaps already deleted) until
        ``max_warm_keys`` newer ones took their places, for good on a deck gone quiet.
        """
        mine = [(zkey, zygote) for zkey, zygote in self._zygotes.items() if zkey[0] == session_id]
        for zkey, zygote in mine:
            await self._retire(zkey, zygote)
        for zkey in [zkey for zkey in self._zygote_locks if zkey[0] == session_id]:
            if not self._zygote_locks[zkey].locked():
                del self._zygote_locks[zkey]
            else:  # a call is starting (or checking) this session's zygote: it retires it
                self._released_while_busy.add(zkey)
        return len(mine)

    async def _run_in_zygote(
        self,
        key: PoolKey,
        tool: ToolDefinition,
        call: ToolCall,
        context: ToolContext,
        entrypoint: str,
        rules: tuple[str, ...],
    ) -> ToolResult | None:
        """One call forked inside the session's zygote; None: use a single-use worker."""
        found = await self._zygote_for(context.session_id, key)
        if found is None:
            return None
        zygote, warm = found
        support = self._cgroups
        assert support is not None
        try:
            group = support.create(pids_max=self.settings.max_processes)
        except OSError as exc:
            logger.warning("tooldeck-runner: cannot create a cgroup for a call: %s", exc)
            return None
        worker = _Worker(
            process=zygote.worker.process,
            key=key,
            warm=warm,
            cgroup=group,
            identity=zygote.worker.identity,
            protected=zygote.worker.protected,
            identity_limits=zygote.worker.identity_limits,
        )
        zygote.in_flight += 1
        try:
            return await self._call_in_zygote(
                zygote, worker, tool, call, context, entrypoint, rules
            )
        finally:
            zygote.in_flight -= 1
            with trio.CancelScope(shield=True):
                # Whatever happened, the call's processes end here (the group is killed and
                # removed in the background), and a retired zygote goes with its last call.
                # Its events were read before the answer was made (they are not needed after a
                # failure): not read again.
                self._release_cgroup(worker, read_events=False)
                if zygote.retired and zygote.in_flight == 0:
                    zygote.control.close()
                    zygote.admin.close()
                    await self._kill(zygote.worker)

    async def _call_in_zygote(
        self,
        zygote: _Zygote,
        worker: _Worker,
        tool: ToolDefinition,
        call: ToolCall,
        context: ToolContext,
        entrypoint: str,
        rules: tuple[str, ...],
    ) -> ToolResult | None:
        key = worker.key
        group = worker.cgroup
        assert group is not None
        module = entrypoint.partition(":")[0]
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe()
        try:
            # The kernel stamps the call process's pid (translated to ours) on what it sends.
            mine.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            if module not in zygote.modules:
                zygote.modules.add(module)
                await zygote.admin.send(b"p" + module.encode())
            fds = array.array("i", [theirs.fileno(), out_w])
            await zygote.control.sendmsg([b"c"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        except OSError as exc:
            mine.close()
            os.close(out_r)
            await self._retire((context.session_id, key), zygote)
            logger.warning("tooldeck-runner: the zygote is gone (%s); single-use worker", exc)
            return None
        except BaseException:
            # Cancelled at one of the sends (a deadline that passed while the workdir was
            # checked, say): our ends are nobody's yet. The pipe's read end is a bare fd that
            # nothing would ever close: one descriptor leaked per such call.
            mine.close()
            os.close(out_r)
            raise
        finally:
            theirs.close()
            os.close(out_w)
        channel = trio.socket.from_stdlib_socket(mine)
        output = trio.lowlevel.FdStream(out_r)
        try:
            ready, ancillary, _, _ = await channel.recvmsg(1, socket.CMSG_SPACE(_UCRED.size))
            pid = _ucred_pid(ancillary)
            if ready != b"r" or pid is None:
                why = _drain_now(out_r, 4000).decode("utf-8", "replace").strip()
                alive = zygote.worker.process.poll() is None
                await self._retire((context.session_id, key), zygote)
                if alive:
                    # The zygote lives but cannot isolate a call (no nested user namespaces,
                    # say): single-use workers for this session from now on, and for every
                    # session once several have failed (the machine, not one session's call).
                    why = why or "the call process could not start"
                    failed = self._zygote_failed_sessions
                    failed[context.session_id] = why
                    while len(failed) > _ZYGOTE_FAILED_SESSIONS_KEPT:
                        del failed[next(iter(failed))]
                    if len(failed) >= _ZYGOTE_BROKEN_AFTER_SESSIONS:
                        self._zygote_broken = why
                    logger.warning(
                        "tooldeck-runner: cannot fork calls in a zygote (%s); single-use "
                        "workers instead for %s", why,
                        "every session" if self._zygote_broken else "this session",
                    )
                return None
            # Off the event loop: on cgroup v1 a move waits for an RCU grace period (ms).
            try:
                await trio.to_thread.run_sync(_join_cgroup, group, pid)
                await channel.send(b"a")
            except OSError as exc:
                # The call's process is gone before the tool started: nothing ran yet, so the
                # call may still go to a single-use worker.
                logger.warning("tooldeck-runner: a forked call could not start: %s", exc)
                return None
            applied = self._apply_call_limits(worker, tool)
            applied["sandbox"] = _ZYGOTE_DESCRIPTION
            limits, request = self._request(key, tool, call, context, entrypoint, rules, applied)
            started = time.time()
            try:
                result = await self._exchange_forked(
                    worker, channel, output, encode_frame(dumps(request)), limits, context.emit
                )
            except BaseException:
                group.kill()
                if key.writable:
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(
                            self._check_workdir, worker, None, applied, started
                        )
                raise
            self._served_zygote += 1
            if worker.warm:
                self._served_warm += 1
            else:
                self._served_cold += 1
            # The cgroup's events (OOM kill, pids.max) are what _after_call reports.
            worker.events = (group.oom_killed(), group.pids_exhausted())
            return await self._finish(worker, result, applied, started)
        finally:
            channel.close()
            with trio.CancelScope(shield=True):
                await output.aclose()

    async def _exchange_forked(
        self,
        worker: _Worker,
        channel: trio.socket.SocketType,
        output: trio.lowlevel.FdStream,
        request: bytes,
        limits: Limits,
        progress: Callable[[Mapping[str, Any]], None] | None,
    ) -> ToolResult:
        """``_exchange`` for a call forked in a zygote: same frames, the call's cgroup is what
        gets killed."""
        group = worker.cgroup
        assert group is not None
        got = _Exchange()
        cap = limits.max_output_bytes
        frame_cap = max(cap, 65536) + HEADER.size
        returncode: int | None = None

        async def kill() -> None:
            group.kill()

        baseline = _usage(worker.key.workdir) if worker.key.writable else None
        try:
            view = memoryview(request)
            while view:
                view = view[await channel.send(view) :]
        except OSError:
            pass  # the call process died; its status frame or end of file tells why
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_read_output, output, cap, got, kill)
            if worker.key.writable and baseline is not None:
                nursery.start_soon(self._watch_writes, worker, baseline, got, kill)
            buffer = bytearray()
            done = False
            while not done:
                chunk = await channel.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                while (payload := _next_frame(buffer)) is not None:
                    if payload.startswith(b"!exit "):
                        # The call process's last word: its tool's exit status, no answer. The
                        # tool holds the same channel: what it wrote there is not trusted.
                        returncode = _exit_status(payload)
                        if returncode is None:
                            got.malformed = f"a bad exit status frame {payload[:40]!r}"
                        done = True
                        break
                    if not _progress_frame(payload, progress):
                        got.frame = payload
                        done = True
                        break
                if not done and len(buffer) > frame_cap:
                    got.truncated = True
                    break
            if not done and buffer and not got.truncated:
                got.malformed = _incomplete(buffer)
            # Answered (or gone): the call's processes end now, daemons included.
            group.kill()
            nursery.cancel_scope.cancel()
        if not got.truncated:
            room = cap - len(got.output)
            rest = _drain_now(output.fileno(), room + 1)
            got.output += rest[:room]
            got.truncated = len(rest) > room
        if baseline is not None and not (got.wrote_too_much or got.made_too_many):
            self._over_budget(worker, baseline, got)
        return await self._interpret(got, returncode, limits)

    # -- limits -------------------------------------------------------------------------------

    def _apply_call_limits(self, worker: _Worker, tool: ToolDefinition) -> dict[str, Any]:
        """Set the cgroup's memory for this call; describe every limit as really applied."""
        memory_mb = tool.execution.memory_mb
        group = worker.cgroup
        applied: dict[str, Any] = {
            "memory_mb": memory_mb,
            "cpu_s": cpu_seconds(tool.execution.timeout_s),
            "cpu": "RLIMIT_CPU per process, over all its threads: the timeout times the CPUs "
            "(a backstop; the wall-clock timeout is the limit)",
        }
        if group is not None:
            try:
                group.set_memory(memory_mb * 1024 * 1024)
            except OSError as exc:
                logger.warning("tooldeck-runner: cannot set the cgroup's memory limit: %s", exc)
                group = None
        support = self._cgroups
        if group is not None:
            applied["memory"] = "cgroup"
            applied["memory_scope"] = f"whole call (cgroup {group.version})"
            applied["max_processes"] = group.pids_max
            applied["processes"] = f"cgroup {group.version} pids.max"
        else:
            applied["memory"] = "rlimit"
            applied["memory_scope"] = "per process (RLIMIT_AS): " + (
                support.reason if support is not None else "no cgroup"
            )
            # RLIMIT_NPROC counts per user and root ignores it: not a real bound, not claimed.
            applied["max_processes"] = None
            applied["processes"] = "unlimited (no pids cgroup)" + (
                "; the PID namespace ends them all with the call"
                if self.isolation == ISOLATION_BWRAP
                else ""
            )
        applied["tmp_mb"] = self.settings.tmp_size_mb if self.isolation == ISOLATION_BWRAP else None
        if applied["tmp_mb"] is None:
            applied["tmp"] = "the host's /tmp (degraded isolation: no private /tmp)"
        applied["file_size_mb"] = self.settings.file_size_mb
        if worker.key.writable:
            applied["workdir_write_mb"] = self.settings.workdir_write_mb
            applied["workdir_max_new_entries"] = self.settings.workdir_max_new_entries
            applied["workdir_write"] = (
                "growth of the workdir's file system (statvfs every 50 ms; other writers on the "
                "same file system count too) + RLIMIT_FSIZE per file"
            )
        else:
            applied["workdir_write_mb"] = 0
            applied["workdir_write"] = "read-only mount" if (
                self.isolation == ISOLATION_BWRAP
            ) else "not enforced (degraded isolation)"
        applied["seccomp"] = "requested" if self.settings.seccomp else "off"
        applied.update(worker.identity_limits)
        return applied

    def _after_call(
        self, worker: _Worker, result: ToolResult, applied: dict[str, Any], started: float
    ) -> ToolResult:
        metadata = dict(result.metadata)
        if "sandbox_seccomp" in metadata:
            applied["seccomp"] = metadata.pop("sandbox_seccomp")
            result = attrs.evolve(result, metadata=metadata)
        oom, pids_hit = worker.events
        pids_max = applied.get("max_processes")
        if oom:
            # The kernel killed a process of the call at its memory limit: whatever the tool
            # made of that (a crash, an exit code 137 in a shell result) is reported as what
            # it is, with the tool's own answer kept in the details.
            memory = memory_result(applied["memory_mb"], "the kernel's OOM killer")
            assert memory.error is not None
            details = dict(memory.error.details)
            details["result"] = result.data if result.success else None
            result = attrs.evolve(memory, error=attrs.evolve(memory.error, details=details))
            applied["memory_limit_hit"] = True
        elif pids_hit and pids_max is not None:
            applied["max_processes_hit"] = True
            result = ToolResult.fail(
                ErrorCode.EXECUTION_ERROR,
                # pids.max counts threads too: a program starting 300 threads in one process
                # was told of "processes" and had no reason to look at its thread pool.
                f"the call hit its limit of {pids_max} processes and threads (all of the "
                "call's together): starting more failed (fork or thread creation: resource "
                "temporarily unavailable)",
                suggestion=(
                    "Start fewer processes or threads at once (lower the parallelism, e.g. -j2 "
                    "or a smaller thread pool), and do not leave background processes running."
                ),
                details={
                    "limit": "max_processes",
                    "max_processes": pids_max,
                    "result": result.data if result.success else None,
                },
            )
        if worker.key.writable:
            checked = self._check_workdir(worker, result, applied, started)
            assert checked is not None
            result = checked
        return result

    def _check_workdir(
        self, worker: _Worker, result: ToolResult | None, applied: dict[str, Any], started: float
    ) -> ToolResult | None:
        """Clean up what a writing call left (see the module docstring); None in, None out."""
        key = worker.key
        cleared = _clear_setid_bits(key.workdir, started)
        if cleared:
            applied["setid_cleared"] = cleared
            logger.warning(
                "tooldeck-runner: cleared setuid/setgid bits a sandboxed call left: %s", cleared
            )
        if worker.protected is None:
            return result
        before = worker.protected
        # Room for every entry the call may have made (its budget of new files and folders,
        # which the write watch enforces): a call that made 50,001 files used to leave the
        # walk incomplete and what it planted after them unseen.
        budget = before.seen + self.settings.workdir_max_new_entries + 1024
        after, created, environments, defused = _undo_protected(
            key.workdir, key.protected, before, budget
        )
        for rel, (_, _, target) in before.entries.items():
            if target is None:
                continue
            # A protected symlink (not bound: a bind would follow it): restored if changed.
            now = after.entries.get(rel)
            if now is not None and now[2] == target:
                continue
            _remove_beneath(key.workdir, rel)
            _symlink_beneath(key.workdir, rel, target)
            created.setdefault(rel, before.rules.get(rel, "protected"))
        if not after.complete:
            applied["protected_scan"] = "incomplete (deep or very large workdir)"
            if before.complete and result is not None:
                # The workdir was checked whole before the call and cannot be now: the call
                # (or another one writing there at the same time) made more than can be
                # checked. What it planted may be anywhere: fail closed.
                logger.warning(
                    "tooldeck-runner: a call left the workdir %s too large to check for "
                    "protected paths; its result is withheld", key.workdir,
                )
                return ToolResult.fail(
                    ErrorCode.PATH_NOT_ALLOWED,
                    "the call left more files and folders in the working directory than can "
                    "be checked for protected paths (tooldeck configuration, .git, start-up "
                    "files); its result is withheld. Remove what it made before going on",
                    suggestion="Tell the user: the working directory needs cleaning up; "
                    "create fewer files.",
                    details={"protected_scan": "incomplete", "entries_seen": after.seen},
                )
        if not created:
            return result
        if result is None:
            logger.warning(
                "tooldeck-runner: an interrupted call created protected paths; removed: %s",
                list(created),
            )
            return None
        rel, rule = next(iter(created.items()))
        applied["protected_removed"] = list(created)
        if defused:
            applied["environments_defused"] = sorted(defused)
        more = f" (and {len(created) - 1} more)" if len(created) > 1 else ""
        suggestion = (
            "Do not create or change protected files (tooldeck configuration, .git, shell "
            "start-up files, ...); write your files elsewhere in the working directory."
        )
        if rel in defused:
            message = (
                f"the call made {rel!r} a Python environment (rule {rule!r}): an environment's "
                "scripts and start-up files run on the host, so no tool makes one in the "
                f"working directory{more}; its {rule} was removed, the folder's other files "
                "were kept"
            )
        elif rel in environments:
            message = (
                f"{rel!r} is a Python environment (rule {rule!r}: a folder holding {rule} is "
                "one, whatever its name): its scripts and start-up files run on the host, so "
                f"no tool creates or changes one in the working directory{more}; what the call "
                "created there was removed"
            )
        else:
            message = (
                protected_message(rel, rule) + more + "; what the call created there was removed"
            )
        if rel in environments:
            suggestion = (
                "Do not create virtual or conda environments in the working directory (nor "
                "change one there: they are read-only); one made under /tmp (python -m venv "
                "/tmp/env) lasts for this call."
            )
        return ToolResult.fail(
            ErrorCode.PATH_NOT_ALLOWED,
            message,
            suggestion=suggestion,
            details={
                "protected": [
                    {"path": r, "rule": ru, **({"environment": True} if r in environments
                                               else {})}
                    for r, ru in created.items()
                ],
                "result": result.data if result.success else None,
                # What the call answered otherwise (a failure of its own stays visible).
                "error": attrs.asdict(result.error) if result.error is not None else None,
            },
        )

    # -- pool ---------------------------------------------------------------------------------

    def _remember_module(self, key: PoolKey, module: str) -> None:
        modules = self._preload.get(key)
        if modules is None:
            modules = self._preload[key] = []
            while len(self._preload) > _PRELOAD_KEYS:
                self._preload.popitem(last=False)
        else:
            self._preload.move_to_end(key)
        if module in modules:
            return
        modules.append(module)
        del modules[:-8]

    def _still_valid(self, worker: _Worker) -> bool:
        """Do the worker's mounts still match its workdir (see the module docstring)?"""
        try:
            st = os.stat(worker.key.workdir)
        except OSError:
            return False
        if (st.st_dev, st.st_ino) != worker.identity:
            return False
        if worker.protected is not None:
            now = _Protected.scan(worker.key.workdir, worker.key.protected)
            if not now.same_paths(worker.protected):
                return False
            worker.protected = now
        return True

    async def _take_warm(self, key: PoolKey) -> _Worker | None:
        workers = self._idle.get(key)
        if workers is None:
            return None
        self._idle.move_to_end(key)
        while workers:
            # The oldest first: it is the most likely to have finished starting.
            worker = workers.pop(0)
            if worker.process.returncode is None and worker.process.poll() is None:
                if worker.protected is not None:  # a walk of the workdir: off the loop
                    valid = await trio.to_thread.run_sync(self._still_valid, worker)
                else:
                    valid = self._still_valid(worker)
                if valid:
                    return worker
                self._discarded_stale += 1
                await self._kill(worker)
                continue
            await self._kill(worker)  # died while idle (killed from outside): reap, clean up
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
                left = self._spawning[key] - 1
                if left:
                    self._spawning[key] = left
                else:
                    del self._spawning[key]  # else one entry per mount set ever warmed
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

    def _read_only_paths(self) -> list[str]:
        """Host paths mounted read-only in every sandbox besides the system directories."""
        extra = [*(self._paths or ()), *self.settings.python_path]
        extra += [*self.settings.extra_ro_binds, str(Path(_WORKER).parent)]
        return [
            p
            for p in dict.fromkeys(str(Path(p).resolve()) for p in extra)
            if os.path.exists(p) and not _under(p, _SYSTEM_DIRS)
        ]

    async def _prepare_ids(self) -> _Ids:
        """Decide, once, what the sandboxes run as on the host (see ``_idmap``)."""
        async with self._ids_lock:
            if self._ids is not None:
                return self._ids
            uid, gid = self.settings.uid, self.settings.gid
            if uid is None:
                ids = _Ids(None, 'disabled by [tool.tooldeck.runner] uid = "deck"')
            else:
                try:
                    mapper = await trio.to_thread.run_sync(
                        _idmap.prepare, uid, uid if gid is None else gid
                    )
                    ids = await _on_spawner(
                        functools.partial(_stage_read_only, mapper, self._read_only_paths())
                    )
                except OSError as exc:
                    ids = _Ids(None, exc.strerror or str(exc))
                if ids.mapper is None and os.geteuid() == 0:
                    logger.warning(
                        "tooldeck-runner: sandboxed code runs as the deck's uid %d, not as uid "
                        "%d: %s",
                        os.getuid(),
                        uid,
                        ids.reason,
                    )
            self._ids = ids
            return ids

    def _identity_limits(
        self, staged: str | None, why_not: str = "", inside_uid: int | None = None
    ) -> dict[str, Any]:
        """What the tool of a new worker runs as, for ``metadata["limits"]``."""
        ids = self._ids
        if self.isolation != ISOLATION_BWRAP:
            return {"uid": _UID_PROCESS, "host_uid": os.getuid(), "host_gid": os.getgid()}
        if staged is not None and ids is not None and ids.mapper is not None:
            mapper = ids.mapper
            found: dict[str, Any] = {
                "uid": _UID_NONROOT.format(uid=mapper.uid, gid=mapper.gid, deck_uid=os.getuid()),
                "host_uid": mapper.uid,
                "host_gid": mapper.gid,
            }
            if ids.not_mapped:
                found["uid_not_mapped"] = list(ids.not_mapped)
            return found
        found = {
            # bubblewrap's default: the sandbox's uid inside is the deck's real uid.
            "uid": _UID_BWRAP.format(
                inside=os.getuid() if inside_uid is None else inside_uid, deck_uid=os.getuid()
            ),
            "host_uid": os.getuid(),
            "host_gid": os.getgid(),
        }
        reason = why_not or (ids.reason if ids is not None else "")
        if reason:
            found["uid_fallback"] = reason
        return found

    def _command(
        self,
        key: PoolKey,
        preload: Sequence[str],
        protected: _Protected | None,
        staged: str | None = None,
        zygote_fds: tuple[int, int] | None = None,
    ) -> list[str]:
        python = self.settings.python
        # --monitor in both modes: the worker forks the tool's process after reading the
        # request and waits for it. Under bubblewrap the monitor is the sandbox's PID 1, which
        # the kernel shields from signals sent inside (so the tool's own abort() must not run
        # there: it would turn into SIGSEGV).
        worker = [python, "-P", _WORKER, "--monitor"]
        if zygote_fds is not None:
            worker = [python, "-P", _WORKER, "--zygote", str(zygote_fds[0])]
            worker += ["--admin", str(zygote_fds[1])]
            worker += ["--tmp-bytes", str(self.settings.tmp_size_mb * 1024 * 1024)]
            if key.network:
                worker.append("--network")
            if self.settings.seccomp:
                worker.append("--seccomp")
        if preload:
            worker += ["--preload", ",".join(preload)]
        if self.isolation == ISOLATION_PROCESS:
            return worker
        # Never a relative PATH entry: that would start a program planted in the workdir.
        bwrap = host_which("bwrap") or "/usr/bin/bwrap"
        mapper = self._ids.mapper if self._ids is not None else None
        staged_ro = self._ids.staged_ro if self._ids is not None else {}
        if staged is not None and mapper is not None:
            # The deck's user namespace instead of a new one (see _idmap): bubblewrap joins it
            # and becomes the unprivileged uid before it sets anything up. --unshare-all would
            # also ask for a new user namespace, so the others are named one by one.
            namespaces = ["--userns", str(mapper.userns_fd)]
            namespaces += ["--uid", str(mapper.uid), "--gid", str(mapper.gid)]
            namespaces += ["--unshare-ipc", "--unshare-pid", "--unshare-uts"]
            namespaces += ["--unshare-cgroup-try"]
            if not key.network:
                namespaces.append("--unshare-net")
        else:
            # Explicit, not "-try": the tool must never run in the host's user namespace,
            # where uid 0 would keep root's capabilities over every file it can see.
            namespaces = ["--unshare-all", "--unshare-user"]
            if key.network:
                namespaces.append("--share-net")
            if zygote_fds is not None and os.getuid() == 0:
                # A zygote whose sandbox maps the deck's root (``uid = "deck"``). Two things
                # would keep its calls from isolating themselves: (1) a call's uid_map may name
                # uid 0 of the zygote's namespace only with CAP_SETFCAP, so the sandbox's uid
                # is another number (the same host uid); (2) bubblewrap covers /proc/irq and
                # /proc/bus read-only (it can write them as a mapped root), and the kernel lets
                # a user namespace mount a new proc only while some proc mount of its mount
                # namespace has no locked cover (mount_too_revealing): the covers are locked
                # in the call's. So a proc of the deck's own (no covers) is bound where no path
                # leads: under an empty, read-only, 4 KiB tmpfs mounted over its parent. It
                # only has to exist; the call mounts its own proc and covers it itself.
                inside = str(_ZYGOTE_ROOT_INSIDE_UID)
                namespaces += ["--uid", inside, "--gid", inside]
                namespaces += ["--bind", "/proc", f"{_HIDDEN_PROC_DIR}/deck"]
                namespaces += ["--size", "4096", "--tmpfs", _HIDDEN_PROC_DIR]
                namespaces += ["--remount-ro", _HIDDEN_PROC_DIR]
        cmd = [
            bwrap,
            *namespaces,
            "--die-with-parent",
            "--new-session",
            # The worker is PID 1: no bubblewrap init process holding the response pipe where
            # the tool's programs could find it (/proc/1/fd), and no way to signal the worker.
            "--as-pid-1",
            "--cap-drop",
            "ALL",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            # /dev/shm and /tmp get the same size bound (each); /dev itself, a tmpfs bwrap
            # makes writable, is remounted read-only so it cannot serve as unbounded storage.
            "--size",
            str(self.settings.tmp_size_mb * 1024 * 1024),
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
            "--size",
            str(self.settings.tmp_size_mb * 1024 * 1024),
            "--tmpfs",
            "/tmp",
        ]

        def source(path: str) -> str:
            # Where bubblewrap takes a path from: the id-mapped clone of the workdir for what is
            # inside it (this call's view of it), else the pool's clone of a read-only path.
            if staged is not None and _under(path, (key.workdir,)):
                return staged + path[len(key.workdir) :]
            return staged_ro.get(path, path) if staged is not None else path

        ro = self._read_only_paths()
        # Mount order decides which mount wins. Read-only paths that contain the workdir (a
        # python_path that *is* the project) go first, so that the workdir's own mount, writable
        # or not, stays what the tool declared; then the workdir; then read-only paths inside
        # it (the interpreter's import paths stay read-only even in a writable workdir); last
        # the protected paths, read-only over everything.
        for path in ro:
            if _under(key.workdir, (path,)):
                cmd += ["--ro-bind", staged_ro.get(path, path) if staged else path, path]
        cmd += ["--bind" if key.writable else "--ro-bind", source(key.workdir), key.workdir]
        for path in _SYSTEM_DIRS:
            if os.path.islink(path):
                cmd += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                cmd += ["--ro-bind", path, path]
        for path in _ETC_FILES:
            cmd += ["--ro-bind-try", path, path]
        for path in ro:
            if not _under(key.workdir, (path,)):
                cmd += ["--ro-bind", source(path), path]
        if protected is not None:
            for rel, (_, _, target) in sorted(protected.entries.items()):
                path = os.path.join(key.workdir, rel)
                if target is None:
                    cmd += ["--ro-bind", source(path), path]
                    continue
                # A protected symlink is not bound (a bind would follow it; the link itself is
                # restored after the call if changed). What it points to inside the workdir is
                # what the host reads through it, so that is bound read-only instead.
                real = os.path.realpath(path)
                if _under(real, (key.workdir,)) and real != key.workdir and os.path.exists(real):
                    cmd += ["--ro-bind", source(real), real]
        # Last, once every mount point exists: the sandbox's own root, a tmpfs of bubblewrap's
        # without a size (/, /etc, the parents of the mounts), read-only. Writable, it was
        # storage beyond every limit and, in a zygote, shared with the session's next calls
        # (a file in /, an /etc/ld.so.preload). Not recursive: /tmp, /dev/shm and a writable
        # workdir keep their own flags.
        cmd += ["--remount-ro", "/"]
        cmd += ["--chdir", key.workdir, "--clearenv"]
        for name, value in self._environment().items():
            cmd += ["--setenv", name, value]
        return [*cmd, "--", *worker]

    async def _spawn(
        self, key: PoolKey, preload: Sequence[str], zygote_fds: tuple[int, int] | None = None
    ) -> _Worker:
        if self.isolation == ISOLATION_BWRAP and self._paths is None:
            self._paths = await trio.to_thread.run_sync(_interpreter_paths, self.settings.python)
        st = os.stat(key.workdir)
        protected = None
        if key.writable:
            protected = await trio.to_thread.run_sync(_Protected.scan, key.workdir, key.protected)
        staged = None
        why_not = ""
        ids = await self._prepare_ids() if self.isolation == ISOLATION_BWRAP else None
        if ids is not None and ids.mapper is not None:
            try:
                staged = await _on_spawner(
                    functools.partial(ids.mapper.stage, key.workdir, read_only=not key.writable)
                )
            except OSError as exc:
                # EINVAL: the workdir's file system (or one mounted inside it) has no id-mapped
                # mounts. This workdir's sandboxes keep the deck's uid, and say so.
                why_not = f"no id-mapped mount of the workdir: {exc.strerror or exc}"
        inside_uid = None
        if zygote_fds is not None and staged is None and os.getuid() == 0:
            inside_uid = _ZYGOTE_ROOT_INSIDE_UID  # see _command
        identity_limits = self._identity_limits(staged, why_not, inside_uid)
        cmd = self._command(key, preload, protected, staged, zygote_fds)
        group = None
        support = self._cgroups
        if support is not None and support.available:
            try:
                group = support.create(pids_max=self.settings.max_processes)
            except OSError as exc:
                logger.warning("tooldeck-runner: cannot create a cgroup for a sandbox: %s", exc)
            else:
                cmd = _cgroup.join_command(group.procs_files(), cmd)
        mapper = ids.mapper if ids is not None else None
        try:
            process = await _open_process(
                cmd,
                cwd=key.workdir,
                env=self._environment(),
                pass_fds=((mapper.userns_fd,) if staged and mapper else ())
                + (zygote_fds or ()),
            )
        except BaseException:
            if group is not None:
                group.remove()
            if staged is not None:
                _on_spawner_later(functools.partial(_idmap.unstage, staged))
            raise
        self._spawned += 1
        worker = _Worker(
            process=process,
            key=key,
            cgroup=group,
            identity=(st.st_dev, st.st_ino),
            protected=protected,
            staged=staged,
            identity_limits=identity_limits,
        )
        self._live.add(worker)
        return worker

    def _unstage(self, worker: _Worker) -> None:
        """Detach the worker's staged workdir (bubblewrap holds its own copy, or is dead)."""
        staged, worker.staged = worker.staged, None
        if staged is not None:
            _on_spawner_later(functools.partial(_idmap.unstage, staged))

    def _release_cgroup(self, worker: _Worker, *, read_events: bool = True) -> None:
        """Note what the cgroup saw (unless ``read_events`` is false), then empty and remove it
        in the background.

        Off the answer's path: the processes of a killed sandbox take a few milliseconds to
        leave, and the result does not wait for that (aclose() does).
        """
        group = worker.cgroup
        if group is None:
            return
        worker.cgroup = None
        if read_events:
            worker.events = (group.oom_killed(), group.pids_exhausted())
        if not group.killed:
            # Once here; the reaper repeats the kill until the group is empty (cgroup v1).
            group.kill()
        # rmdir of a memory cgroup moves its charges to the parent: milliseconds of kernel
        # work, done by the reaper in a thread rather than here on the answer's path.
        with self._leftover_lock:
            self._leftover_cgroups.append(group)
        if not self._reaping:
            self._reaping = True
            trio.lowlevel.spawn_system_task(self._reap_cgroups)

    def _sweep_leftover_cgroups(self) -> bool:
        """One round of kill-and-remove over the leftover cgroups; True when none is left.

        Runs in a worker thread: the list is only replaced, never mutated in place, and
        groups appended meanwhile by the loop are kept for the next round.
        """
        with self._leftover_lock:
            groups = list(self._leftover_cgroups)
        still = []
        for group in groups:
            group.kill()
            if not group.remove():
                still.append(group)
        done = set(map(id, groups))
        with self._leftover_lock:
            self._leftover_cgroups = still + [
                g for g in self._leftover_cgroups if id(g) not in done
            ]
            return not self._leftover_cgroups

    async def _reap_cgroups(self) -> None:
        try:
            for _ in range(1000):  # ~10 s: a sandbox that will not die is logged below
                if await trio.to_thread.run_sync(self._sweep_leftover_cgroups):
                    return
                await trio.sleep(0.01)
            logger.warning(
                "tooldeck-runner: %d sandbox cgroups did not empty", len(self._leftover_cgroups)
            )
        finally:
            self._reaping = False

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
        if worker.cgroup is not None:
            worker.cgroup.kill()
        await process.wait()
        self._live.discard(worker)
        self._release_cgroup(worker)
        self._unstage(worker)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()

    async def _exchange(
        self,
        worker: _Worker,
        request: bytes,
        limits: Limits,
        progress: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> ToolResult:
        process = worker.process
        stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
        assert stdin is not None and stdout is not None and stderr is not None
        got = _Exchange()
        cap = limits.max_output_bytes
        # The worker enforces the cap on the result itself; this guards against a worker that
        # does not (leaving room for its small OUTPUT_TRUNCATED answer when the cap is tiny).
        frame_cap = max(cap, 65536) + HEADER.size

        async def kill() -> None:
            await self._kill_quick(worker)

        baseline = _usage(worker.key.workdir) if worker.key.writable else None
        try:
            try:
                await stdin.send_all(request)
                await stdin.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the worker died; its exit status tells why
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_read_output, stderr, cap, got, kill)
                if worker.key.writable and baseline is not None:
                    nursery.start_soon(self._watch_writes, worker, baseline, got, kill)
                buffer = bytearray()
                async for chunk in stdout:
                    buffer += chunk
                    # Progress frames (the tool's emit) come first, each handed on as it
                    # arrives; the first other frame is the result.
                    while (payload := _next_frame(buffer)) is not None:
                        if not _progress_frame(payload, progress):
                            got.frame = payload
                            break
                    if got.frame is not None:
                        break
                    if len(buffer) > frame_cap:
                        got.truncated = True
                        await self._kill_quick(worker)
                        break
                else:
                    if buffer:
                        got.malformed = _incomplete(buffer)
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
        if baseline is not None and not (got.wrote_too_much or got.made_too_many):
            self._over_budget(worker, baseline, got)
        return await self._interpret(got, process.returncode, limits)

    async def _watch_writes(
        self,
        worker: _Worker,
        baseline: tuple[int, int],
        got: _Exchange,
        kill: Callable[[], Awaitable[None]],
    ) -> None:
        """Kill the call (``kill``) once the workdir grew past the write budget (bytes, or
        files and folders made)."""
        # Polled, not evented: no kernel interface counts bytes written below a folder.
        # Precision: the poll interval times the write rate (RLIMIT_FSIZE bounds each file).
        while True:
            await trio.sleep(_WRITE_POLL_S)
            if self._over_budget(worker, baseline, got):
                await kill()
                return

    def _over_budget(self, worker: _Worker, baseline: tuple[int, int], got: _Exchange) -> bool:
        """Whether the workdir's file system grew past a budget since ``baseline``; records by
        how much in ``got``. Inodes count as much as bytes: 318,000 empty files took 6.7 MB of
        a 256 MB budget, while two such calls of 300 s would use up the host's inodes."""
        used = _usage(worker.key.workdir)
        if used is None:
            return False
        grown, made = used[0] - baseline[0], used[1] - baseline[1]
        if grown > self.settings.workdir_write_mb * 1048576:
            got.wrote_too_much = grown
            return True
        if made > self.settings.workdir_max_new_entries:
            got.made_too_many = made
            return True
        return False

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
        if worker.cgroup is not None:
            worker.cgroup.kill()

    async def _interpret(
        self, got: _Exchange, returncode: int | None, limits: Limits
    ) -> ToolResult:
        tail = got.output[-4000:].decode("utf-8", "replace")
        if got.wrote_too_much:
            budget = self.settings.workdir_write_mb
            return ToolResult.fail(
                ErrorCode.TOO_LARGE,
                # Measured on the whole file system (statvfs): another writer there (a build,
                # another session's call) counts too, and the message must not say otherwise.
                f"the call went over its budget of {budget} MiB of writes into the working "
                f"directory: the file system holding it grew by "
                f"{got.wrote_too_much // 1048576} MiB while the call ran (by this call's writes "
                "and any other writer's on that file system); it was stopped",
                suggestion="Write less data into the working directory (delete temporary "
                "files, write outputs compressed or in parts).",
                details={"workdir_write_mb": budget, "grown_bytes": got.wrote_too_much},
            )
        if got.made_too_many:
            entries = self.settings.workdir_max_new_entries
            return ToolResult.fail(
                ErrorCode.TOO_LARGE,
                f"the call went over its budget of {entries} new files and folders in the "
                f"working directory: its file system gained {got.made_too_many} while the call "
                "ran (by this call and any other writer on that file system); it was stopped",
                suggestion="Create fewer files (write one archive or one file with many "
                "records instead of many small files).",
                details={"workdir_max_new_entries": entries, "new_entries": got.made_too_many},
            )
        if got.truncated:
            return ToolResult.fail(
                ErrorCode.OUTPUT_TRUNCATED,
                f"the tool produced more than {limits.max_output_bytes} bytes of output; "
                "it was stopped",
                details={"max_output_bytes": limits.max_output_bytes},
            )
        died = returncode is not None and (returncode < 0 or returncode > 128)
        if got.malformed and not died:
            # (A process killed while it wrote its answer is reported by its signal, below.)
            return ToolResult.fail(
                ErrorCode.EXECUTION_ERROR,
                f"the sandbox worker sent a malformed answer: {got.malformed}",
                details={"output_tail": tail[-2000:]},
            )
        if got.frame is not None:
            try:
                if len(got.frame) <= _INLINE_FRAME_BYTES:
                    result = structure_result(got.frame)
                else:  # decoding megabytes of JSON would stall every session on the loop
                    result = await trio.to_thread.run_sync(structure_result, got.frame)
            except Exception as exc:  # a malformed answer is the tool's failure, not ours
                return ToolResult.fail(
                    ErrorCode.EXECUTION_ERROR, f"the sandbox worker sent a malformed answer: {exc}"
                )
            # The answer comes from the tool's process (the tool can even write it itself):
            # readable as any result, and without what the host says about the call.
            result = host_owned(consistent(result), _SANDBOX_HOST_METADATA)
            if got.output:
                result = result.with_metadata(output=got.output.decode("utf-8", "replace"))
            return result
        if returncode is None:
            # A forked call whose processes ended without an answer or an exit status (its
            # zygote died): no status to read a signal from.
            return ToolResult.fail(
                ErrorCode.SANDBOX_CRASHED,
                "the tool's process ended without answering and without an exit status",
                details={"output_tail": tail[-2000:]},
            )
        code = returncode
        # bubblewrap and the degraded mode's monitor both report "killed by N" as 128 + N.
        signum = -code if code < 0 else code - 128 if code > 128 else 0
        if signum:
            return signal_result(signum, tail, memory_mb=limits.memory_mb)
        return ToolResult.fail(
            ErrorCode.SANDBOX_CRASHED,
            f"the tool's process exited with status {code} without answering",
            details={"exit_status": code, "output_tail": tail[-2000:]},
        )


def _stage_read_only(mapper: _idmap.IdMapper, paths: Sequence[str]) -> _Ids:
    """Stage id-mapped, read-only clones of ``paths`` (on the spawner thread)."""
    ids = _Ids(mapper)
    for path in paths:
        try:
            ids.staged_ro[path] = mapper.stage(path, read_only=True)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                # The staging area itself (or the kernel) refused: no id-mapped sandboxes.
                for staged in ids.staged_ro.values():
                    _idmap.unstage(staged)
                raise
            # This file system has no id-mapped mounts: a plain clone still gives the sandbox's
            # uid a path it may walk to (its files keep their "other" permissions).
            try:
                ids.staged_ro[path] = mapper.stage(path, read_only=True, idmap=False)
            except OSError:
                pass
            ids.not_mapped.append(path)
    return ids


#: Folders are opened one component at a time, never through a link: another call running in
#: the same workdir can swap any folder on a path for a symbolic link between the scan and the
#: fix-up, and the fix-up runs as the deck (root, often) on the host.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_beneath(root: str, rel: str, *, create: bool = False) -> tuple[int, str] | None:
    """A descriptor of the folder holding ``rel`` (below ``root``) and ``rel``'s last name,
    reached without following a link on the way; None when a folder on the way is a link,
    missing (unless ``create``: then it is made) or not a folder (the caller then leaves it,
    and says so)."""
    parts = [part for part in rel.split("/") if part]
    if not parts or any(part in (".", "..") for part in parts):
        return None
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError:
        os.close(fd)
        return None
    return fd, parts[-1]


def _undo_protected(
    workdir: str, rules: Sequence[str], before: _Protected, budget: int
) -> tuple[_Protected, dict[str, str], set[str], set[str]]:
    """Undo what a writing call did to protected paths; the sandbox is dead by now.

    Every protected path found after the call that was not there before is the call's doing:

    - a protected folder of the user's that moved (with a folder it lies in) is moved back;
    - one that now stands where such a folder was (``mv sub sub2; mkdir -p sub/.git/hooks``:
      the read-only bind of ``sub/.git`` went along with ``sub``) is removed first. Only where
      no folder on its way changed is a replaced path left and reported (no binds in degraded
      mode; or the user's own editor saved the file under a new inode meanwhile);
    - a folder that was there before the call under a name no rule covered, and is protected
      now, is the user's: renamed (``mv src .vscode``), it is moved back; made a Python
      environment where it stands (``cd proj && python -m venv .``), only its markers
      (``pyvenv.cfg``, ``conda-meta``) are removed, so that it is an environment no more and
      the user's files stay;
    - anything else (what the call made: a file, a folder, a whole new environment) is removed.

    Moving back and defusing can bring protected paths inside those folders to light (the
    walk does not look inside a protected folder), so the workdir is scanned again, at most
    ``_FIXUP_ROUNDS`` times; in the last round nothing is spared.

    :returns: the last scan; ``relative path -> rule`` of what was reported; the paths of those
        that were environments; and the environments defused in place.
    """
    identities = {(dev, ino): rel for rel, (dev, ino, _) in before.entries.items()}
    folder_inodes = {rel: ino for ino, rel in before.folders.items()}
    created: dict[str, str] = {}
    moved: dict[str, str] = {}  # reported after what the call made: the user's, put back
    environments: set[str] = set()
    defused: set[str] = set()
    after = _Protected.scan(workdir, rules, max_entries=budget)
    for round_ in range(_FIXUP_ROUNDS):
        last = round_ == _FIXUP_ROUNDS - 1
        remove: list[str] = []
        # (where it is, where it was): the user's protected paths; the user's other folders.
        returns: list[tuple[str, str]] = []
        folder_returns: list[tuple[str, str]] = []
        defuse: list[str] = []
        for rel, (dev, ino, target) in after.entries.items():
            previous = before.entries.get(rel)
            if previous is not None:
                if previous[:2] == (dev, ino) or previous[2] is not None:
                    continue  # unchanged; a protected symlink is restored by the caller
                if not _moved_on_the_way(workdir, rel, folder_inodes):
                    created.setdefault(rel, after.rules.get(rel, "protected"))
                    continue
            if rel in after.environments:
                environments.add(rel)
            original = identities.get((dev, ino))
            if original is not None and original != rel:
                moved.setdefault(rel, after.rules.get(rel, "protected"))
                returns.append((rel, original))  # a protected path moved with its folder
                continue
            created.setdefault(rel, after.rules.get(rel, "protected"))
            was = before.folders.get(ino) if target is None and not last else None
            if was is not None and _is_folder(workdir, rel):
                if was != rel:
                    folder_returns.append((rel, was))
                    continue
                if rel in after.environments:
                    defuse.append(rel)
                    continue
            remove.append(rel)
        for rel in remove:
            _remove_beneath(workdir, rel)
        changed = False
        for rel, original in returns:
            # Left where it is when its name is taken: it is the user's own protected path.
            changed |= _move_back_beneath(workdir, rel, original)
        for rel, original in folder_returns:
            if _move_back_beneath(workdir, rel, original):
                changed = True
            else:
                # Its name is taken again: what it holds may have been planted, and it must
                # not stay where the host reads it.
                _remove_beneath(workdir, rel)
        for rel in defuse:
            if _defuse_environment(workdir, rel):
                defused.add(rel)
            else:
                _remove_beneath(workdir, rel)
            changed = True
        if not changed or last:
            break
        after = _Protected.scan(workdir, rules, max_entries=budget)
    for rel, rule in moved.items():
        created.setdefault(rel, rule)
    return after, created, environments, defused


def _identity(root: str, rel: str) -> tuple[int, int] | None:
    found = _open_beneath(root, rel)
    if found is None:
        return None
    fd, name = found
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        return st.st_dev, st.st_ino
    except OSError:
        return None
    finally:
        os.close(fd)


def _is_folder(root: str, rel: str) -> bool:
    found = _open_beneath(root, rel)
    if found is None:
        return False
    fd, name = found
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
    finally:
        os.close(fd)


def _moved_on_the_way(root: str, rel: str, folder_inodes: Mapping[str, int]) -> bool:
    """Whether a folder on the way to ``rel`` is not the one that was there before the call
    (moved away, replaced, or not a folder any more)."""
    parts = rel.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        inode = folder_inodes.get(prefix)
        if inode is None:
            return True  # not a folder no rule covers before the call: not the user's way
        now = _identity(root, prefix)
        if now is None or now[1] != inode:
            return True
    return False


def _defuse_environment(root: str, rel: str) -> bool:
    """Remove the markers that make the folder ``rel`` a Python environment (``pyvenv.cfg``,
    ``conda-meta``, any spelling); True when none is left."""
    markers = {m.casefold() for m in ENVIRONMENT_MARKERS}
    found = _open_beneath(root, rel + "/x")
    if found is None:
        return False
    fd, _ = found
    try:
        names = [n for n in os.listdir(fd) if n.casefold() in markers]
    except OSError:
        return False
    finally:
        os.close(fd)
    for name in names:
        _remove_beneath(root, f"{rel}/{name}")
    found = _open_beneath(root, rel + "/x")
    if found is None:
        return False
    fd, _ = found
    try:
        return not any(n.casefold() in markers for n in os.listdir(fd))
    except OSError:
        return False
    finally:
        os.close(fd)


def _remove_beneath(root: str, rel: str) -> None:
    """Remove a file, link or folder tree below ``root``, by descriptor: never through a link,
    wherever it lies on the path (:func:`_open_beneath`)."""
    found = _open_beneath(root, rel)
    if found is None:
        logger.warning("tooldeck-runner: left protected path %s: a folder on its way changed", rel)
        return
    fd, name = found
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=fd)  # the descriptor-based walk: links are not followed
        else:
            os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        logger.warning("tooldeck-runner: could not remove protected path %s: %s", rel, exc)
    finally:
        os.close(fd)


def _symlink_beneath(root: str, rel: str, target: str) -> None:
    """Create the symbolic link ``rel`` -> ``target`` below ``root``, by descriptor."""
    found = _open_beneath(root, rel)
    if found is None:
        logger.warning("tooldeck-runner: could not restore symlink %s: its folder changed", rel)
        return
    fd, name = found
    try:
        os.symlink(target, name, dir_fd=fd)
    except OSError as exc:
        logger.warning("tooldeck-runner: could not restore symlink %s: %s", rel, exc)
    finally:
        os.close(fd)


def _move_back_beneath(root: str, rel: str, original: str) -> bool:
    """Rename ``rel`` back to ``original`` (both below ``root``), by descriptor, when the
    original's name is free (its folders are made again, as ``os.renames`` did) and no folder
    on either way is a link; otherwise leave it, loudly. True when it was moved."""
    source = _open_beneath(root, rel)
    if source is None:
        logger.warning("tooldeck-runner: could not move %s back: a folder on its way changed", rel)
        return False
    target = _open_beneath(root, original, create=True)  # as os.renames made its folders
    try:
        if target is None:
            logger.warning("tooldeck-runner: could not move %s back to %s", rel, original)
            return False
        try:
            os.stat(target[1], dir_fd=target[0], follow_symlinks=False)
            logger.warning("tooldeck-runner: could not move %s back: %s is taken", rel, original)
            return False  # the name is taken again: nothing is overwritten
        except FileNotFoundError:
            pass
        os.rename(source[1], target[1], src_dir_fd=source[0], dst_dir_fd=target[0])
        return True
    except OSError as exc:
        logger.warning("tooldeck-runner: could not move %s back: %s", rel, exc)
        return False
    finally:
        os.close(source[0])
        if target is not None:
            os.close(target[0])


#: A file capability: what ``setcap`` writes (the seccomp filter refuses it; this sweep is the
#: backstop, as for set-user-ID bits).
_CAPABILITY_XATTR = "security.capability"


def _clear_setid_bits(root: str, since: float) -> list[str]:
    """Clear S_ISUID/S_ISGID and file capabilities on regular files under ``root`` changed
    since ``since``.

    The status change time moves on creation, on chmod and on setting an attribute, so files
    the call did not touch (a project's own setgid files, if any) are left alone. Bounded walk
    by descriptor (``os.fwalk``): links are not followed, and a folder swapped for a link
    while the walk runs is not entered.
    """
    cleared: list[str] = []
    seen = 0
    threshold = since - 2.0  # file systems with coarse timestamps
    setid = stat.S_ISUID | stat.S_ISGID
    for folder, folders, files, dir_fd in os.fwalk(root, follow_symlinks=False):
        seen += len(folders)
        for name in files:
            seen += 1
            if seen > _SWEEP_MAX_ENTRIES:
                return cleared
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_ctime < threshold:
                continue
            rel = os.path.relpath(os.path.join(folder, name), root)
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             dir_fd=dir_fd)
            except OSError:
                if st.st_mode & setid:
                    _unlink_at(dir_fd, name, rel)
                    cleared.append(rel)
                continue
            try:
                capable = _CAPABILITY_XATTR in _xattrs(fd)
                if not (st.st_mode & setid or capable):
                    continue
                cleared.append(rel)
                if st.st_nlink > 1:
                    # A hard link (made in degraded mode, say, to /usr/bin/passwd): clearing
                    # the bits would change the original. Remove this name of it instead.
                    _unlink_at(dir_fd, name, rel)
                    continue
                if st.st_mode & setid:
                    os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~setid)
                if capable:
                    os.removexattr(fd, _CAPABILITY_XATTR)
            except OSError:
                # Cannot clear it: remove it rather than leave a setuid file behind.
                _unlink_at(dir_fd, name, rel)
            finally:
                os.close(fd)
    return cleared


def _xattrs(fd: int) -> list[str]:
    try:
        return os.listxattr(fd)
    except OSError:
        return []


def _unlink_at(dir_fd: int, name: str, rel: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        logger.warning("tooldeck-runner: could not remove %s: %s", rel, exc)


async def _read_output(
    stream: Any, cap: int, got: _Exchange, kill: Callable[[], Awaitable[None]]
) -> None:
    """Collect what the tool prints into ``got.output``, up to ``cap``; past it, ``kill``."""
    try:
        async for chunk in stream:
            room = cap - len(got.output)
            got.output += chunk[: max(room, 0)]
            if len(chunk) > room:
                got.truncated = True
                await kill()
                return
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        pass


def _next_frame(buffer: bytearray) -> bytes | None:
    """Take the first complete frame's payload off ``buffer``; None until one is complete."""
    if len(buffer) < HEADER.size:
        return None
    (length,) = HEADER.unpack_from(buffer)
    if len(buffer) < HEADER.size + length:
        return None
    payload = bytes(buffer[HEADER.size : HEADER.size + length])
    del buffer[: HEADER.size + length]
    return payload


def _exit_status(payload: bytes) -> int | None:
    """The status of an ``!exit N`` frame (0-255, as ``_call_init`` writes it), else None."""
    word = payload[6:]
    if not word.isdigit() or len(word) > 3 or int(word) > 255:
        return None
    return int(word)


def _incomplete(buffer: bytearray) -> str:
    """Why bytes left on the channel at its end are no answer."""
    if len(buffer) < HEADER.size:
        return f"{len(buffer)} stray byte(s) after the last frame"
    (length,) = HEADER.unpack_from(buffer)
    return (
        f"a frame declaring {length} bytes ended after {len(buffer) - HEADER.size} "
        "(the channel was closed mid-frame)"
    )


def _progress_frame(
    payload: bytes, progress: Callable[[Mapping[str, Any]], None] | None
) -> bool:
    """Whether ``payload`` is a progress frame (then handed to ``progress``), not a result."""
    event = parse_progress(payload)
    if event is None:
        return False
    if progress is not None:
        try:
            progress(event)
        except Exception:
            logger.debug("progress listener raised", exc_info=True)
    return True


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


def _join_cgroup(group: _cgroup.Cgroup, pid: int) -> None:
    """Move ``pid`` (a call's tool process, not yet running the tool) into the call's cgroup."""
    for procs in group.procs_files():
        with open(procs, "w") as fh:
            fh.write(str(pid))


def _ucred_pid(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The sender's pid from SCM_CREDENTIALS, as the kernel translated it into our namespace."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            if len(data) >= _UCRED.size:
                pid, _uid, _gid = _UCRED.unpack_from(data)
                return int(pid) if pid > 0 else None
    return None


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
