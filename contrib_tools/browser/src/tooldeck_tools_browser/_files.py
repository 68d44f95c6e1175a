"""Writing a screenshot inside the session's working directory, and nowhere else.

The path must be relative, without ``..``, and end in ``.png``. Then, before the picture is even
taken (:func:`check_target`) and again when it is written (:func:`write_in_workdir`):

- it must not be a protected path (``ToolContext.protected_paths``, the rules of
  :mod:`tooldeck_hookspecs.protected`: ``.git/``, ``.vscode/``, ``.cursor/``, ...; names also
  with trailing dots/spaces stripped and Unicode-folded, and checked as a file, so a git
  ``HEAD`` is refused too), matched relative to the workdir and to every allowed root it lies
  in; ``PATH_NOT_ALLOWED`` names the rule;
- it must lie inside one of the tool's allowed paths (``ToolContext.allowed_paths``; the workdir
  when there are none); ``PATH_NOT_ALLOWED`` names them;
- the target must be a regular file or not exist. A FIFO named ``shot.png`` would block an
  ``open`` for writing until someone reads it, in a worker thread nobody can cancel; a device
  would be written to; a hard link would change a file outside. So the target is never opened:
  it is classified with ``lstat`` (no open, no symlink followed) and then *replaced*: the PNG
  goes to a fresh temporary file beside it (``O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK``,
  which cannot land on anything that already exists), is flushed, and renamed over the target.
  A reader sees the old file or the whole new one, never a partial PNG; a target swapped for a
  FIFO between the check and the rename is replaced, not written through.

The folders are opened one component at a time from a directory fd of the workdir with
``O_NOFOLLOW``, so a symlink planted anywhere on the way (``shots -> /etc``) is refused instead of
followed; missing folders are created.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Sequence

from tooldeck_hookspecs import ErrorCode, ToolFailure
from tooldeck_hookspecs.protected import normalise_rules, protected_message, protected_rule

__all__ = ["check_relative_png", "check_target", "write_in_workdir"]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = (os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
              | _O_CLOEXEC)
_SUGGESTION = "Use a relative path inside the working directory ending in .png, e.g. 'shot.png'."
_PROTECTED_SUGGESTION = (
    "This path is part of the host's configuration or version control and is never written by "
    "a tool; save the screenshot elsewhere, e.g. 'shots/page.png'."
)


def _refuse(path: object, why: str, **details: object) -> ToolFailure:
    return ToolFailure(
        ErrorCode.PATH_NOT_ALLOWED, f"screenshot path {str(path)[:300]!r} is not allowed: {why}",
        suggestion=_SUGGESTION, details=dict(details) if details else None,
    )


def check_relative_png(path: object) -> list[str]:
    """The components of a valid screenshot path; ``ToolFailure`` when it is not one."""
    if not isinstance(path, str) or not path.strip():
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, "path must be a non-empty string",
                          suggestion=_SUGGESTION)
    if "\x00" in path or "\\" in path:
        raise _refuse(path, "it contains a NUL byte or a backslash")
    if path.startswith("/") or path.startswith("~"):
        raise _refuse(path, "it is absolute; give it relative to the working directory")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts:
        raise _refuse(path, "it names no file")
    if ".." in parts:
        raise _refuse(path, "'..' is not allowed")
    if not parts[-1].lower().endswith(".png"):
        raise _refuse(path, "screenshots are PNG files: the name must end in .png")
    return parts


def _rules(protected_paths: Sequence[str] | None) -> tuple[str, ...]:
    # The defaults always apply (the list is extend-only); a rule that cannot be one is skipped.
    extra = [r for r in (protected_paths or ()) if isinstance(r, str) and r.strip("/ ")]
    return normalise_rules(r for r in extra if ".." not in r.split("/"))


def _roots(workdir: str, allowed_paths: Sequence[str]) -> list[str]:
    roots = []
    for root in allowed_paths or ():
        if isinstance(root, str) and root:
            root = root.replace("{workdir}", workdir)
            if os.path.isabs(root):
                roots.append(os.path.realpath(root))
    return list(dict.fromkeys(roots))


def _under(path: str, root: str) -> list[str] | None:
    if path == root:
        return []
    prefix = root.rstrip("/") + "/"
    return [p for p in path[len(prefix):].split("/") if p] if path.startswith(prefix) else None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _workdir(workdir: str) -> str:
    if not workdir or not os.path.isabs(workdir):
        raise ToolFailure(ErrorCode.EXECUTION_ERROR, "the session has no absolute working "
                          "directory to write the screenshot in")
    return os.path.realpath(workdir)


def _check_location(
    path: str, parts: list[str], real_workdir: str, rules: tuple[str, ...],
    allowed_paths: Sequence[str],
) -> None:
    # The components are opened with O_NOFOLLOW below, so the lexical path *is* where the file
    # lands: the workdir's real path plus the parts.
    target = os.path.join(real_workdir, *parts)
    allowed = _roots(real_workdir, allowed_paths) or [real_workdir]
    inside = [root for root in allowed if _under(target, root) is not None]
    if not inside:
        raise _refuse(path, f"it lies outside the tool's allowed paths ({', '.join(allowed)})",
                      allowed_paths=allowed)
    for root in dict.fromkeys([real_workdir, *inside]):
        rel = _under(target, root)
        if rel is None:
            continue
        # Matched as spelled, with trailing dots/spaces stripped and Unicode-folded, and as a
        # file: a git HEAD file is protected too (see tooldeck_hookspecs.protected).
        rule = protected_rule("/".join(rel), rules, is_file=True)
        if rule is not None:
            raise ToolFailure(ErrorCode.PATH_NOT_ALLOWED, protected_message(path[:300], rule),
                              suggestion=_PROTECTED_SUGGESTION, details={"rule": rule})


def _check_existing(path: str, dirfd: int | None, name: str) -> None:
    """Refuse a target that exists and is not a regular file (looked at, never opened)."""
    try:
        info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise _refuse(path, "a folder on the way is a file") from None
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(path, f"the target is {_kind(info.st_mode)}; a screenshot replaces only a "
                      "regular file or creates a new one", kind=_kind(info.st_mode))


def check_target(
    workdir: str, path: object, protected_paths: Sequence[str] | None = None,
    allowed_paths: Sequence[str] = (),
) -> list[str]:
    """Refuse a screenshot path before the picture is taken; the path's components.

    Checks the spelling, the protected paths, the allowed paths, and an existing target that is
    not a regular file (a FIFO, socket, device, symlink or folder). Blocking (``lstat`` calls,
    which never wait on a FIFO): call it from a worker thread.
    """
    parts = check_relative_png(path)
    assert isinstance(path, str)  # check_relative_png refused anything else
    real = _workdir(workdir)
    _check_location(path, parts, real, _rules(protected_paths), allowed_paths)
    # Only a look: folders that are symlinks are refused when the write opens them.
    _check_existing(path, None, os.path.join(real, *parts))
    return parts


def _open_folder(path: str, fd: int, name: str) -> int:
    """Open (creating it when missing) the folder ``name`` of ``fd``, never through a symlink."""
    for attempt in (1, 2):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if attempt == 2:
                raise
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
            except FileExistsError:  # created meanwhile: open whatever it is, checked again
                pass
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _refuse(path, f"{name!r} is a symlink or not a folder") from None
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def write_in_workdir(
    workdir: str, path: str, data: bytes, protected_paths: Sequence[str] | None = None,
    allowed_paths: Sequence[str] = (), before_publish: Callable[[], None] | None = None,
) -> str:
    """Write ``data`` to ``path`` under ``workdir`` atomically; return the path as written.

    No symlink is followed, no protected path or path outside ``allowed_paths`` is written, and
    an existing target that is not a regular file is refused (``PATH_NOT_ALLOWED``). Blocking:
    call it from a worker thread. ``before_publish`` is called right before the rename
    (``ToolContext.commit``): what it raises refuses the write, and the temp file is removed.
    """
    parts = check_target(workdir, path, protected_paths, allowed_paths)
    try:
        fd = os.open(_workdir(workdir), os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC)
    except OSError as exc:
        raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"the working directory cannot be opened "
                          f"({exc.strerror})") from None
    try:
        for name in parts[:-1]:
            child = _open_folder(path, fd, name)
            os.close(fd)
            fd = child
        name = parts[-1]
        _check_existing(path, fd, name)
        temporary = f".{name}.{secrets.token_hex(6)}.part"
        try:
            out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | getattr(os, "O_NONBLOCK", 0) | _O_CLOEXEC, 0o644, dir_fd=fd)
        except OSError as exc:
            raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"cannot write the screenshot "
                              f"{path!r}: {exc.strerror}") from None
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view):]
                os.fsync(out)  # the rename must not publish a file whose data is not on disk
            finally:
                os.close(out)
            if before_publish is not None:
                before_publish()
            os.replace(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException as exc:
            try:
                os.unlink(temporary, dir_fd=fd)
            except OSError:
                pass
            if isinstance(exc, IsADirectoryError):  # a folder appeared meanwhile
                raise _refuse(path, "the target is a folder") from None
            if isinstance(exc, OSError):
                raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"cannot write the screenshot "
                                  f"{path!r}: {exc.strerror}") from None
            raise
    except OSError as exc:  # opening or creating a folder on the way
        raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"cannot write the screenshot {path!r}: "
                          f"{exc.strerror}") from None
    finally:
        os.close(fd)
    return "/".join(parts)
