"""An unprivileged host uid for sandboxed code: a user namespace and id-mapped mounts.

Under bubblewrap with ``--unshare-user``, a deck running as root gets uid 0 inside mapped to
uid 0 outside: the tool's processes are the host's root (without capabilities), and a process
that escaped its mount namespace would be root on the host. Like rootless Podman, the sandbox
should run as an unprivileged uid (``[tool.tooldeck.runner] uid``, 65534 by default) while the
user still finds what it wrote in the workdir owned by themselves. Three kernel mechanisms, all
set up by the deck (root) and none needing a helper binary:

- **The sandbox's user namespace** (:attr:`IdMapper.userns_fd`), created once with ``uid_map``
  ``<uid> <uid> 1`` (root may write any map) and handed to bubblewrap as ``--userns FD --uid
  <uid> --gid <gid>``. bubblewrap joins it, switches to the uid and sets up the sandbox with the
  capabilities it holds *in that namespace only*; on the host the tool's processes have uid and
  gid ``<uid>``/``<gid>`` and no supplementary group (the spawner thread drops its own with
  a raw ``setgroups(0)``, which leaves the deck's other threads alone).
- **Id-mapped mounts** (``open_tree(OPEN_TREE_CLONE)`` + ``mount_setattr(MOUNT_ATTR_IDMAP)``)
  of the workdir and of the interpreter's import paths, through a second namespace
  (:attr:`IdMapper.idmap_fd`, ``uid_map`` ``<deck uid> <uid> 1``): on these mounts a file the
  deck's uid owns appears owned by the sandbox's uid, and what the sandbox creates is written to
  disk as the deck's uid and gid. Files of other owners appear as the overflow uid ("nobody")
  and are reachable by their "other" permission bits only.
- **A private mount namespace for the spawner thread.** bubblewrap 0.8 cannot bind a detached
  mount (``--bind-fd`` resolves the descriptor to a path), so the id-mapped trees are attached
  under a small tmpfs (``mode=0711``) mounted on an empty host directory
  (:data:`STAGE_DIRS`) *in the mount namespace of the one thread that starts every sandbox*
  (``unshare(CLONE_NEWNS)`` affects the calling thread only). bubblewrap, forked from that
  thread, binds them from there (as the sandbox's uid: short paths it may traverse, unlike
  ``/root`` or a ``0700`` pytest directory). The host never sees them: there the directory
  stays empty, no other process can walk into the workdir through an id-mapped view, and the
  mounts vanish with the deck's process.

Where a step is impossible (a deck that is not root, a kernel without these syscalls, no right
to make a mount namespace, a file system that refuses id-mapped mounts: overlayfs, NFS, sysfs on
6.18, where ext4, xfs, btrfs and tmpfs accept them), the caller falls back to the previous
mapping (uid 0 inside as the deck's uid) and reports why in ``metadata["limits"]["uid_fallback"]``.

The mount functions here must run on the spawner thread (:class:`tooldeck_runner._sandbox`'s
``_Spawner``): they act on that thread's mount namespace.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import itertools
import os
import platform
import stat
import subprocess
import sys
import threading

import attrs

__all__ = ["IdMapper", "STAGE_DIRS", "prepare", "probe", "unavailable_reason", "unstage"]

# asm-generic numbers, the same on x86-64 and arm64 (added after the tables were unified).
_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_MOUNT_SETATTR = 442
_ARCHES = ("x86_64", "aarch64")
_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159}

_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = os.O_CLOEXEC
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_AT_RECURSIVE = 0x8000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
_MOUNT_ATTR_NODEV = 0x4
_MOUNT_ATTR_IDMAP = 0x00100000
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x2, 0x4, 0x8
_MS_REC, _MS_SLAVE = 0x4000, 0x80000
_MNT_DETACH = 0x2

#: Empty host directories, one of which the private staging tmpfs is mounted on (the first that
#: is a real, root-owned directory or can be made one).
STAGE_DIRS = ("/run/tooldeck-runner", "/tmp/.tooldeck-runner")

# Run in a short-lived child: unshare a user namespace, report, wait until its maps are written
# and its namespace file opened by the parent. A child because a multithreaded process (the
# deck) may not unshare CLONE_NEWUSER itself.
_USERNS_HELPER = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    f"rc = libc.unshare({_CLONE_NEWUSER})\n"
    "os.write(1, str(0 if rc == 0 else ctypes.get_errno()).encode() + b'\\n')\n"
    "os.read(0, 1)\n"
)


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(rc: int, what: str) -> int:
    if rc < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return rc


def unavailable_reason() -> str:
    """Why this process cannot give sandboxes their own uid, or ``""`` when it might."""
    if platform.machine() not in _ARCHES:
        return f"no mount syscall table for architecture {platform.machine()!r}"
    if os.geteuid() != 0:
        return (
            f"the deck is not root (uid {os.geteuid()}): the sandbox runs as the deck's own, "
            "unprivileged uid"
        )
    return ""


def _make_userns(uid_map: str, gid_map: str) -> int:
    """A new user namespace with these maps; returns an O_CLOEXEC descriptor of it."""
    helper = subprocess.Popen(
        [sys.executable, "-S", "-I", "-c", _USERNS_HELPER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={},
    )
    assert helper.stdin is not None and helper.stdout is not None
    try:
        status = helper.stdout.readline().strip()
        if status != b"0":
            code = int(status) if status.isdigit() else errno.EIO
            raise OSError(code, f"unshare(CLONE_NEWUSER): {os.strerror(code)}")
        proc = f"/proc/{helper.pid}"
        # "deny" first: setgroups stays impossible inside, whatever capabilities are held there.
        for name, value in (("setgroups", "deny"), ("uid_map", uid_map), ("gid_map", gid_map)):
            with open(f"{proc}/{name}", "w") as fh:
                fh.write(value)
        return os.open(f"{proc}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        helper.stdin.close()
        helper.wait()
        helper.stdout.close()


@attrs.define(eq=False)
class IdMapper:
    """The namespaces and staging area of one (sandbox uid, gid) for this deck's process."""

    uid: int
    gid: int
    #: The sandbox's user namespace (``uid_map``: ``uid uid 1``), for ``bwrap --userns``.
    userns_fd: int
    #: The mounts' id map (``uid_map``: ``<deck uid> uid 1``), for ``MOUNT_ATTR_IDMAP``.
    idmap_fd: int
    def stage(self, path: str, *, read_only: bool, idmap: bool = True) -> str:
        """Attach an (id-mapped) recursive clone of ``path`` in the staging area; its path.

        ``OSError`` when the kernel or the file system refuses (``EINVAL``: a file system of the
        tree does not support id-mapped mounts).
        """
        stage = _enter_stage()
        libc = _libc()
        fd = _check(
            libc.syscall(
                ctypes.c_long(_SYS_OPEN_TREE),
                ctypes.c_int(_AT_FDCWD),
                ctypes.c_char_p(path.encode()),
                ctypes.c_uint(_OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE),
            ),
            f"open_tree({path})",
        )
        try:
            flags = _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV
            flags |= _MOUNT_ATTR_RDONLY if read_only else 0
            flags |= _MOUNT_ATTR_IDMAP if idmap else 0
            attr = _MountAttr(flags, 0, 0, self.idmap_fd if idmap else 0)
            _check(
                libc.syscall(
                    ctypes.c_long(_SYS_MOUNT_SETATTR),
                    ctypes.c_int(fd),
                    ctypes.c_char_p(b""),
                    ctypes.c_uint(_AT_EMPTY_PATH | _AT_RECURSIVE),
                    ctypes.byref(attr),
                    ctypes.c_size_t(ctypes.sizeof(attr)),
                ),
                f"mount_setattr({path}, {'idmap' if idmap else 'nosuid'})",
            )
            target = os.path.join(stage, str(next(_counter)))
            os.mkdir(target, 0o711)
            try:
                _check(
                    libc.syscall(
                        ctypes.c_long(_SYS_MOVE_MOUNT),
                        ctypes.c_int(fd),
                        ctypes.c_char_p(b""),
                        ctypes.c_int(_AT_FDCWD),
                        ctypes.c_char_p(target.encode()),
                        ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH),
                    ),
                    f"move_mount({path})",
                )
            except OSError:
                os.rmdir(target)
                raise
        finally:
            os.close(fd)
        return target


