"""A seccomp filter for sandboxed calls, assembled here as classic BPF (no libseccomp needed).

Loaded by file path inside sandbox workers (like ``_wire``), so it imports nothing but the
standard library. The worker installs the filter on itself, for all its threads, after it read
its request and before it imports the tool; every process the tool starts inherits it and cannot
remove it.

What it refuses (``EPERM`` unless said otherwise):

- a set-user-ID or set-group-ID bit in a file mode: ``chmod``, ``fchmod``, ``fchmodat``,
  ``fchmodat2`` with ``S_ISUID``/``S_ISGID`` in the mode; ``open``/``openat``/``creat`` creating a
  file (``O_CREAT`` or ``O_TMPFILE``) with such a mode; ``mkdir``/``mkdirat``/``mknod``/``mknodat``
  with such a mode. What the sandbox writes in the workdir lands on disk as the deck's uid (root,
  often; through an id-mapped mount or as uid 0 inside, see the README): a setuid file it left
  there would be a root-owned setuid program on the host.
- ``openat2`` (``ENOSYS``): its mode sits in a struct a filter cannot read; libc and Python fall
  back to ``openat``.
- ``io_uring_setup`` (``ENOSYS``): io_uring's own open/socket/connect operations would bypass
  this filter entirely.
- ``add_key``, ``request_key``, ``keyctl``: kernel keyrings are not isolated by the sandbox's
  namespaces. The deck's session keyring is inherited (a tool could read the deck's keys), and
  sandboxes sharing the deck's user namespace and uid (see ``_idmap``) would share a user
  keyring, a channel between sessions. Refused as container runtimes' default profiles do.
- without network: ``socket(AF_UNIX, ...)`` and ``socketpair(AF_UNIX, <not SOCK_STREAM>)``
  (``EACCES``). The network namespace already isolates IP and abstract Unix sockets; a Unix
  socket *file* in a mounted folder is reachable through the file system, so creating Unix
  sockets is what is refused (``connect`` cannot be filtered on its address). Stream socket pairs
  stay allowed (trio's and asyncio's wake-up channels use them); they are connected to each other
  and cannot be pointed anywhere else.
- ``fallocate`` (``EOPNOTSUPP``, what a file system without it answers): it reserves a
  file's blocks at once without writing them, so one call filled 10 GiB of the host's disk in
  70 ms, far past the workdir's write budget, which is watched by polling (``_sandbox``). Without
  it, ``posix_fallocate`` (libc) falls back to writing the blocks, at the pace of writes that the
  call's memory limit already throttles through the page cache.
- ``setxattr``, ``lsetxattr``, ``fsetxattr``, ``setxattrat`` (``EOPNOTSUPP``, what a file system
  without extended attributes answers: ``cp -a`` and ``shutil.copystat`` skip them quietly). A
  ``security.capability`` attribute is a file capability: set from a nested user namespace on the
  id-mapped workdir, the kernel stores it as valid on the host, and the copied interpreter it
  was set on gave root (``cap_setuid``) to any local user. A filter cannot read the attribute's
  name (a pointer), so every extended attribute is refused.
- new user namespaces: ``unshare`` and ``clone`` with ``CLONE_NEWUSER`` (the way to uid 0 and
  full capabilities over the files a call can reach, the step before the file capability
  above), and ``clone3`` (``ENOSYS``: its flags sit in a struct; libc falls back to ``clone``).
- any other architecture or ABI (the x32 ABI on x86-64, 32-bit compat calls) gets ``ENOSYS``
  for every call: their syscall numbers differ and would slip past the rules.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

__all__ = ["build_filter", "install", "supported"]

# BPF opcodes.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

_S_SETID = 0o6000
_O_CREAT = 0o100
_O_TMPFILE_BIT = 0o20000000  # __O_TMPFILE, the same on x86-64 and arm64
_CLONE_NEWUSER = 0x10000000
_AF_UNIX = 1
_SOCK_STREAM = 1
_SOCK_TYPE_MASK = 0xF

_OFF_NR = 0
_OFF_ARCH = 4


def _arg(i: int) -> int:
    # The low 32 bits of argument i (little-endian machines only, which both tables below are).
    return 16 + 8 * i


# Per architecture: audit arch, seccomp syscall number, the x32 bit (or 0), and the calls.
# Mode rules: (nr, mode argument, flags argument or None when the call always creates).
_ARCHES = {
    "x86_64": {
        "audit": 0xC000003E,
        "seccomp": 317,
        "x32": 0x40000000,
        "mode": [
            (90, 1, None),  # chmod(path, mode)
            (91, 1, None),  # fchmod(fd, mode)
            (268, 2, None),  # fchmodat(dirfd, path, mode)
            (452, 2, None),  # fchmodat2(dirfd, path, mode, flags)
            (2, 2, 1),  # open(path, flags, mode)
            (257, 3, 2),  # openat(dirfd, path, flags, mode)
            (85, 1, None),  # creat(path, mode)
            (83, 1, None),  # mkdir(path, mode)
            (258, 2, None),  # mkdirat(dirfd, path, mode)
            (133, 1, None),  # mknod(path, mode, dev)
            (259, 2, None),  # mknodat(dirfd, path, mode, dev)
        ],
        "openat2": 437,
        "io_uring_setup": 425,
        "fallocate": 285,
        "keys": (248, 249, 250),  # add_key, request_key, keyctl
        "socket": 41,
        "socketpair": 53,
        "xattr": (188, 189, 190, 463),  # setxattr, lsetxattr, fsetxattr, setxattrat
        "newuser": (272, 56),  # unshare(flags), clone(flags, ...)
        "clone3": 435,
    },
    "aarch64": {
        "audit": 0xC00000B7,
        "seccomp": 277,
        "x32": 0,
        "mode": [
            (52, 1, None),  # fchmod
            (53, 2, None),  # fchmodat
            (452, 2, None),  # fchmodat2
            (56, 3, 2),  # openat
            (34, 2, None),  # mkdirat
            (33, 2, None),  # mknodat
        ],
        "openat2": 437,
        "io_uring_setup": 425,
        "fallocate": 47,
        "keys": (217, 218, 219),  # add_key, request_key, keyctl
        "socket": 198,
        "socketpair": 199,
        "xattr": (5, 6, 7, 463),  # setxattr, lsetxattr, fsetxattr, setxattrat
        "newuser": (97, 220),  # unshare(flags), clone(flags, ...)
        "clone3": 435,
    },
}


def supported() -> bool:
    """True when this machine's architecture has a rule table."""
    return platform.machine() in _ARCHES


