"""Protected paths, checked where the write really lands (not where its spelling points).

A rule of :mod:`tooldeck_hookspecs.protected` is matched against a path *relative to its root*.
The spelling the model sent says little about where a write lands: ``link/config`` with
``link -> .git``, ``x`` with ``x -> .git/config``, ``.GIT/config``, ``a/../.git/config``... So
file_write checks twice:

1. the lexical path (``Target.rel``) before anything is opened, which refuses the obvious
   spellings early and before ``create_dirs`` creates anything;
2. the *resolved* location: after :func:`~tooldeck_tools_fs._safepath.open_parent` safely opened
   the parent directory, the real path of that directory fd (``/proc/self/fd/N``, verified
   against ``fstat``; or, without ``/proc``, found by climbing ``..`` from the fd to the root and
   matching inode numbers), made relative to every allowed root it lies under, plus the final
   name. Every directory ``create_dirs`` would create is checked the same way first.

:func:`~tooldeck_hookspecs.protected_rule` also matches names with trailing dots and spaces
stripped (``tooldeck.toml.``: file systems with Windows semantics, vfat, ntfs3, CIFS, store them
as the protected name itself) and folded: NFKC (fullwidth ``ＴＯＯＬＤＥＣＫ.toml``, ligatures)
with default-ignorable code points removed (``tooldeck\u200d.toml``, a soft hyphen, a BOM):
case-insensitive file systems (ext4/f2fs ``casefold`` folders on kernels before 6.13, APFS,
HFS+) drop those when they compare names, so the planted name *is* the protected one there.
Folding only ever adds refusals. A *file* named ``HEAD`` is refused too (an embedded bare git
repository, :data:`~tooldeck_hookspecs.protected.REPOSITORY_MARKER_FILES`); a folder of that
name is not. So is anything inside a Python environment below a root, whatever the folder is
called (:func:`~tooldeck_hookspecs.protected.find_environment`: ``venv/bin/activate``,
``env/bin/tooldeck``), checked on the resolved folders of the path.
"""

from __future__ import annotations

import collections
import functools
import os
from collections.abc import Sequence

from tooldeck_hookspecs import ErrorCode, ToolContext, ToolFailure
from tooldeck_hookspecs.protected import (
    find_environment,
    fold_name,
    normalise_rules,
    protected_message,
    protected_rule,
)

from ._safepath import Target, clip

__all__ = ["STATS", "Guard", "fd_realpath", "fold_name"]

#: How the real path of a directory fd was found: ``realpath:proc`` or ``realpath:dotdot``
#: (the fallback where /proc is missing or disagrees with fstat).
STATS: collections.Counter[str] = collections.Counter()

#: Where the kernel shows an fd's path; a module attribute so tests can take /proc away.
PROC_FD = "/proc/self/fd"
_DOTDOT_LIMIT = 100_000  # levels; a deeper tree than any real one, yet no infinite loop
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)

_SUGGESTION = (
    "This file is part of the host's configuration or version control and cannot be written by "
    "a tool. Write your output to another path, or ask the user to make this change."
)


def _rules(context: ToolContext) -> tuple[str, ...]:
    """The defaults and the context's rules: extend-only, whatever the context holds."""
    given = context.protected_paths or ()
    try:
        return _merged_rules(tuple(given))
    except TypeError:  # an unhashable entry: merge without the cache
        return _merged_rules.__wrapped__(tuple(given))


@functools.lru_cache(maxsize=64)
def _merged_rules(given: tuple[object, ...]) -> tuple[str, ...]:
    # Cached: every write builds a Guard, and merging ~120 rules costs ~70 µs each time.
    extra = [r for r in given if isinstance(r, str) and r.strip("/ ")]
    try:
        return normalise_rules(extra)
    except ValueError:  # a '..' rule can never match; keep the others
        return normalise_rules(r for r in extra if ".." not in r.split("/"))


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _dotdot_path(fd: int) -> str | None:
    """The absolute path of directory ``fd`` found by climbing '..' (no /proc needed)."""
    names: list[str] = []
    here = os.fstat(fd)
    cur = os.dup(fd)
    try:
        for _ in range(_DOTDOT_LIMIT):
            parent = os.open("..", _DIR_FLAGS, dir_fd=cur)
            os.close(cur)
            cur = parent
            up = os.fstat(cur)
            if _same(up, here):  # '..' of '/' is '/'
                return "/" + "/".join(reversed(names))
            found = None
            with os.scandir(cur) as it:
                for entry in it:
                    if entry.inode() != here.st_ino:
                        continue
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if _same(st, here):
                        found = entry.name
                        break
            if found is None:
                # A mount point shows the inode of what lies below it in d_ino: compare by
                # stat for every directory then (slow, but only on this fallback's odd case).
                with os.scandir(cur) as it:
                    for entry in it:
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if _same(st, here):
                            found = entry.name
                            break
            if found is None:
                return None  # the directory was moved or deleted meanwhile
            names.append(found)
            here = up
        return None
    finally:
        os.close(cur)


