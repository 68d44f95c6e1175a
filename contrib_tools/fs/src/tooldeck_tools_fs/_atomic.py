"""Atomic replacement of a file in a directory fd, leaving no temp file behind.

The data goes to an anonymous ``O_TMPFILE`` inode in the target's directory (same file system,
so the rename is atomic), is fsynced, and only then gets a name: ``linkat`` straight onto the
target when it does not exist yet (nothing else ever appears), or onto a short-lived temp name
that is renamed over the target. A process killed while writing leaves nothing: the anonymous
inode dies with its last fd. Only a kill in the few microseconds between ``linkat`` and
``rename`` leaves a named temp file.

Where the file system has no ``O_TMPFILE`` (or ``linkat`` of it is impossible: no ``/proc`` and
no ``CAP_DAC_READ_SEARCH`` for ``AT_EMPTY_PATH``), the data goes to a named temp file created
``O_EXCL | O_NOFOLLOW`` instead; :data:`STATS` counts which way each write went.

Named temp files are ``.tooldeck-<pidns>-<pid>-<random>.tmp``. Every write first sweeps its
directory of stale ones: the writer's pid is dead in our pid namespace, or (another or unknown
namespace, where a pid means nothing here) the file is older than a minute and the pid is dead
here, or it is older than an hour (no write lasts that long: pid reused). ``list_dir`` hides the
pattern.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import os
import re
import secrets
import stat
import sys
import time
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["MODE", "NEW_FILE_MODE", "STATS", "TEMP_PATTERN", "is_temp_name", "kept_xattrs",
           "sweep", "write_replace"]

#: ``"auto"``: O_TMPFILE where the file system has it; ``"named"``: always a named temp file
#: (tests use it to cover the fallback).
MODE: Literal["auto", "named"] = "auto"
#: How writes were done (``tmpfile:link``, ``tmpfile:rename``, ``named``), why O_TMPFILE was
#: not used (``tmpfile->named:EOPNOTSUPP``...) and how many stale temp files were swept.
STATS: collections.Counter[str] = collections.Counter()

#: Any temp file of this pack, this version's or an older one's (``.tooldeck-<hex>.tmp``).
TEMP_PATTERN = re.compile(r"\.tooldeck-.*\.tmp\Z", re.S)
_OURS = re.compile(r"\.tooldeck-([0-9a-f]+)-([0-9]+)-[0-9a-f]+\.tmp\Z")

#: Mode a new file is created with (the umask applies on top). Not 0o666: a deck started under
#: umask 0 (some containers and service managers) would leave world-writable files, which any
#: local user could then change under the developer (code, configuration). Group-writable, as
#: a umask of 002 gives anyway.
NEW_FILE_MODE = 0o664

STALE_AFTER_S = 60.0
REUSED_AFTER_S = 3600.0

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_PATH = getattr(os, "O_PATH", 0)
_O_TMPFILE = getattr(os, "O_TMPFILE", 0)
_AT_EMPTY_PATH = 0x1000
# O_TMPFILE not usable here: old kernel (EISDIR/EINVAL), file system without it (EOPNOTSUPP).
_NO_TMPFILE = {errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOSYS}

_linkat: Any = None
if sys.platform.startswith("linux"):
    try:
        _linkat = ctypes.CDLL(None, use_errno=True).linkat
        _linkat.restype = ctypes.c_int
        _linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                            ctypes.c_int]
    except (OSError, AttributeError):
        _linkat = None


def _pid_namespace() -> str:
    try:
        return format(os.stat("/proc/self/ns/pid").st_ino, "x")
    except OSError:
        return "0"  # unknown: our own temp files are then swept by age only


_PIDNS = _pid_namespace()


def is_temp_name(name: str) -> bool:
    """True for the names of this pack's temp files (hidden by list_dir, never written)."""
    return TEMP_PATTERN.match(name) is not None


def _temp_name() -> str:
    return f".tooldeck-{_PIDNS}-{os.getpid()}-{secrets.token_hex(6)}.tmp"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: it exists
    return True


