"""Writing a screenshot inside the session's working directory, and nowhere else.

The path must be relative, without ``..``, and end in ``.png``. It is opened one component at a
time from a directory fd of the workdir with ``O_NOFOLLOW``, so a symlink planted anywhere on the
way (``shots -> /etc``) is refused instead of followed; missing folders are created.
"""

from __future__ import annotations

import errno
import os

from tooldeck_hookspecs import ErrorCode, ToolFailure

__all__ = ["check_relative_png", "write_in_workdir"]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_SUGGESTION = "Use a relative path inside the working directory ending in .png, e.g. 'shot.png'."


def _refuse(path: object, why: str) -> ToolFailure:
    return ToolFailure(
        ErrorCode.PATH_NOT_ALLOWED, f"screenshot path {path!r} is not allowed: {why}",
        suggestion=_SUGGESTION,
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


def write_in_workdir(workdir: str, path: str, data: bytes) -> str:
    """Write ``data`` to ``path`` under ``workdir`` (no symlinks followed); return the path."""
    parts = check_relative_png(path)
    if not workdir or not os.path.isabs(workdir):
        raise ToolFailure(ErrorCode.EXECUTION_ERROR, "the session has no absolute working "
                          "directory to write the screenshot in")
    fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC)
    try:
        for name in parts[:-1]:
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC,
                                dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(name, 0o755, dir_fd=fd)
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC,
                                dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refuse(path, f"{name!r} is a symlink or not a folder") from None
                raise
            os.close(fd)
            fd = child
        try:
            out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                          | _O_CLOEXEC, 0o644, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR):
                raise _refuse(path, "the target is a symlink or a folder") from None
            raise
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return "/".join(parts)
