"""cgroups beneath the deck's own: memory and process count of a whole process tree.

Used by the runner (each sandbox worker gets its own cgroup) and by the browser pack (Chromium and
every renderer it starts share one). A cgroup is one per controller on cgroup v1, one directory on
v2, created *beneath the cgroup the deck already runs in* (``/proc/self/cgroup``), so that the
limits of whoever runs the deck (a container, a systemd unit) still hold above ours and nothing is
moved out of its place. The process tree is placed in it before it can fork: it is started
through ``/bin/sh -c 'echo $$ > <cgroup>/cgroup.procs ...; exec ...'`` (see :func:`join_command`),
so the program and everything it starts are born inside.

- memory: ``memory.limit_in_bytes`` (+ ``memory.memsw.limit_in_bytes`` when swap is accounted) on
  v1, ``memory.max`` (+ ``memory.swap.max = 0``) on v2. Page cache and tmpfs pages the call writes
  count too. Going over makes the kernel's OOM killer kill a process of the call, which is
  reported as ``SANDBOX_MEMORY_LIMIT`` (``oom_kill`` in ``memory.oom_control`` / ``memory.events``).
- processes: ``pids.max``; ``fork`` fails with ``EAGAIN`` beyond it (``max`` in ``pids.events``).
- kill: ``cgroup.kill`` on v2, else SIGKILL to every member until the group is empty.

When no controller is writable (no cgroup mounted, a read-only cgroup file system, a v2 parent
that cannot delegate controllers because it holds processes itself), :func:`detect` says why and
the sandbox falls back to per-process rlimits, which the result's ``metadata["limits"]`` reports.
"""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Sequence

import attrs

__all__ = ["BROWSER_PREFIX", "Cgroup", "CgroupSupport", "detect", "join_command", "remove_stale"]

_counter = itertools.count()
#: Names of the cgroups made here: ``<prefix><deck's pid>-<n>``. The sandbox's per-call groups
#: and the browser's are told apart by their prefix (a test counting one kind sees only it).
_PREFIX = "tooldeck-sbx-"
BROWSER_PREFIX = "tooldeck-browser-"
_PREFIXES = (_PREFIX, BROWSER_PREFIX)


@attrs.frozen
class CgroupSupport:
    """Where per-call cgroups can be made, or why they cannot."""

    #: ``"v1"``, ``"v2"`` or ``""`` (unavailable).
    version: str
    #: Parent directories: ``{"memory": ..., "pids": ...}`` on v1, ``{"unified": ...}`` on v2.
    parents: dict[str, str] = attrs.field(factory=dict)
    #: Why not, when unavailable.
    reason: str = ""

    @property
    def available(self) -> bool:
        """True when cgroups can be created."""
        return bool(self.version)

    def create(self, *, pids_max: int, prefix: str = _PREFIX) -> Cgroup:
        """A new, empty cgroup with its process limit set (memory is set per call).

        :param prefix: the start of its name, one of ``tooldeck-sbx-`` (a sandboxed call, the
            default) or :data:`BROWSER_PREFIX`.
        """
        if prefix not in _PREFIXES:
            raise ValueError(f"cgroup name prefix {prefix!r} is not one of {_PREFIXES}")
        name = f"{prefix}{os.getpid()}-{next(_counter)}"
        dirs: dict[str, str] = {}
        try:
            for controller, parent in self.parents.items():
                path = os.path.join(parent, name)
                os.mkdir(path)
                dirs[controller] = path
            group = Cgroup(version=self.version, dirs=dirs)
            group.set_pids(pids_max)
        except OSError:
            for path in dirs.values():
                _rmdir(path)
            raise
        return group