def _stale(name: str, age: float) -> bool:
    if age > REUSED_AFTER_S:
        return True
    ours = _OURS.match(name)
    if ours is None:
        return age > STALE_AFTER_S  # an older version's name, without a pid
    pidns, pid = ours.group(1), int(ours.group(2))
    dead = not _pid_alive(pid)
    if pidns == _PIDNS and _PIDNS != "0":
        return dead
    return dead and age > STALE_AFTER_S


def sweep(dirfd: int) -> int:
    """Remove stale temp files of this pack from directory ``dirfd``; how many were removed."""
    removed = 0
    now = time.time()
    with os.scandir(dirfd) as it:
        names = [e.name for e in it if e.name.startswith(".tooldeck-") and is_temp_name(e.name)]
    for name in names:
        try:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and _stale(name, now - st.st_mtime):
                os.unlink(name, dir_fd=dirfd)
                removed += 1
        except OSError:
            continue  # gone already (another writer swept it), or not ours to remove
    STATS["swept"] += removed
    return removed


#: The POSIX ACL of a file. A replaced file must keep it: with an ACL, the mode's group bits
#: hold the ACL's *mask*, so the mode alone would hand the owning group what the ACL gave to
#: named users only (and take it from them).
ACL_XATTR = "system.posix_acl_access"
#: Extended attributes a replaced file keeps besides its ACL: the user's own metadata. Never
#: ``security.*`` (``security.capability`` would give file capabilities to the new content, as
#: set-user-ID bits would) nor ``trusted.*``.
_KEPT_XATTR_PREFIXES = ("user.",)


def kept_xattrs(dirfd: int, name: str) -> dict[str, bytes]:
    """The extended attributes of file ``name`` in ``dirfd`` that its replacement keeps.

    Best effort: empty when the file system has none or they cannot be read here (no ``/proc``
    to reach them from an ``O_PATH`` fd, which never opens the file itself).
    """
    if not _O_PATH:
        return {}
    try:
        fd = os.open(name, _O_PATH | os.O_NOFOLLOW | _O_CLOEXEC, dir_fd=dirfd)
    except OSError:
        return {}
    kept: dict[str, bytes] = {}
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        path = f"/proc/self/fd/{fd}"
        try:
            names = os.listxattr(path)
        except OSError as exc:
            if exc.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP):
                STATS[f"xattrs:unreadable:{errno.errorcode.get(exc.errno or 0, exc.errno)}"] += 1
            return {}
        for attr in names:
            if attr == ACL_XATTR or attr.startswith(_KEPT_XATTR_PREFIXES):
                try:
                    kept[attr] = os.getxattr(path, attr)
                except OSError:
                    continue  # removed meanwhile
    finally:
        os.close(fd)
    return kept


def _set_xattrs(fd: int, xattrs: dict[str, bytes]) -> None:
    for attr, value in xattrs.items():
        try:
            os.setxattr(fd, attr, value)
        except OSError:
            if attr == ACL_XATTR:
                raise  # without it the file would be readable by others than before: refuse
            STATS["xattrs:not-kept"] += 1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _link_tmpfile(fd: int, dirfd: int, name: str) -> None:
    """Give the O_TMPFILE inode ``fd`` the name ``name`` in ``dirfd`` (EEXIST if taken)."""
    try:
        os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dirfd, follow_symlinks=True)
        return
    except FileExistsError:
        raise
    except OSError as exc:
        # No /proc (ENOENT) or a refused magic link: AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH.
        if _linkat is None:
            raise
        first = exc
    if _linkat(fd, b"", dirfd, os.fsencode(name), _AT_EMPTY_PATH) != 0:
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(err, os.strerror(err))
        raise first


class _NoTmpfile(Exception):
    """O_TMPFILE (or naming one) is impossible here: use a named temp file."""


