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
import stat
from collections.abc import Mapping
from typing import Any

from tooldeck_hookspecs import ErrorCode, ToolContext, ToolFailure

from . import _atomic
from ._protect import Guard
from ._safepath import Target, clip, locate, open_beneath, open_parent

__all__ = [
    "DEFAULT_READ_BYTES",
    "MAX_READ_BYTES",
    "MAX_WRITE_BYTES",
    "DEFAULT_LIST_ENTRIES",
    "DEFAULT_LIST_DEPTH",
    "MAX_LIST_ENTRIES",
    "MAX_LIST_DEPTH",
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
#: A recursive ``list_dir`` descends this many folder levels below ``path`` unless asked...
DEFAULT_LIST_DEPTH = 20
#: ...and never more (the listing also holds one open fd per level).
MAX_LIST_DEPTH = 100
#: One directory with more names than this is listed from its first names only (unsorted order).
MAX_DIR_SCAN = 100_000
#: The ``path`` echoed in a successful result is cut here (a path the kernel accepted is shorter,
#: but '././.'-padding that normalises away is not).
_RESULT_PATH_CHARS = 4096

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_PATH = getattr(os, "O_PATH", 0)
#: Where an O_PATH fd is reopened for reading; a module attribute so tests can take /proc away.
PROC_FD = "/proc/self/fd"


def _fail_os(exc: OSError, path: str) -> ToolFailure:
    """An OSError from the file system, as an answer the model can act on."""
    code = exc.errno
    if code == errno.ENOENT:
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"{clip(path)!r} does not exist",
                           suggestion="Check the name with list_dir, or create the file with "
                           "file_write (create_dirs=true creates missing folders).")
    if code == errno.ENOTDIR:
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"a part of {clip(path)!r} is a file, not a "
                           "directory", suggestion="Check the path with list_dir.")
    if code == errno.EISDIR:
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"{clip(path)!r} is a directory",
                           suggestion="Use list_dir to see what it contains.")
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"the file system refused access to "
                           f"{clip(path)!r} ({os.strerror(code)})",
                           suggestion="Choose another file; this one cannot be accessed.")
    if code == errno.ENXIO:
        # What opening a socket (or a device whose driver is gone) answers.
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"{clip(path)!r} is not a regular file "
                           "(a socket or a device)", suggestion="Only regular files can be read "
                           "or written; check the name with list_dir.")
    if code == errno.ELOOP:
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"{clip(path)!r} has too many levels of "
                           "symbolic links", suggestion="Use the real path of the file.")
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"no space left for {clip(path)!r} "
                           f"({os.strerror(code)}); nothing was changed",
                           suggestion="Write less data, or tell the user.")
    if code == errno.ENAMETOOLONG:
        return ToolFailure(ErrorCode.EXECUTION_ERROR, f"a name in {clip(path)!r} is too long "
                           "for the file system (at most 255 bytes per name, 4096 per path)",
                           suggestion="Use shorter file and folder names.")
    # strerror only: str(exc) carries the file name, which may be the model's huge path.
    reason = os.strerror(code) if code else clip(exc.strerror or type(exc).__name__)
    return ToolFailure(ErrorCode.EXECUTION_ERROR, f"cannot access {clip(path)!r}: {reason}")


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
                          f"{name} must be an integer from {low} to {high}, "
                          f"got {clip(repr(value))}")
    return value


def _choice(arguments: Mapping[str, Any], name: str, default: str, allowed: tuple[str, ...]
            ) -> str:
    value = arguments.get(name, default)
    if value is None:
        return default
    if value not in allowed:
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS,
                          f"{name} must be one of {', '.join(allowed)}, got {clip(repr(value))}")
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


#: What escaping a byte adds to a JSON string (orjson, as the deck measures results): ``"``,
#: ``\`` and the short escapes (\b \f \n \r \t) take 2 bytes, other control bytes 6 (\u00XX).
_JSON_EXTRA = bytes(
    1 if b in (0x22, 0x5C, 0x08, 0x0C, 0x0A, 0x0D, 0x09) else 5 if b < 0x20 else 0
    for b in range(256)
)
#: What the text of a file_read result may take once escaped: its ``max_output_bytes`` less
#: room for the other fields.
_CONTENT_JSON_BUDGET = MAX_READ_BYTES * 4 // 3


def _escaped_size(data: bytes) -> int:
    costs = data.translate(_JSON_EXTRA)
    return len(data) + costs.count(1) + 5 * costs.count(5)