def fd_realpath(fd: int) -> str | None:
    """The absolute real path of directory ``fd``, or None when it cannot be told.

    ``/proc/self/fd/N`` first, accepted only when that path leads to the same inode (a
    directory deleted or moved meanwhile reads differently); else the '..' climb.
    """
    try:
        path = os.readlink(f"{PROC_FD}/{fd}")
        if path.startswith("/") and _same(os.stat(path), os.fstat(fd)):
            STATS["realpath:proc"] += 1
            return path
    except OSError:
        pass
    STATS["realpath:dotdot"] += 1
    try:
        return _dotdot_path(fd)
    except OSError:
        return None


def _under(path: str, root: str) -> list[str] | None:
    if path == root:
        return []
    prefix = root.rstrip("/") + "/"
    if path.startswith(prefix):
        return [p for p in path[len(prefix):].split("/") if p]
    return None


class Guard:
    """Refuses writes (and directory creations) that land on a protected path."""

    def __init__(self, target: Target, context: ToolContext) -> None:
        self.target = target
        self.rules = _rules(context)
        roots = [target.root]
        for root in (*(context.allowed_paths or ()), context.workdir):
            if isinstance(root, str) and root:
                root = root.replace("{workdir}", context.workdir or "")
                if os.path.isabs(root):
                    roots.append(os.path.realpath(root))
        self.roots = list(dict.fromkeys(roots))

    def _refuse(self, rule: str) -> ToolFailure:
        return ToolFailure(ErrorCode.PATH_NOT_ALLOWED,
                           protected_message(clip(self.target.display), rule),
                           suggestion=_SUGGESTION, details={"rule": rule})

    def _check_parts(self, parts: Sequence[str], file: bool = True) -> None:
        # protected_rule matches the stripped and folded spellings too, and a git HEAD file.
        rule = protected_rule("/".join(parts), self.rules, is_file=file)
        if rule is not None:
            raise self._refuse(rule)

    def check_lexical(self) -> None:
        """Refuse the path as spelled (relative to its root, '..' taken lexically)."""
        self._check_parts(self.target.rel)

    def check_resolved(self, dirfd: int, name: str, *, file: bool = True) -> None:
        """Refuse when ``name`` in directory ``dirfd`` is protected under any root it lies in.

        ``file`` is False for a folder about to be created: a git ``HEAD`` is only refused as a
        file. Fails closed: a directory whose real path cannot be told, or that lies under no
        allowed root, is refused too.
        """
        real = fd_realpath(dirfd)
        if real is None:
            raise ToolFailure(ErrorCode.PATH_NOT_ALLOWED,
                              f"path {clip(self.target.display)!r} is not allowed: the real "
                              "location of its folder cannot be determined",
                              suggestion="Try again, or write to another folder.")
        inside = False
        for root in self.roots:
            rel = _under(real, root)
            if rel is not None:
                inside = True
                self._check_parts([*rel, name], file)
                # A virtual environment under any name: its bin/activate, console scripts and
                # Jupyter kernel specs are code the host runs (the markers are the user's: no
                # tool writes pyvenv.cfg or conda-meta/, so this cannot be raced from here).
                environment = find_environment(root, rel)
                if environment is not None:
                    raise ToolFailure(
                        ErrorCode.PATH_NOT_ALLOWED,
                        f"{clip(self.target.display)!r} is inside a Python environment "
                        f"({clip(environment.path)!r} holds {environment.rule}): its scripts "
                        "and start-up files run on the host, so tools never write there",
                        suggestion=_SUGGESTION, details={"rule": environment.rule})
        if not inside:
            raise ToolFailure(ErrorCode.PATH_NOT_ALLOWED,
                              f"path {clip(self.target.display)!r} is not allowed: it resolves "
                              "outside the allowed directories",
                              suggestion="Use a path inside the working directory.")

    def __call__(self, dirfd: int, name: str) -> None:
        """The ``MkdirGuard`` of open_parent: the directory about to be created is checked."""
        self.check_resolved(dirfd, name, file=False)