def write_replace(dirfd: int, name: str, data: bytes, *, mode: int | None,
                  owner: tuple[int, int] | None, publish_check: Callable[[], None],
                  xattrs: dict[str, bytes] | None = None) -> bool:
    """Write ``data`` as ``name`` in ``dirfd`` atomically; True when ``name`` was created.

    :param mode: permission bits to give the file (the replaced file's), or None for a new file
        (:data:`NEW_FILE_MODE` minus the umask: never world-writable, even under umask 0).
        Set-user-ID and set-group-ID bits are never given.
    :param owner: (uid, gid) to keep when replacing, best effort (only root may give a file away).
    :param xattrs: extended attributes to give the file (the replaced file's, from
        :func:`kept_xattrs`); an ACL that cannot be given refuses the write.
    :param publish_check: called after the data is safe on disk and just before the file gets
        its name; raises to refuse (the protected-path check, as late as it can be, and the
        call's ``ToolContext.commit()``). Whatever it raises, no temp file is left.
    """
    sweep(dirfd)
    if mode is not None:
        mode &= ~(stat.S_ISUID | stat.S_ISGID) & 0o7777
    if MODE == "auto" and _O_TMPFILE:
        try:
            return _via_tmpfile(dirfd, name, data, mode, owner, xattrs or {}, publish_check)
        except _NoTmpfile:
            pass
    STATS["named"] += 1
    return _via_named(dirfd, name, data, mode, owner, xattrs or {}, publish_check)


def _finish(fd: int, data: bytes, mode: int | None, owner: tuple[int, int] | None,
            xattrs: dict[str, bytes]) -> None:
    _write_all(fd, data)
    if owner is not None:
        try:
            os.fchown(fd, *owner)
        except OSError:
            pass  # not root: the file becomes ours, as any editor's save would make it
    if mode is not None:
        os.fchmod(fd, mode)  # after fchown, which may clear bits; never S_ISUID/S_ISGID
    _set_xattrs(fd, xattrs)  # after fchmod, which would rewrite the ACL's mask
    os.fsync(fd)


def _via_tmpfile(dirfd: int, name: str, data: bytes, mode: int | None,
                 owner: tuple[int, int] | None, xattrs: dict[str, bytes],
                 publish_check: Callable[[], None]) -> bool:
    try:
        fd = os.open(".", _O_TMPFILE | os.O_WRONLY | _O_CLOEXEC, NEW_FILE_MODE, dir_fd=dirfd)
    except OSError as exc:
        if exc.errno not in _NO_TMPFILE:
            raise
        STATS[f"tmpfile->named:{errno.errorcode.get(exc.errno or 0, exc.errno)}"] += 1
        raise _NoTmpfile from None
    try:
        _finish(fd, data, mode, owner, xattrs)
        publish_check()
        if mode is None:
            try:
                _link_tmpfile(fd, dirfd, name)  # no name but the target's ever exists
            except FileExistsError:
                pass  # created meanwhile by someone else: replace it below
            except OSError as exc:
                STATS[f"tmpfile->named:link-{errno.errorcode.get(exc.errno or 0, exc.errno)}"] += 1
                raise _NoTmpfile from None
            else:
                STATS["tmpfile:link"] += 1
                _fsync_dir(dirfd)
                return True
        temp = _temp_name()
        try:
            _link_tmpfile(fd, dirfd, temp)
        except OSError as exc:
            STATS[f"tmpfile->named:link-{errno.errorcode.get(exc.errno or 0, exc.errno)}"] += 1
            raise _NoTmpfile from None
        _rename_or_unlink(dirfd, temp, name)
        STATS["tmpfile:rename"] += 1
    finally:
        os.close(fd)
    _fsync_dir(dirfd)
    return False


def _via_named(dirfd: int, name: str, data: bytes, mode: int | None,
               owner: tuple[int, int] | None, xattrs: dict[str, bytes],
               publish_check: Callable[[], None]) -> bool:
    temp = _temp_name()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC,
                 NEW_FILE_MODE, dir_fd=dirfd)
    try:
        try:
            _finish(fd, data, mode, owner, xattrs)
        finally:
            os.close(fd)
        publish_check()
        created = _exists(dirfd, name) is False
    except BaseException:
        _unlink_quietly(dirfd, temp)
        raise
    _rename_or_unlink(dirfd, temp, name)
    _fsync_dir(dirfd)
    return created


def _exists(dirfd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _rename_or_unlink(dirfd: int, temp: str, name: str) -> None:
    try:
        os.replace(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
    except BaseException:
        _unlink_quietly(dirfd, temp)
        raise


def _unlink_quietly(dirfd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dirfd)
    except OSError:
        pass


def _fsync_dir(dirfd: int) -> None:
    try:
        os.fsync(dirfd)  # make the new name itself durable
    except OSError:
        pass  # some file systems cannot fsync a directory; the data is already safe