def _json_fit(data: bytes, budget: int) -> int:
    """How many leading bytes of UTF-8 ``data`` fit in ``budget`` bytes once JSON-escaped.

    ``max_bytes`` up to 8 MiB is promised, and the result's cap (4/3 of that, for base64) holds
    any 8 MiB of plain text; but escaping grows text with many quotes, tabs or newlines, and
    such a read (a TSV of small numbers, 8 MiB of newlines) was dropped whole with
    OUTPUT_TRUNCATED. It is cut here instead, and comes back in pieces like a larger file.
    """
    if len(data) * 6 <= budget or _escaped_size(data) <= budget:
        return len(data)  # the first: fits even if every byte needs \u00XX (reads <= 1.8 MiB)
    step = 1 << 16
    used = 0
    for start in range(0, len(data), step):
        chunk = data[start : start + step]
        cost = _escaped_size(chunk)
        if used + cost <= budget:
            used += cost
            continue
        end = start
        for byte in chunk:
            used += 1 + _JSON_EXTRA[byte]
            if used > budget:
                break
            end += 1
        while 0 < end < len(data) and data[end] & 0xC0 == 0x80:
            end -= 1  # never through a multi-byte character
        return end
    return len(data)


def _version(st: os.stat_result) -> tuple[int, int]:
    """What a write in place changes (not ctime: a chmod or a new hard link is no change of
    content; an atomic replace is another inode, which an open fd never sees)."""
    return (st.st_size, st.st_mtime_ns)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _open_for_read(target: Target) -> tuple[int, os.stat_result]:
    """An fd open for reading on the regular file ``target`` names, and its stat at open.

    The path is opened ``O_PATH`` first and only a regular file is then opened for real: opening
    a FIFO for reading, even non-blocking, releases a writer blocked on it, which then dies of
    SIGPIPE (its data lost) when the read end is closed; opening a device runs its driver (a
    watchdog starts its countdown, a tape rewinds). The real open goes through
    ``/proc/self/fd/N``, the very inode checked, with no second path lookup to race with.
    """
    try:
        path_fd = open_beneath(target, _O_PATH)
    except OSError as exc:
        raise _fail_os(exc, target.display) from None
    try:
        st = os.fstat(path_fd)
        if stat.S_ISDIR(st.st_mode):
            raise _fail_os(OSError(errno.EISDIR, "is a directory"), target.display)
        if not stat.S_ISREG(st.st_mode):
            raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"{clip(target.display)!r} is not a "
                              "regular file (a device, FIFO or socket); it was not opened",
                              suggestion="Only regular files can be read.")
        # O_NONBLOCK: a file under a lease another process holds answers EAGAIN at once
        # instead of holding the worker for the lease-break time.
        flags = os.O_RDONLY | os.O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC
        fd = -1
        try:
            fd = os.open(f"{PROC_FD}/{path_fd}", flags)
        except (FileNotFoundError, NotADirectoryError):
            pass  # no /proc here: open the path again below, and compare inodes
        except OSError as exc:
            raise _fail_os(exc, target.display) from None
        if fd >= 0 and not _same_file(os.fstat(fd), st):
            os.close(fd)  # not the real /proc
            fd = -1
        if fd < 0:
            try:
                fd = open_beneath(target, flags)
            except OSError as exc:
                raise _fail_os(exc, target.display) from None
            if not _same_file(os.fstat(fd), st):
                os.close(fd)
                raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"{clip(target.display)!r} was "
                                  "replaced while it was being opened",
                                  suggestion="Read it again.")
        return fd, st
    finally:
        os.close(path_fd)


