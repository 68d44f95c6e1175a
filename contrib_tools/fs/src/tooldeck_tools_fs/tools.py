"""The fs tools: ``file_read``, ``file_write`` and ``list_dir``.

Each is called as ``execute(arguments, context)`` (``call_style="mapping"``) and is importable by
reference (``tooldeck_tools_fs.tools:file_read``) so a sandbox worker can run it. They are
synchronous: the executor runs them in a worker thread. Failures a model can cause raise
:class:`~tooldeck_hookspecs.ToolFailure` with a stable code and a suggestion.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import secrets
import stat
from collections.abc import Mapping
from typing import Any

from tooldeck_hookspecs import ErrorCode, ToolContext, ToolFailure

from ._safepath import Target, locate, open_beneath, open_parent

__all__ = [
    "DEFAULT_READ_BYTES",
    "MAX_READ_BYTES",
    "MAX_WRITE_BYTES",
    "DEFAULT_LIST_ENTRIES",
    "MAX_LIST_ENTRIES",
    "file_read",
    "file_write",
    "list_dir",
]

#: ``file_read`` returns at most this many bytes unless the call asks for more...
DEFAULT_READ_BYTES = 1024 * 1024
#: ...and never more than this (``max_bytes`` is capped here by the schema and the code).
MAX_READ_BYTES = 8 * 1024 * 1024
#: ``file_write`` refuses larger content with ``TOO_LARGE`` before touching the disk.
MAX_WRITE_BYTES = 10 * 1024 * 1024
DEFAULT_LIST_ENTRIES = 1000
MAX_LIST_ENTRIES = 10_000

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)


def _fail_os(exc: OSError, path: str) -> ToolFailure:
    """An OSError from the file system, as an answer the model can act on."""
    code = exc.errno
    if code == errno.ENOENT:
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"{path!r} does not exist",
                           suggestion="Check the name with list_dir, or create the file with "
                           "file_write (create_dirs=true creates missing folders).")
    if code == errno.ENOTDIR:
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"a part of {path!r} is a file, not a "
                           "directory", suggestion="Check the path with list_dir.")
    if code == errno.EISDIR:
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"{path!r} is a directory",
                           suggestion="Use list_dir to see what it contains.")
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"the file system refused access to "
                           f"{path!r} ({os.strerror(code)})",
                           suggestion="Choose another file; this one cannot be accessed.")
    if code == errno.ELOOP:
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"{path!r} has too many levels of "
                           "symbolic links", suggestion="Use the real path of the file.")
    if code == errno.ENOSPC:
        return ToolFailure(ErrorCode.EXECUTION_ERROR, "no space left on the device; nothing "
                           "was changed", suggestion="Write less data, or tell the user.")
    return ToolFailure(ErrorCode.EXECUTION_ERROR,
                       f"cannot access {path!r}: {os.strerror(code) if code else exc}")


def _target(arguments: Mapping[str, Any], context: ToolContext, default: str | None = None
            ) -> Target:
    if not isinstance(arguments, Mapping):
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, "arguments must be a JSON object")
    path = arguments.get("path", default)
    if path is None:
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, "missing required field 'path'")
    return locate(path, context.workdir, context.allowed_paths)


def _int_arg(arguments: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = arguments.get(name, default)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS,
                          f"{name} must be an integer from {low} to {high}, got {value!r}")
    return value


def _choice(arguments: Mapping[str, Any], name: str, default: str, allowed: tuple[str, ...]
            ) -> str:
    value = arguments.get(name, default)
    if value is None:
        return default
    if value not in allowed:
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS,
                          f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def _pread_all(fd: int, count: int, offset: int) -> bytes:
    chunks: list[bytes] = []
    while count > 0:
        chunk = os.pread(fd, min(count, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        count -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _decode(data: bytes, truncated: bool) -> tuple[bytes, str | None]:
    """(bytes kept, text) — text is None when the bytes are not UTF-8 text."""
    if b"\x00" in data:
        return data, None  # NUL bytes mean binary, even when they decode
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A cut through a multi-byte character at the cap is not binary: keep whole characters.
        if truncated and exc.reason == "unexpected end of data" and exc.start >= len(data) - 3:
            head = data[: exc.start]
            try:
                return head, head.decode("utf-8")
            except UnicodeDecodeError:
                pass
        return data, None


def file_read(arguments: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
    """Read a file inside the working directory and return its content.

    Text (UTF-8) comes back as text; anything else as base64 with ``encoding: "base64"``. Large
    files come back in pieces: ``truncated: true`` and ``next_offset`` say where to continue.
    """
    target = _target(arguments, context)
    offset = _int_arg(arguments, "offset", 0, 0, 2**62)
    max_bytes = _int_arg(arguments, "max_bytes", DEFAULT_READ_BYTES, 1, MAX_READ_BYTES)
    encoding = _choice(arguments, "encoding", "auto", ("auto", "utf-8", "base64"))
    try:
        # O_NONBLOCK: opening a FIFO must not hang the worker; it is refused just below.
        fd = open_beneath(target, os.O_RDONLY | os.O_NONBLOCK | _O_NOCTTY)
    except OSError as exc:
        raise _fail_os(exc, target.display) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise _fail_os(OSError(errno.EISDIR, "is a directory"), target.display)
        if not stat.S_ISREG(st.st_mode):
            raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"{target.display!r} is not a regular "
                              "file (a device, FIFO or socket)",
                              suggestion="Only regular files can be read.")
        data = _pread_all(fd, max_bytes + 1, offset)
    except OSError as exc:
        raise _fail_os(exc, target.display) from None
    finally:
        os.close(fd)
    truncated = len(data) > max_bytes
    data = data[:max_bytes]
    text: str | None = None
    if encoding != "base64":
        data, text = _decode(data, truncated)
        if text is None and encoding == "utf-8":
            raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"{target.display!r} is not UTF-8 "
                              "text", suggestion="Call file_read again with encoding 'base64' "
                              "(or 'auto') to get the bytes.")
    result: dict[str, Any] = {
        "path": target.display,
        "content": text if text is not None else base64.b64encode(data).decode("ascii"),
        "encoding": "utf-8" if text is not None else "base64",
        "size": st.st_size,
        "offset": offset,
        "bytes_read": len(data),
        "truncated": truncated,
    }
    if truncated:
        result["next_offset"] = offset + len(data)
        result["note"] = (
            f"Only bytes {offset}..{offset + len(data)} of {st.st_size} were returned. Call "
            f"file_read again with offset={offset + len(data)} to read on."
        )
    return result


def _content_bytes(arguments: Mapping[str, Any]) -> bytes:
    content = arguments.get("content")
    if not isinstance(content, str):
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS,
                          f"content must be a string, got {type(content).__name__}")
    encoding = _choice(arguments, "encoding", "utf-8", ("utf-8", "base64"))
    # Cheap bounds first, so that a huge string is refused before it is encoded or decoded.
    estimate = len(content) * 3 // 4 if encoding == "base64" else len(content)
    if estimate > MAX_WRITE_BYTES:
        raise _too_large(estimate)
    if encoding == "base64":
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, f"content is not valid base64 ({exc})",
                              suggestion="Send the bytes base64-encoded, or use encoding "
                              "'utf-8' for text.") from None
    else:
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, "content contains characters that "
                              "are not valid Unicode (lone surrogates)",
                              suggestion="Send binary data base64-encoded with encoding "
                              "'base64'.") from None
    if len(data) > MAX_WRITE_BYTES:
        raise _too_large(len(data))
    return data


def _too_large(size: int) -> ToolFailure:
    return ToolFailure(ErrorCode.TOO_LARGE, f"content is {size} bytes; file_write accepts at "
                       f"most {MAX_WRITE_BYTES} bytes. Nothing was written.",
                       suggestion="Write the file in smaller pieces or produce less data.",
                       details={"limit_bytes": MAX_WRITE_BYTES, "size_bytes": size})


def _write_atomically(parent: int, name: str, data: bytes) -> bool:
    """Replace ``name`` in directory fd ``parent`` with ``data``; True if it was created.

    Temp file in the same directory (same file system, so the rename is atomic), created with
    O_EXCL | O_NOFOLLOW inside the already-contained directory fd, fsynced before the rename: a
    crash leaves the old content or the new one, never a mix.
    """
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OSError(errno.EISDIR, "is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ToolFailure(ErrorCode.EXECUTION_ERROR, "the target is not a regular file (a "
                          "device, FIFO or socket); it was left alone")
    temp = f".tooldeck-{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC,
                 0o666, dir_fd=parent)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if st is not None:
                os.fchmod(fd, stat.S_IMODE(st.st_mode))  # keep the file's permissions
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=parent)
        except OSError:
            pass
        raise
    try:
        os.fsync(parent)  # make the rename itself durable
    except OSError:
        pass  # some file systems cannot fsync a directory; the data is already safe
    return st is None


def file_write(arguments: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
    """Create or replace a file inside the working directory, atomically.

    ``content`` is UTF-8 text, or base64 with ``encoding: "base64"``. The file is written to a
    temporary file next to it and renamed over it, so readers see the old or the new content.
    """
    target = _target(arguments, context)
    data = _content_bytes(arguments)
    create_dirs = arguments.get("create_dirs", False)
    if not isinstance(create_dirs, bool):
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, "create_dirs must be true or false")
    try:
        parent, name = open_parent(target, create_dirs=create_dirs)
    except OSError as exc:
        raise _fail_os(exc, target.display) from None
    try:
        created = _write_atomically(parent, name, data)
    except OSError as exc:
        raise _fail_os(exc, target.display) from None
    finally:
        os.close(parent)
    return {"path": target.display, "bytes_written": len(data), "created": created}


def _display_name(name: str) -> tuple[str, bool]:
    """A JSON-safe name, and whether the raw name was not valid UTF-8."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raw = os.fsencode(name)
        return raw.decode("utf-8", "backslashreplace"), True
    return name, False


