"""Opening paths so that they cannot leave the allowed roots.

Defence in depth: the policy plugin checks paths before a call, and the tools check again here,
at the moment of opening, where a check by string would race with a symlink swapped in between.

Two phases:

1. :func:`locate` is lexical and does no I/O on the target: it refuses NUL bytes, ``/proc``,
   and paths outside every root (absolute ones, or ``..`` chains that climb above it).
2. :func:`open_beneath` / :func:`open_parent` open relative to a directory fd of the root, either
   with ``openat2(2)`` and ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`` (the kernel resolves and
   refuses escapes atomically) or, where the kernel lacks it or refuses for a reason the walk can
   decide better (an absolute symlink that stays inside the root), by walking the path one
   component at a time with ``O_NOFOLLOW`` and resolving symlinks ourselves. Containment is by
   components on a stack of directory fds, never by string prefix.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import os
import stat
import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs

from tooldeck_hookspecs import ErrorCode, ToolFailure

__all__ = [
    "MODE",
    "STATS",
    "Target",
    "clip",
    "locate",
    "open_beneath",
    "open_parent",
    "openat2_available",
]

#: ``"auto"`` uses openat2 where the kernel has it; ``"walk"`` forces the component walk
#: (tests use it to cover the fallback); ``"openat2"`` never falls back for ENOSYS (tests).
MODE: Literal["auto", "openat2", "walk"] = "auto"
#: How many opens each strategy served, and why openat2 handed over to the walk.
STATS: collections.Counter[str] = collections.Counter()

_SYS_OPENAT2 = 437  # the same number on every Linux architecture since 5.6 (asm-generic table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_MAX_SYMLINKS = 40  # the kernel's own limit (MAXSYMLINKS)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_PATH = getattr(os, "O_PATH", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC
#: Mode ``create_dirs`` creates folders with (the umask applies on top): never world-writable.
NEW_DIR_MODE = 0o775

_SUGGESTION = (
    "Use a path inside the working directory, relative to it (for example 'notes/todo.txt'); "
    "'..', absolute paths elsewhere, /proc and symlinks that point outside are refused."
)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_syscall: Any = None
if sys.platform.startswith("linux"):
    try:
        _syscall = ctypes.CDLL(None, use_errno=True).syscall
        _syscall.restype = ctypes.c_long
        _syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p,
                             ctypes.POINTER(_OpenHow), ctypes.c_size_t]
    except (OSError, AttributeError):
        _syscall = None

# None: not probed yet. Turned off for good on ENOSYS/E2BIG (old kernel) or EPERM (seccomp).
_openat2_ok: bool | None = None


def _openat2(dirfd: int, path: str, flags: int, mode: int = 0) -> int:
    how = _OpenHow(flags=flags, mode=mode if flags & os.O_CREAT else 0,
                   resolve=_RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    fd = _syscall(_SYS_OPENAT2, dirfd, os.fsencode(path), ctypes.byref(how),
                  ctypes.sizeof(how))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def openat2_available() -> bool:
    """True when this kernel lets us call openat2(2) (probed once)."""
    global _openat2_ok
    if _openat2_ok is None:
        if _syscall is None:
            _openat2_ok = False
        else:
            try:
                os.close(_openat2(-100, ".", _DIR_FLAGS))  # -100 is AT_FDCWD
                _openat2_ok = True
            except OSError:
                _openat2_ok = False
    return _openat2_ok


#: Echoed values longer than this are cut in messages (a 10 MB path must not make a 10 MB error).
CLIP_CHARS = 200


def clip(value: Any, limit: int = CLIP_CHARS) -> str:
    """``value`` as text, cut to ``limit`` characters with a ``…[+N chars]`` marker.

    Every message that echoes something the model sent goes through this, so the size of an
    error stays bounded whatever the size of the argument.
    """
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[+{len(text) - limit} chars]"


def _refuse(path: Any, why: str) -> ToolFailure:
    return ToolFailure(ErrorCode.PATH_NOT_ALLOWED, f"path {clip(path)!r} is not allowed: {why}",
                       suggestion=_SUGGESTION)


#: Called as ``guard(dirfd, name)`` before ``create_dirs`` makes directory ``name`` in ``dirfd``;
#: raises (``ToolFailure``) to refuse it. file_write uses it so that no protected folder
#: (``.git``, ``.vscode``...) is ever created on the way to a file.
MkdirGuard = Callable[[int, str], None]


@attrs.frozen
class Target:
    """A path placed under one allowed root, before anything was opened."""

    #: The given path, reported back to the model as-is.
    display: str
    #: The real path of the allowed root it lies under.
    root: str
    #: Components below the root, lexically normalised (no '', '.' or '..').
    rel: tuple[str, ...]


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _roots(workdir: str, allowed: Sequence[str]) -> list[tuple[list[str], str]]:
    """(components as written, real path) for every root, longest first."""
    out: list[tuple[list[str], str]] = []
    for root in allowed or (workdir,):
        root = root.replace("{workdir}", workdir)  # the core expands it; be safe when called raw
        if not os.path.isabs(root):
            root = os.path.join(workdir, root)
        real = os.path.realpath(root)
        for form in {os.path.normpath(root), real}:
            out.append((_parts(form), real))
    out.sort(key=lambda item: len(item[0]), reverse=True)
    return out


def locate(path: Any, workdir: str, allowed_paths: Sequence[str] = ()) -> Target:
    """Place ``path`` under an allowed root, lexically (no I/O on the target).

    Relative paths are taken from ``workdir``. Raises ``ToolFailure(PATH_NOT_ALLOWED)`` for NUL
    bytes, ``/proc`` and paths that (``..`` taken lexically) are outside every root.
    """
    if not isinstance(path, str):
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS,
                          f"path must be a string, got {clip(type(path).__name__)}")
    if "\x00" in path:
        raise _refuse(path, "it contains a NUL byte")
    if not workdir or not os.path.isabs(workdir):
        raise ToolFailure(ErrorCode.EXECUTION_ERROR, "the session has no absolute working "
                          "directory, so relative paths cannot be resolved")
    absolute = path if path.startswith("/") else os.path.join(workdir, path or ".")
    # Lexical normalisation only picks the root and refuses obvious escapes early; the open
    # resolves symlinks beneath the root, so a 'link/..' that normalises differently here can
    # still not leave it.
    normal = os.path.normpath(absolute)
    parts = _parts(normal)
    # /proc holds magic links (fd/N, root, cwd, exe) that jump anywhere and files that leak the
    # process (environ, cmdline, mem): never a workspace file, whatever the roots say.
    if parts[:1] == ["proc"] or _parts(absolute)[:1] == ["proc"]:
        raise _refuse(path, "/proc is never accessible")
    for root_parts, real in _roots(workdir, allowed_paths):
        if parts[: len(root_parts)] == root_parts:
            return Target(display=path, root=real, rel=tuple(parts[len(root_parts) :]))
    raise _refuse(path, "it is outside the allowed directories")


def _readlink_or_raise(name: str, dirfd: int, original: OSError) -> str:
    try:
        return os.readlink(name, dir_fd=dirfd)
    except OSError:
        raise original from None


class _Walk:
    """Resolve components one at a time on a stack of directory fds (the fallback)."""

    def __init__(self, target: Target, root_fd: int, guard: MkdirGuard | None = None) -> None:
        self.target = target
        self.guard = guard
        self.root_parts = _parts(target.root)
        self.stack = [os.dup(root_fd)]
        self.names: list[str] = []
        self.queue = collections.deque(target.rel)
        self.links = 0

    def close(self) -> None:
        for fd in self.stack:
            os.close(fd)
        self.stack.clear()

    def _splice(self, link: str) -> None:
        self.links += 1
        if self.links > _MAX_SYMLINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), self.target.display)
        if link.startswith("/"):
            parts = _parts(link)
            if parts[: len(self.root_parts)] != self.root_parts:
                raise _refuse(self.target.display, "a symlink on the way points outside the "
                              "allowed directory")
            while len(self.stack) > 1:
                os.close(self.stack.pop())
            self.names.clear()
            self.queue.extendleft(reversed(parts[len(self.root_parts) :]))
        else:
            self.queue.extendleft(reversed(link.split("/")))

    def _enter(self, name: str, create: bool) -> bool:
        """Descend into directory ``name``; False when it was a symlink (spliced instead)."""
        while True:
            try:
                fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=self.stack[-1])
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    self._splice(_readlink_or_raise(name, self.stack[-1], exc))
                    return False
                if exc.errno == errno.ENOENT and create:
                    if self.guard is not None:
                        self.guard(self.stack[-1], name)
                    try:
                        # Never world-writable, even under umask 0 (see _atomic.NEW_FILE_MODE).
                        os.mkdir(name, NEW_DIR_MODE, dir_fd=self.stack[-1])
                    except FileExistsError:
                        pass  # lost a race with another creator: open what is there now
                    continue
                raise
            self.stack.append(fd)
            self.names.append(name)
            if (self.root_parts + self.names)[:1] == ["proc"]:
                raise _refuse(self.target.display, "/proc is never accessible")
            return True

    def _next(self) -> str | None:
        """The next real component, resolving '..' against the stack; None when done."""
        while self.queue:
            name = self.queue.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                if len(self.stack) == 1:
                    raise _refuse(self.target.display, "it resolves above the allowed directory")
                os.close(self.stack.pop())
                self.names.pop()
                continue
            return name
        return None

    def open(self, flags: int, mode: int) -> int:
        while True:
            name = self._next()
            if name is None:
                return os.open(".", flags & ~(os.O_CREAT | os.O_EXCL), dir_fd=self.stack[-1])
            if any(p not in ("", ".") for p in self.queue):
                self._enter(name, create=False)
                continue
            try:
                fd = os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=self.stack[-1])
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                self._splice(_readlink_or_raise(name, self.stack[-1], exc))
                continue
            if flags & _O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode):
                # O_PATH | O_NOFOLLOW opens a symlink itself instead of failing with ELOOP.
                os.close(fd)
                self._splice(os.readlink(name, dir_fd=self.stack[-1]))
                continue
            return fd

    def parent(self, create_dirs: bool) -> tuple[int, str]:
        while True:
            name = self._next()
            if name is None:
                raise ToolFailure(ErrorCode.EXECUTION_ERROR,
                                  f"path {clip(self.target.display)!r} names a directory, not a "
                                  "file", suggestion="Give the path of a file inside it, e.g. "
                                  "'notes/todo.txt'.")
            if any(p not in ("", ".") for p in self.queue):
                self._enter(name, create=create_dirs)
                continue
            try:
                st = os.stat(name, dir_fd=self.stack[-1], follow_symlinks=False)
            except FileNotFoundError:
                return os.dup(self.stack[-1]), name
            if stat.S_ISLNK(st.st_mode):
                self._splice(os.readlink(name, dir_fd=self.stack[-1]))
                continue
            return os.dup(self.stack[-1]), name


def _use_openat2() -> bool:
    if MODE == "walk":
        return False
    return MODE == "openat2" or openat2_available()


# openat2 errors the walk decides better: EXDEV = would leave the root (or an absolute symlink,
# which RESOLVE_BENEATH refuses even when it stays inside), ELOOP = a magic link or a symlink
# loop, EAGAIN = a concurrent rename. ENOSYS/E2BIG/EPERM = no usable openat2 at all.
_WALK_DECIDES = {errno.EXDEV, errno.ELOOP, errno.EAGAIN}
_NO_OPENAT2 = {errno.ENOSYS, errno.E2BIG, errno.EPERM}


def _try_openat2(root_fd: int, rel: str, flags: int, mode: int = 0) -> int | None:
    """An fd, or None when the walk must decide. Raises genuine errors (ENOENT, EACCES...)."""
    global _openat2_ok
    try:
        fd = _openat2(root_fd, rel, flags, mode)
    except OSError as exc:
        if exc.errno in _WALK_DECIDES:
            STATS[f"openat2->walk:{errno.errorcode.get(exc.errno or 0, exc.errno)}"] += 1
            return None
        if exc.errno in _NO_OPENAT2:
            STATS[f"openat2->walk:{errno.errorcode.get(exc.errno or 0, exc.errno)}"] += 1
            if MODE != "openat2":
                _openat2_ok = False
            return None
        raise
    STATS["openat2"] += 1
    return fd


def open_beneath(target: Target, flags: int, mode: int = 0o666) -> int:
    """Open ``target`` with ``flags``; the file or directory it resolves to is inside the root.

    Raises ``ToolFailure(PATH_NOT_ALLOWED)`` if resolution would leave the root, ``OSError`` for
    ordinary failures (missing file, permission).
    """
    flags |= _O_CLOEXEC
    root_fd = os.open(target.root, _DIR_FLAGS)
    try:
        if _use_openat2():
            fd = _try_openat2(root_fd, "/".join(target.rel) or ".", flags, mode)
            if fd is not None:
                return fd
        STATS["walk"] += 1
        walk = _Walk(target, root_fd)
        try:
            return walk.open(flags, mode)
        finally:
            walk.close()
    finally:
        os.close(root_fd)


def open_parent(target: Target, *, create_dirs: bool = False,
                guard: MkdirGuard | None = None) -> tuple[int, str]:
    """The directory fd and final name to create or replace ``target`` in.

    The name is not a symlink (a symlink at the end is followed, and must stay inside the root),
    so a rename onto it replaces a file inside the root. With ``create_dirs`` missing parent
    directories are created, each inside the one before, after ``guard(dirfd, name)`` (if
    given) agreed to each.
    """
    rel = target.rel
    if not rel or rel[-1] == "..":
        raise ToolFailure(ErrorCode.EXECUTION_ERROR,
                          f"path {clip(target.display)!r} names a directory, not a file",
                          suggestion="Give the path of a file inside it, e.g. 'notes/todo.txt'.")
    root_fd = os.open(target.root, _DIR_FLAGS)
    try:
        if _use_openat2():
            try:
                parent = _try_openat2(root_fd, "/".join(rel[:-1]) or ".", _DIR_FLAGS)
            except FileNotFoundError:
                if not create_dirs:
                    raise
                parent = None
            if parent is not None:
                try:
                    st = os.stat(rel[-1], dir_fd=parent, follow_symlinks=False)
                except FileNotFoundError:
                    return parent, rel[-1]
                except BaseException:
                    os.close(parent)
                    raise
                if not stat.S_ISLNK(st.st_mode):
                    return parent, rel[-1]
                os.close(parent)  # a symlink at the end: the walk resolves it
        STATS["walk"] += 1
        walk = _Walk(target, root_fd, guard)
        try:
            return walk.parent(create_dirs)
        finally:
            walk.close()
    finally:
        os.close(root_fd)