def file_read(arguments: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
    """Read a file inside the working directory and return its content.

    Text (UTF-8) comes back as text; anything else as base64 with ``encoding: "base64"``. Large
    files come back in pieces: ``truncated: true`` and ``next_offset`` say where to continue.
    Only regular files are opened (a FIFO, socket or device is refused without being opened).
    ``size`` is the size after the read; a file written to in place while it was read says
    ``changed_while_read: true``.
    """
    target = _target(arguments, context)
    offset = _int_arg(arguments, "offset", 0, 0, 2**62)
    max_bytes = _int_arg(arguments, "max_bytes", DEFAULT_READ_BYTES, 1, MAX_READ_BYTES)
    encoding = _choice(arguments, "encoding", "auto", ("auto", "utf-8", "base64"))
    fd, st = _open_for_read(target)
    try:
        data = _pread_all(fd, max_bytes + 1, offset)
        after = os.fstat(fd)
    except OSError as exc:
        raise _fail_os(exc, target.display) from None
    finally:
        os.close(fd)
    # Written to (in place: truncated, appended, rewritten) while it was read: what came back
    # may mix two versions or stop short of the size seen at open. Said, never silent.
    changed = _version(after) != _version(st)
    truncated = len(data) > max_bytes
    data = data[:max_bytes]
    text: str | None = None
    if encoding != "base64":
        data, text = _decode(data, truncated)
        if text is None and encoding == "utf-8":
            raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"{clip(target.display)!r} is not UTF-8 "
                              "text", suggestion="Call file_read again with encoding 'base64' "
                              "(or 'auto') to get the bytes.")
        if text is not None:
            fits = _json_fit(data, _CONTENT_JSON_BUDGET)
            if fits < len(data):
                data, truncated = data[:fits], True
                text = data.decode("utf-8")
    result: dict[str, Any] = {
        "path": clip(target.display, _RESULT_PATH_CHARS),
        "content": text if text is not None else base64.b64encode(data).decode("ascii"),
        "encoding": "utf-8" if text is not None else "base64",
        "size": after.st_size,
        "offset": offset,
        "bytes_read": len(data),
        "truncated": truncated,
    }
    notes: list[str] = []
    if truncated:
        result["next_offset"] = offset + len(data)
        notes.append(f"Only bytes {offset}..{offset + len(data)} of {after.st_size} were "
                     f"returned. Call file_read again with offset={offset + len(data)} to read "
                     "on.")
    if not data and offset > after.st_size:
        notes.append(f"offset={offset} is past the end of the file ({after.st_size} bytes): "
                     "nothing was read.")
    if changed:
        result["changed_while_read"] = True
        notes.append(f"The file changed while it was read (size {st.st_size} -> "
                     f"{after.st_size}): the content may be incomplete or mix old and new "
                     "data. Read it again once it stops changing.")
    if notes:
        result["note"] = " ".join(notes)
    return result