def _own_paths() -> dict[str, str]:
    """``{controller or "": path}`` from ``/proc/self/cgroup``."""
    paths: dict[str, str] = {}
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(","):
                paths[controller] = path
    return paths


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount point, root within the hierarchy, fs type, super options) of cgroup mounts."""
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields = left.split()
            fstype, _source, options = (right.split() + ["", "", ""])[:3]
            if fstype in ("cgroup", "cgroup2"):
                found.append((fields[4], fields[3], fstype, options))
    return found


def _probe(parent: str) -> str:
    """Empty when a child cgroup can be made in ``parent``, else why not."""
    probe = os.path.join(parent, f"{_PREFIX}probe-{os.getpid()}-{next(_counter)}")
    try:
        os.mkdir(probe)
    except OSError as exc:
        return f"cannot create a cgroup in {parent}: {exc.strerror}"
    _rmdir(probe)
    return ""


def _v1_parent(controller: str, own: dict[str, str], mounts: Sequence[tuple[str, ...]]) -> str:
    for point, root, fstype, options in mounts:
        if fstype == "cgroup" and controller in options.split(","):
            rel = own.get(controller, "/")
            # A container sees its own cgroup as the mount's root.
            if root != "/" and (rel == root or rel.startswith(root + "/")):
                rel = rel[len(root) :] or "/"
            return os.path.join(point, rel.lstrip("/"))
    return ""


def detect() -> CgroupSupport:
    """Find where this process may create per-call cgroups (v2 when unified, else v1)."""
    try:
        own = _own_paths()
        mounts = _mounts()
    except OSError as exc:
        return CgroupSupport("", reason=f"cannot read this process's cgroups: {exc}")
    unified = [m for m in mounts if m[2] == "cgroup2" and m[0] == "/sys/fs/cgroup"]
    if unified:
        point, root, _, _ = unified[0]
        rel = own.get("", "/")
        if root != "/" and (rel == root or rel.startswith(root + "/")):
            rel = rel[len(root) :] or "/"
        parent = os.path.join(point, rel.lstrip("/"))
        try:
            with open(os.path.join(parent, "cgroup.subtree_control")) as fh:
                enabled = set(fh.read().split())
            missing = {"memory", "pids"} - enabled
            if missing:
                # Fails (EBUSY) when this cgroup holds processes itself: v2's "no internal
                # processes" rule. We never move the deck out of its cgroup to get around it.
                with open(os.path.join(parent, "cgroup.subtree_control"), "w") as fh:
                    fh.write(" ".join(f"+{c}" for c in sorted(missing)))
        except OSError as exc:
            return CgroupSupport(
                "",
                reason=f"cgroup v2: cannot enable memory and pids for children of {parent}: "
                f"{exc.strerror or exc}",
            )
        why = _probe(parent)
        if why:
            return CgroupSupport("", reason=why)
        return CgroupSupport("v2", {"unified": parent})
    parents = {}
    for controller in ("memory", "pids"):
        parent = _v1_parent(controller, own, mounts)
        if not parent or not os.path.isdir(parent):
            return CgroupSupport("", reason=f"cgroup v1: no {controller} controller is mounted")
        why = _probe(parent)
        if why:
            return CgroupSupport("", reason=why)
        parents[controller] = parent
    return CgroupSupport("v1", parents)


def join_command(procs_files: Sequence[str], command: Sequence[str]) -> list[str]:
    """``command`` started by a shell that first moves itself into the given cgroups.

    ``exec`` keeps the process: bubblewrap runs as the very process that joined, so there is no
    moment at which a process of the sandbox lives outside the cgroup. A failed join exits 125
    before anything runs.
    """
    script = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
    return ["/bin/sh", "-c", script, "tooldeck-cgroup-join", *procs_files, "--", *command]


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def _rmdir(path: str) -> bool:
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _counter_in(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


@attrs.define(eq=False)
class Cgroup:
    """One sandbox's cgroup (a directory per controller on v1)."""

    version: str
    dirs: dict[str, str]
    memory_bytes: int | None = None
    pids_max: int | None = None
    #: Set by the first :meth:`kill`: a release need not kill again (the reaper repeats it).
    killed: bool = False

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid into to join."""
        return [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]

    def _dir(self, controller: str) -> str:
        return self.dirs["unified"] if self.version == "v2" else self.dirs[controller]

    def set_pids(self, pids_max: int) -> None:
        """Cap the number of processes (and threads) of the group."""
        _write(os.path.join(self._dir("pids"), "pids.max"), str(pids_max))
        self.pids_max = pids_max

    def set_memory(self, memory_bytes: int) -> None:
        """Cap the memory of the group (swap too, so it cannot spill there)."""
        base = self._dir("memory")
        if self.version == "v2":
            _write(os.path.join(base, "memory.max"), str(memory_bytes))
            swap = os.path.join(base, "memory.swap.max")
            if os.path.exists(swap):
                _write(swap, "0")
        else:
            limit = os.path.join(base, "memory.limit_in_bytes")
            memsw = os.path.join(base, "memory.memsw.limit_in_bytes")
            has_memsw = os.path.exists(memsw)
            # memsw must stay >= limit: raise memsw first when growing, lower limit first when
            # shrinking.
            if has_memsw and self.memory_bytes is not None and memory_bytes > self.memory_bytes:
                _write(memsw, str(memory_bytes))
                _write(limit, str(memory_bytes))
            else:
                _write(limit, str(memory_bytes))
                if has_memsw:
                    _write(memsw, str(memory_bytes))
        self.memory_bytes = memory_bytes

    def oom_killed(self) -> bool:
        """True when the kernel killed a process of the group for going over its memory."""
        return self.oom_kills() > 0

    def oom_kills(self) -> int:
        """How many processes of the group the kernel killed for going over its memory."""
        base = self._dir("memory")
        if self.version == "v2":
            return _counter_in(_read(os.path.join(base, "memory.events")), "oom_kill")
        return _counter_in(_read(os.path.join(base, "memory.oom_control")), "oom_kill")

    def pids_exhausted(self) -> bool:
        """True when a fork or clone of the group failed at ``pids.max``."""
        return _counter_in(_read(os.path.join(self._dir("pids"), "pids.events")), "max") > 0

    def members(self) -> list[int]:
        """Pids in the group (as this process sees them)."""
        pids: set[int] = set()
        for path in self.procs_files():
            pids.update(int(p) for p in _read(path).split() if p.isdigit())
        return sorted(pids)

    def kill(self) -> bool:
        """SIGKILL every process of the group, once; True when it was empty already.

        v2 has ``cgroup.kill`` (atomic). v1 has not: the caller repeats until the group is
        empty (:meth:`remove` succeeds); ``pids.max`` bounds how many can appear between two
        rounds, and a process being killed cannot fork, so this converges.
        """
        self.killed = True
        if self.version == "v2":
            kill = os.path.join(self.dirs["unified"], "cgroup.kill")
            if os.path.exists(kill):
                try:
                    _write(kill, "1")
                    return not self.members()
                except OSError:
                    pass
        members = self.members()
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return not members

    def remove(self) -> bool:
        """Remove the group's directories; False while processes are still leaving it."""
        return all([_rmdir(path) for path in self.dirs.values()])


def remove_stale(support: CgroupSupport) -> None:
    """Remove empty cgroups a previous, killed deck left under our parents (a sandboxed
    call's or a browser's)."""
    for parent in support.parents.values():
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            prefix = next((p for p in _PREFIXES if name.startswith(p)), None)
            if prefix is None:
                continue
            pid = name[len(prefix) :].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
                _rmdir(os.path.join(parent, name))