@attrs.define
class _StageState:
    stage: str = ""
    thread: int | None = None
    #: Why the staging area could not be made (then every stage() raises it again).
    error: OSError | None = None


_state = _StageState()
_counter = itertools.count()


def _enter_stage() -> str:
    """On first use: the calling (spawner) thread's private mount namespace and staging tmpfs.

    Process-wide, whatever the uid: one thread starts every sandbox, and a second namespace or
    tmpfs would hide what the first one staged.
    """
    if _state.thread is not None:
        if _state.thread != threading.get_ident():
            raise RuntimeError("id-mapped mounts must be staged on the spawner thread")
        if _state.error is not None:
            raise _state.error
        return _state.stage
    _state.thread = threading.get_ident()
    try:
        return _make_stage()
    except OSError as exc:
        _state.error = exc
        raise


def _make_stage() -> str:
    libc = _libc()
    # The raw syscall, not os.setgroups: glibc's wrapper changes every thread of the deck, the
    # kernel call only this one, whose children (the sandboxes) then carry no supplementary
    # group (root's 0 would count on the host's files). Done here rather than per child with
    # Popen(extra_groups=[]), which costs a full fork() of the deck instead of a vfork().
    _check(
        libc.syscall(ctypes.c_long(_SYS_SETGROUPS[platform.machine()]), ctypes.c_size_t(0), None),
        "setgroups(0) on the spawner thread",
    )
    stage = _stage_dir()
    # This thread only (CLONE_NEWNS implies CLONE_FS, which a thread may unshare); slave, so
    # that host mounts still show here and nothing made here shows on the host.
    _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_SLAVE, None), "mount --make-rslave /")
    _check(
        libc.mount(
            b"tooldeck-stage",
            stage.encode(),
            b"tmpfs",
            _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
            b"mode=0711,size=1m",
        ),
        f"mount tmpfs on {stage}",
    )
    _state.stage = stage
    return stage