def _content_bytes(arguments: Mapping[str, Any]) -> bytes:
    content = arguments.get("content")
    if not isinstance(content, str):
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS,
                          f"content must be a string, got {clip(type(content).__name__)}")
    encoding = _choice(arguments, "encoding", "utf-8", ("utf-8", "base64"))
    # Cheap bounds first, so that a huge string is refused before it is encoded or decoded.
    estimate = len(content) * 3 // 4 if encoding == "base64" else len(content)
    if estimate > MAX_WRITE_BYTES:
        raise _too_large(estimate)
    if encoding == "base64":
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ToolFailure(ErrorCode.INVALID_ARGUMENTS,
                              f"content is not valid base64 ({clip(str(exc))})",
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


def _replaced_file(parent: int, name: str, display: str) -> os.stat_result | None:
    """The file ``name`` will replace (None: it will be created); refuses what must stay."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        raise OSError(errno.EISDIR, "is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"{clip(display)!r} is not a regular file "
                          "(a device, FIFO or socket); it was left alone",
                          suggestion="Write to a regular file instead.")
    # Root may rename over anything: honour the owner's own "read-only" instead of the kernel's
    # permission check, and never chmod the file to get round it.
    if not st.st_mode & stat.S_IWUSR:
        raise ToolFailure(ErrorCode.PERMISSION_DENIED, f"{clip(display)!r} is read-only (mode "
                          f"{stat.S_IMODE(st.st_mode):o}); it was not changed",
                          suggestion="Write to another file, or ask the user to make this one "
                          "writable.", details={"mode": oct(stat.S_IMODE(st.st_mode))})
    return st


def _names_folder(spelled: str) -> bool:
    """True for a path spelled as a folder (``notes.txt/``, ``notes/.``): POSIX says it names a
    directory, and creating a *file* of that name instead is not what was asked."""
    return spelled.endswith(("/", "/.", "/.."))


def _folder_failure(target: Target) -> ToolFailure:
    return ToolFailure(ErrorCode.INVALID_ARGUMENTS, f"path {clip(target.display)!r} names a "
                       "folder (it ends with '/'), not a file; nothing was written",
                       suggestion="Give the file's path without the trailing '/' (for example "
                       "'notes/todo.txt'); missing folders are created with create_dirs.")


def file_write(arguments: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
    """Create or replace a file inside the working directory, atomically.

    ``content`` is UTF-8 text, or base64 with ``encoding: "base64"``. The data is written to an
    anonymous file in the target's folder and then given the target's name (renamed over it),
    so readers see the old or the new content and a killed write leaves nothing behind.
    Protected paths (``context.protected_paths``: tooldeck.toml, pyproject.toml, .git/...) are
    refused with ``PATH_NOT_ALLOWED`` wherever the spelling or its symlinks lead; read-only files
    with ``PERMISSION_DENIED``. A replaced file keeps its mode, owner, POSIX ACL and ``user.*``
    attributes, never set-user-ID or set-group-ID bits nor ``security.*`` attributes. A path
    spelled as a folder (trailing ``/``) is refused. Replacing a file with other hard links
    leaves them the old content: ``hard_links`` and ``note`` say so.
    A call the runner gave up on (timed out, cancelled) before the rename changes nothing
    (``context.commit()``); once the rename is under way the runner reports how it ended.
    """
    target = _target(arguments, context)
    data = _content_bytes(arguments)
    create_dirs = arguments.get("create_dirs", False)
    if not isinstance(create_dirs, bool):
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, "create_dirs must be true or false")
    guard = Guard(target, context)
    guard.check_lexical()  # before anything is opened or created
    folder = _names_folder(target.display)
    if target.rel and _atomic.is_temp_name(target.rel[-1]):
        raise ToolFailure(ErrorCode.PATH_NOT_ALLOWED, f"{clip(target.display)!r} is not allowed: "
                          "names like .tooldeck-*.tmp are reserved for file_write's temp files",
                          suggestion="Choose another file name.")
    try:
        # A path spelled as a folder is refused below, after the path checks (an escape or a
        # protected path is reported as such first), and creates no folder on the way.
        parent, name = open_parent(target, create_dirs=create_dirs and not folder, guard=guard)
    except OSError as exc:
        if folder and exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise _folder_failure(target) from None
        raise _fail_os(exc, target.display) from None
    try:
        # Where the write really lands: the symlinks followed and '..' resolved by the open.
        guard.check_resolved(parent, name)
        if folder:
            raise _folder_failure(target)
        if _atomic.is_temp_name(name):
            raise ToolFailure(ErrorCode.PATH_NOT_ALLOWED, f"{clip(target.display)!r} is not "
                              "allowed: it leads to a name reserved for file_write's temp files",
                              suggestion="Choose another file name.")
        old = _replaced_file(parent, name, target.display)

        def publish_check() -> None:
            # Again just before the name appears: a folder moved meanwhile is caught too.
            guard.check_resolved(parent, name)
            # The point of no return: refused (CallAbandoned, nothing is named) when the runner
            # already answered TIMEOUT or CANCELLED, so a write reported failed never lands.
            context.commit()

        created = _atomic.write_replace(
            parent, name, data,
            mode=None if old is None else stat.S_IMODE(old.st_mode),
            owner=None if old is None else (old.st_uid, old.st_gid),
            xattrs=None if old is None else _atomic.kept_xattrs(parent, name),
            publish_check=publish_check)
    except OSError as exc:
        raise _fail_os(exc, target.display) from None
    finally:
        os.close(parent)
    result: dict[str, Any] = {"path": clip(target.display, _RESULT_PATH_CHARS),
                              "bytes_written": len(data), "created": created}
    if old is not None and old.st_nlink > 1:
        # The write replaces the file: its other names (hard links, e.g. a package store's or
        # a backup's) keep the old content. Writing through them would change files elsewhere,
        # so this is the safe way, but it is said rather than silent.
        result["hard_links"] = old.st_nlink
        result["note"] = (f"The file had {old.st_nlink - 1} other hard link(s); they keep the "
                          "old content (the file was replaced, not rewritten in place).")
    return result


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


_LIST_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC
#: A folder that is no longer one (removed, or swapped for a file or a symlink) since it was
#: listed: skipped quietly. Any other failure to enter a folder is reported.
_GONE = {errno.ENOENT, errno.ENOTDIR, errno.ELOOP}


def _reason(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else type(exc).__name__


def _scan(fd: int, reasons: set[str]) -> list[str]:
    """The names in directory ``fd``, sorted; temp files of file_write left out."""
    names: list[str] = []
    with os.scandir(fd) as it:
        # Hidden names count too: a folder of a million planted '.tooldeck-*.tmp' names must
        # not be read to its end.
        for seen, entry in enumerate(it):
            if seen >= MAX_DIR_SCAN:
                reasons.add("directory_size")
                break
            if not _atomic.is_temp_name(entry.name):
                names.append(entry.name)
    names.sort()
    return names


def _list(root_fd: int, recursive: bool, limit: int, max_depth: int,
          out: list[dict[str, Any]]) -> set[str]:
    """Append the entries under ``root_fd`` in depth-first order; why it stopped short, if it did.

    Iterative on an explicit stack of (fd, prefix, names, next index): a tree thousands of
    levels deep costs one frame per level of *data*, never of Python recursion, and ``max_depth``
    bounds the open fds.
    """
    reasons: set[str] = set()
    stack: list[tuple[int, str, list[str], int]] = [(root_fd, "", _scan(root_fd, reasons), 0)]
    try:
        while stack:
            fd, prefix, names, index = stack[-1]
            if index >= len(names):
                stack.pop()
                if fd != root_fd:
                    os.close(fd)
                continue
            stack[-1] = (fd, prefix, names, index + 1)
            if len(out) >= limit:
                reasons.add("max_entries")
                break
            name = names[index]
            shown, escaped = _display_name(prefix + name)
            item: dict[str, Any] = {"name": shown}
            if escaped:
                item["name_not_utf8"] = True
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # vanished between listing and stat
            except OSError as exc:
                # Listed with the reason rather than dropped: a listing that silently lacks
                # entries reads as complete.
                out.append({**item, "type": "other", "size": None, "error": _reason(exc)})
                reasons.add("unreadable")
                continue
            kind = _entry_type(st.st_mode)
            item.update(type=kind, size=st.st_size if kind == "file" else None)
            out.append(item)
            if not recursive or kind != "dir":
                continue
            if len(stack) >= max_depth:  # its entries would be one level too deep
                reasons.add("max_depth")
                continue
            try:
                # O_NOFOLLOW: a directory swapped for a symlink after the stat is not entered.
                child = os.open(name, _LIST_DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in _GONE:
                    item["error"] = _reason(exc)  # EACCES, EMFILE, EIO...: its entries unseen
                    reasons.add("unreadable")
                continue
            try:
                child_names = _scan(child, reasons)
            except OSError as exc:
                os.close(child)
                if exc.errno not in _GONE:
                    item["error"] = _reason(exc)
                    reasons.add("unreadable")
                continue
            stack.append((child, prefix + name + "/", child_names, 0))
    finally:
        for fd, *_rest in stack:
            if fd != root_fd:
                os.close(fd)
    return reasons


_NOTES = {
    "max_entries": "only the first {limit} entries are listed (raise max_entries, up to "
                   f"{MAX_LIST_ENTRIES}, or list a subfolder)",
    "max_depth": "folders deeper than max_depth={depth} levels were not entered (list one of "
                 "the deepest folders listed to go on)",
    "directory_size": f"a folder with more than {MAX_DIR_SCAN} entries was listed from its "
                      "first entries only",
    "unreadable": "some entries could not be read (each says why in 'error'); what a folder "
                  "with an 'error' holds is not listed",
}


def list_dir(arguments: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
    """List a directory inside the working directory: name, type and size of each entry.

    Symlinks are listed as ``symlink`` and never followed when listing recursively. The listing
    is bounded by ``max_entries`` and (recursive) ``max_depth``; ``truncated`` and
    ``truncated_by`` say when and why it stopped short. An entry that could not be read, or a
    folder that could not be entered (``EACCES``, ``EMFILE``...), carries ``error`` and adds
    ``unreadable`` to ``truncated_by``. file_write's temp files are not shown.
    """
    target = _target(arguments, context, default=".")
    recursive = arguments.get("recursive", False)
    if not isinstance(recursive, bool):
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, "recursive must be true or false")
    limit = _int_arg(arguments, "max_entries", DEFAULT_LIST_ENTRIES, 1, MAX_LIST_ENTRIES)
    max_depth = _int_arg(arguments, "max_depth", DEFAULT_LIST_DEPTH, 1, MAX_LIST_DEPTH)
    try:
        fd = open_beneath(target, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"{clip(target.display)!r} is a file, "
                              "not a directory", suggestion="Use file_read to read it.") from None
        raise _fail_os(exc, target.display) from None
    entries: list[dict[str, Any]] = []
    try:
        reasons = _list(fd, recursive, limit, max_depth, entries)
    except OSError as exc:
        raise _fail_os(exc, target.display) from None
    finally:
        os.close(fd)
    truncated_by = sorted(reasons)
    result: dict[str, Any] = {"path": clip(target.display, _RESULT_PATH_CHARS),
                              "entries": entries, "count": len(entries),
                              "truncated": bool(truncated_by)}
    if truncated_by:
        result["truncated_by"] = truncated_by
        result["note"] = "Listing cut short: " + "; ".join(
            _NOTES[r].format(limit=limit, depth=max_depth) for r in truncated_by) + "."
    return result
