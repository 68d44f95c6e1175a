"""The path guard: a path argument must resolve inside one of the tool's allowed roots.

Resolution follows symbolic links on the longest existing prefix of the path (the rest cannot be a
link yet), so a link inside the workdir that points outside is caught even when the file it would
create does not exist. Containment compares path components of resolved paths, never string
prefixes (``/tmp/work`` does not contain ``/tmp/workshop``). Nothing is decoded: ``%2e%2e`` is a
file name of six characters.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath

__all__ = ["check_path", "expand_allowed_paths", "resolve_path"]

# Links that the kernel resolves to another process's view of the system ("magic links"): they
# can reach the host's root, cwd, open files or environment whatever the path says.
_PROC_MAGIC = re.compile(
    r"""^/proc/
        (?:self|thread-self|[0-9]+)
        (?:/task/(?:[0-9]+|self))?
        /(?:root|cwd|exe|environ|mem|fd|fdinfo|map_files)(?:/|$)""",
    re.VERBOSE,
)
_DEV_FD = re.compile(r"^/dev/(?:fd(?:/|$)|stdin$|stdout$|stderr$)")

# More than this many links in one resolution is a loop (Linux stops at 40 too).
_MAX_LINKS = 40

_SUGGESTION = "use a relative path inside the working directory, e.g. 'notes/todo.txt'"


def _is_magic(path: str) -> bool:
    return bool(_PROC_MAGIC.match(path) or _DEV_FD.match(path))


#: Longest path resolved (Linux's PATH_MAX, in characters).
_PATH_MAX = 4096


def resolve_path(path: str) -> tuple[str, list[str]]:
    """Resolve an absolute ``path`` the way the kernel would, without needing it to exist.

    Returns the resolved path and every absolute path the walk went through (the lexical path,
    each link followed and where it leads), so that callers can refuse a walk that passed a magic
    link on the way. Components that do not exist are taken literally; ``..`` pops after links
    are resolved, as the kernel does.
    """
    if len(path) > _PATH_MAX:
        # The kernel refuses these too (PATH_MAX); walked here, a 1 MB path of 500k components
        # cost seconds of the event loop.
        raise OSError(errno.ENAMETOOLONG, f"path longer than {_PATH_MAX} characters")
    try:
        os.fsencode(path)
    except UnicodeError as exc:  # a lone surrogate: no file system name can hold it
        raise OSError(errno.EILSEQ, f"path is not valid text: {exc.reason}") from None
    if "\0" in path:
        raise OSError(errno.EINVAL, "path contains a NUL character")
    visited: list[str] = [os.path.normpath(path)]
    pending = [c for c in path.split("/") if c]
    pending.reverse()  # a stack: the next component is at the end
    resolved = "/"
    links = 0
    exists = True
    while pending:
        name = pending.pop()
        if name == ".":
            continue
        if name == "..":
            resolved = os.path.dirname(resolved) or "/"
            if not exists:
                # 'missing/../link/x': the kernel refuses it (ENOENT), but a tool that joins or
                # normalises paths lexically reaches 'link' and follows it. Back in a folder
                # that exists, links count again.
                exists = os.path.lexists(resolved)
            continue
        candidate = os.path.join(resolved, name)
        if not exists:
            # Below a missing component nothing can be a link: stay lexical.
            resolved = candidate
            continue
        try:
            mode = os.lstat(candidate).st_mode
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                exists = False
            resolved = candidate
            continue
        if not stat.S_ISLNK(mode):
            resolved = candidate
            continue
        links += 1
        if links > _MAX_LINKS:
            raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
        target = os.readlink(candidate)
        # The link itself is a step of the walk: a '..' after it ('/proc/self/cwd/../x') leaves
        # no trace of it in the lexical path or in its target, yet the path went through it.
        visited.append(candidate)
        if target.startswith("/"):
            resolved = "/"
            base = target
        else:
            base = os.path.join(resolved, target)
        remaining = "/".join(reversed(pending))
        visited.append(os.path.normpath(os.path.join(base, remaining)))
        pending.extend(reversed([c for c in target.split("/") if c]))
    return resolved, visited


def expand_allowed_paths(templates: Iterable[str], workdir: str) -> list[str]:
    """The allowed roots: templates with ``{workdir}``, ``{home}`` and ``{tmp}`` filled in,
    made absolute against ``workdir`` and resolved (a workdir under a link is still itself)."""
    values = {
        "workdir": workdir,
        "home": os.path.expanduser("~"),
        "tmp": tempfile.gettempdir(),
    }
    roots: list[str] = []
    for template in templates:
        try:
            raw = template.format_map(values)
        except (KeyError, ValueError, IndexError):
            # An unknown placeholder allows nothing rather than something unintended.
            continue
        if not raw:
            continue
        absolute = raw if raw.startswith("/") else os.path.join(workdir, raw)
        try:
            roots.append(resolve_path(absolute)[0])
        except OSError:
            continue
    return roots


def _contained(path: str, root: str) -> bool:
    return PurePosixPath(path).is_relative_to(PurePosixPath(root))


def check_path(
    value: object, workdir: str, allowed_paths: Sequence[str] = ("{workdir}",)
) -> str | None:
    """Why ``value`` may not be used as a path argument, or None when it may.

    ``value`` is resolved against ``workdir`` when relative, links followed on its longest existing
    prefix; it must then lie inside one of ``allowed_paths`` (templates, see
    :func:`expand_allowed_paths`). NUL bytes, ``~`` (never expanded here, so refused rather than
    left for a tool to expand) and process magic links (``/proc/<pid>/root|cwd|fd/*|environ``,
    ``/dev/fd/*``, also when reached through a link) are refused wherever they point.
    """
    if not isinstance(value, str):
        return f"a path must be a string, got {type(value).__name__}; {_SUGGESTION}"
    shown = value if len(value) <= 200 else value[:200] + "..."
    if "\x00" in value:
        return f"path {shown!r} contains a NUL byte, which no file name may hold; {_SUGGESTION}"
    if value.startswith("~"):
        return (
            f"path {shown!r} starts with '~', which is not expanded here; "
            f"write the path out relative to the working directory instead"
        )
    if not workdir or not workdir.startswith("/"):
        return f"the session has no absolute working directory, so {shown!r} cannot be checked"
    absolute = value if value.startswith("/") else os.path.join(workdir, value)
    try:
        resolved, visited = resolve_path(absolute)
    except OSError as exc:
        return f"path {shown!r} cannot be resolved ({exc.strerror}); {_SUGGESTION}"
    for step in [*visited, resolved]:
        if _is_magic(step):
            return (
                f"path {shown!r} goes through {step!r}, a process link that can reach any file "
                f"of the system; {_SUGGESTION}"
            )
    roots = expand_allowed_paths(allowed_paths, workdir)
    if any(_contained(resolved, root) for root in roots):
        return None
    where = ", ".join(roots) if roots else "none"
    return (
        f"path {shown!r} resolves to {resolved!r}, outside the allowed paths ({where}); "
        f"{_SUGGESTION}"
    )