class _Program:
    """A tiny assembler: instructions may jump to labels (resolved in :meth:`assemble`)."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def op(self, code: int, k: int, jt: object = 0, jf: object = 0) -> None:
        self.code.append((code, jt, jf, k))

    def assemble(self) -> bytes:
        out = []
        for i, (code, jt, jf, k) in enumerate(self.code):

            def offset(target: object, i: int = i) -> int:
                if isinstance(target, int):
                    return target
                delta = self.labels[str(target)] - (i + 1)
                if not 0 <= delta <= 255:
                    raise ValueError(f"jump to {target} out of range")
                return delta

            out.append(struct.pack("=HBBI", code, offset(jt), offset(jf), k))
        return b"".join(out)


def build_filter(
    *, network: bool, machine: str | None = None, new_userns: bool = False
) -> bytes:
    """The filter program (``struct sock_filter`` array) for this machine's architecture.

    ``new_userns``: leave new user namespaces (and ``clone3``) allowed, for the zygote, which
    makes one per call; each call's process then stacks :func:`build_userns_filter`.
    """
    table = _ARCHES[machine or platform.machine()]
    p = _Program()
    p.op(_LD_W_ABS, _OFF_ARCH)
    p.op(_JEQ_K, int(table["audit"]), 0, "enosys")  # type: ignore[call-overload]
    p.op(_LD_W_ABS, _OFF_NR)
    if table["x32"]:
        p.op(_JGE_K, int(table["x32"]), "enosys", 0)  # type: ignore[call-overload]
    p.op(_JEQ_K, int(table["openat2"]), "enosys", 0)  # type: ignore[call-overload]
    p.op(_JEQ_K, int(table["io_uring_setup"]), "enosys", 0)  # type: ignore[call-overload]
    p.op(_JEQ_K, int(table["fallocate"]), "eopnotsupp", 0)  # type: ignore[call-overload]
    for nr in table["keys"]:  # type: ignore[attr-defined]
        p.op(_JEQ_K, nr, "eperm", 0)
    for nr in table["xattr"]:  # type: ignore[attr-defined]
        p.op(_JEQ_K, nr, "eopnotsupp", 0)
    if not new_userns:
        p.op(_JEQ_K, int(table["clone3"]), "enosys", 0)  # type: ignore[call-overload]
        for nr in table["newuser"]:  # type: ignore[attr-defined]
            p.op(_JEQ_K, nr, "newuser", 0)
    rules = list(table["mode"])  # type: ignore[call-overload]
    for index, (nr, _, _) in enumerate(rules):
        p.op(_JEQ_K, nr, f"mode{index}", 0)
    if not network:
        p.op(_JEQ_K, int(table["socket"]), "socket", 0)  # type: ignore[call-overload]
        p.op(_JEQ_K, int(table["socketpair"]), "socketpair", 0)  # type: ignore[call-overload]
    p.op(_RET_K, _RET_ALLOW)
    for index, (_, mode_arg, flags_arg) in enumerate(rules):
        p.label(f"mode{index}")
        if flags_arg is not None:
            # Only a call that creates a file uses its mode.
            p.op(_LD_W_ABS, _arg(flags_arg))
            p.op(_JSET_K, _O_CREAT, f"check{index}", 0)
            p.op(_JSET_K, _O_TMPFILE_BIT, f"check{index}", "allow")
            p.label(f"check{index}")
        p.op(_LD_W_ABS, _arg(mode_arg))
        p.op(_JSET_K, _S_SETID, "eperm", "allow")
    if not network:
        p.label("socket")
        p.op(_LD_W_ABS, _arg(0))
        p.op(_JEQ_K, _AF_UNIX, "eacces", "allow")
        p.label("socketpair")
        p.op(_LD_W_ABS, _arg(0))
        p.op(_JEQ_K, _AF_UNIX, 0, "allow")
        p.op(_LD_W_ABS, _arg(1))
        # type & 0xf == SOCK_STREAM, without an ALU op: STREAM is 1, so test bit 0 and the rest.
        p.op(_JSET_K, _SOCK_TYPE_MASK & ~_SOCK_STREAM, "eacces", 0)
        p.op(_JSET_K, _SOCK_STREAM, "allow", "eacces")
        p.label("eacces")
        p.op(_RET_K, _RET_ERRNO | errno.EACCES)
    p.label("newuser")
    p.op(_LD_W_ABS, _arg(0))  # unshare's and clone's flags (the low 32 bits hold them all)
    p.op(_JSET_K, _CLONE_NEWUSER, "eperm", "allow")
    p.label("allow")
    p.op(_RET_K, _RET_ALLOW)
    p.label("eperm")
    p.op(_RET_K, _RET_ERRNO | errno.EPERM)
    p.label("enosys")
    p.op(_RET_K, _RET_ERRNO | errno.ENOSYS)
    p.label("eopnotsupp")
    p.op(_RET_K, _RET_ERRNO | errno.EOPNOTSUPP)
    return p.assemble()


def build_userns_filter(machine: str | None = None) -> bytes:
    """The rules :func:`build_filter` leaves out with ``new_userns``: no new user namespace
    (``unshare``/``clone`` with ``CLONE_NEWUSER``), no ``clone3``. Stacked by a zygote's call
    process once its own namespaces exist (filters add up: the strictest answer wins)."""
    table = _ARCHES[machine or platform.machine()]
    p = _Program()
    p.op(_LD_W_ABS, _OFF_ARCH)
    p.op(_JEQ_K, int(table["audit"]), 0, "enosys")  # type: ignore[call-overload]
    p.op(_LD_W_ABS, _OFF_NR)
    p.op(_JEQ_K, int(table["clone3"]), "enosys", 0)  # type: ignore[call-overload]
    for nr in table["newuser"]:  # type: ignore[attr-defined]
        p.op(_JEQ_K, nr, "newuser", 0)
    p.op(_RET_K, _RET_ALLOW)
    p.label("newuser")
    p.op(_LD_W_ABS, _arg(0))
    p.op(_JSET_K, _CLONE_NEWUSER, "eperm", 0)
    p.op(_RET_K, _RET_ALLOW)
    p.label("eperm")
    p.op(_RET_K, _RET_ERRNO | errno.EPERM)
    p.label("enosys")
    p.op(_RET_K, _RET_ERRNO | errno.ENOSYS)
    return p.assemble()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(*, network: bool, new_userns: bool = False) -> str:
    """Install the filter on every thread of this process; returns what was done.

    ``"on"`` when installed, else ``"unavailable: <reason>"`` (the caller reports it; the other
    layers of the sandbox still hold). ``new_userns``: see :func:`build_filter`.
    """
    machine = platform.machine()
    if machine not in _ARCHES:
        return f"unavailable: no rule table for architecture {machine!r}"
    return _load(build_filter(network=network, machine=machine, new_userns=new_userns))


def install_userns_guard() -> str:
    """Stack :func:`build_userns_filter` on this process (see :func:`install`)."""
    machine = platform.machine()
    if machine not in _ARCHES:
        return f"unavailable: no rule table for architecture {machine!r}"
    return _load(build_userns_filter(machine))


def _load(program: bytes) -> str:
    machine = platform.machine()
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    # no_new_privs: required to install a filter without CAP_SYS_ADMIN (bubblewrap sets it too);
    # it also makes setuid programs powerless for the rest of the call.
    if libc.prctl(38, 1, 0, 0, 0) != 0:
        return f"unavailable: PR_SET_NO_NEW_PRIVS failed ({os.strerror(ctypes.get_errno())})"
    libc.syscall.restype = ctypes.c_long
    tsync = 1  # SECCOMP_FILTER_FLAG_TSYNC: threads a preloaded module started get it as well
    rc = libc.syscall(
        ctypes.c_long(int(_ARCHES[machine]["seccomp"])),  # type: ignore[call-overload]
        ctypes.c_ulong(1),  # SECCOMP_SET_MODE_FILTER
        ctypes.c_ulong(tsync),
        ctypes.byref(fprog),
    )
    if rc != 0:
        return f"unavailable: seccomp(2) failed ({os.strerror(ctypes.get_errno())})"
    return "on"