def _entry_type(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def _list(fd: int, prefix: str, recursive: bool, limit: int, out: list[dict[str, Any]]) -> bool:
    """Append entries of directory ``fd``; True when ``limit`` cut the listing short."""
    with os.scandir(fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if len(out) >= limit:
            return True
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue  # vanished between listing and stat
        kind = _entry_type(st.st_mode)
        name, escaped = _display_name(prefix + entry.name)
        item: dict[str, Any] = {"name": name, "type": kind,
                                "size": st.st_size if kind == "file" else None}
        if escaped:
            item["name_not_utf8"] = True
        out.append(item)
        if recursive and kind == "dir":
            try:
                # O_NOFOLLOW: a directory swapped for a symlink after the stat is not entered.
                child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                | _O_CLOEXEC, dir_fd=fd)
            except OSError:
                continue
            try:
                if _list(child, prefix + entry.name + "/", recursive, limit, out):
                    return True
            finally:
                os.close(child)
    return False


def list_dir(arguments: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
    """List a directory inside the working directory: name, type and size of each entry.

    Symlinks are listed as ``symlink`` and never followed when listing recursively.
    """
    target = _target(arguments, context, default=".")
    recursive = arguments.get("recursive", False)
    if not isinstance(recursive, bool):
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, "recursive must be true or false")
    limit = _int_arg(arguments, "max_entries", DEFAULT_LIST_ENTRIES, 1, MAX_LIST_ENTRIES)
    try:
        fd = open_beneath(target, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"{target.display!r} is a file, not a "
                              "directory", suggestion="Use file_read to read it.") from None
        raise _fail_os(exc, target.display) from None
    entries: list[dict[str, Any]] = []
    try:
        truncated = _list(fd, "", recursive, limit, entries)
    except OSError as exc:
        raise _fail_os(exc, target.display) from None
    finally:
        os.close(fd)
    result: dict[str, Any] = {"path": target.display, "entries": entries,
                              "count": len(entries), "truncated": truncated}
    if truncated:
        result["note"] = (f"Only the first {limit} entries are listed. List a subdirectory, "
                          "or raise max_entries, to see more.")
    return result