def unstage(target: str) -> None:
    """Detach a staged tree (sandboxes that bound it keep their own copy); spawner thread."""
    if _state.thread != threading.get_ident() or not target.startswith(_state.stage + "/"):
        return
    _libc().umount2(target.encode(), _MNT_DETACH)
    try:
        os.rmdir(target)
    except OSError:
        pass


def _stage_dir() -> str:
    failures = []
    for path in STAGE_DIRS:
        try:
            os.makedirs(path, mode=0o755, exist_ok=True)
            st = os.lstat(path)
        except OSError as exc:
            failures.append(f"{path}: {exc.strerror}")
            continue
        # A symlink or someone else's directory (in /tmp) could make the tmpfs cover another
        # path of this thread's view: only a root-owned real directory is used.
        if stat.S_ISDIR(st.st_mode) and st.st_uid == 0:
            return path
        failures.append(f"{path}: not a root-owned directory")
    raise OSError(
        errno.ENOTDIR, "no staging directory for id-mapped mounts: " + "; ".join(failures)
    )


_mappers: dict[tuple[int, int], IdMapper] = {}
_mappers_lock = threading.Lock()


def prepare(uid: int, gid: int) -> IdMapper:
    """The (process-wide, cached) mapper for a sandbox uid and gid; ``OSError`` when impossible.

    Creates both user namespaces; the mount namespace and staging area are made on first
    :meth:`IdMapper.stage`. Blocking (two short helper processes): call it from a thread.
    """
    why = unavailable_reason()
    if why:
        raise OSError(errno.EPERM, why)
    with _mappers_lock:
        mapper = _mappers.get((uid, gid))
        if mapper is not None:
            return mapper
        userns = _make_userns(f"{uid} {uid} 1", f"{gid} {gid} 1")
        try:
            idmap = _make_userns(f"{os.getuid()} {uid} 1", f"{os.getgid()} {gid} 1")
        except BaseException:
            os.close(userns)
            raise
        mapper = IdMapper(uid=uid, gid=gid, userns_fd=userns, idmap_fd=idmap)
        _mappers[(uid, gid)] = mapper
        return mapper


def probe(path: str) -> str:
    """``""`` when sandboxes in ``path`` can get their own uid here, else why not.

    Meant for a fresh, single-threaded process (tests, diagnostics): it stages a clone of
    ``path`` in the calling thread's private mount namespace, exactly as the spawner thread
    would, then detaches it.
    """
    try:
        mapper = prepare(65534, 65534)
        unstage(mapper.stage(path, read_only=True))
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""

