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

Names are also checked with trailing dots and spaces stripped (``tooldeck.toml.``): file systems
with Windows semantics (vfat, ntfs3, CIFS) store them as the protected name itself. And folded:
NFKC (fullwidth ``ＴＯＯＬＤＥＣＫ.toml``, ligatures) with default-ignorable code points removed
(``tooldeck\u200d.toml``, a soft hyphen, a BOM): case-insensitive file systems (ext4/f2fs
``casefold`` folders on kernels before 6.13, APFS, HFS+) drop those when they compare names, so
the planted name *is* the protected one there. Folding only ever adds refusals.

The pack also protects :data:`PACK_PROTECTED_PATHS`, files the host runs that the shared defaults
of :mod:`tooldeck_hookspecs.protected` do not list (yet).
"""

from __future__ import annotations

import collections
import functools
import os
import re
import unicodedata
from collections.abc import Sequence

from tooldeck_hookspecs import ErrorCode, ToolContext, ToolFailure
from tooldeck_hookspecs.protected import normalise_rules, protected_message, protected_rule

from ._safepath import Target, clip

__all__ = ["PACK_PROTECTED_PATHS", "STATS", "Guard", "fd_realpath", "fold_name"]

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


#: Files and folders a host tool loads or runs on its own (no user action that asks for it) that
#: the shared defaults (``DEFAULT_PROTECTED_PATHS``) miss; file_write refuses them as well. They
#: belong in the shared list, so that the sandbox binds them read-only too; until they are there,
#: this pack refuses them on its own. Rule syntax of :mod:`tooldeck_hookspecs.protected`.
PACK_PROTECTED_PATHS: tuple[str, ...] = (
    # A virtual environment, whatever its folder is called: the interpreter reads pyvenv.cfg at
    # start-up ('home' chooses the standard library it runs) and imports from site-packages on
    # every run; editors start it on their own to index the project.
    "pyvenv.cfg",
    "site-packages/",
    "dist-packages/",
    # IPython and Jupyter load *_config.py (Python) from the folder they start in.
    "ipython_config.py",
    "ipython_kernel_config.py",
    "jupyter_*_config.py",
    # devcontainer's other spelling (initializeCommand runs on the host); editors and coding
    # agents that start the MCP servers, language servers or tasks their project folder names.
    ".devcontainer.json",
    ".cursor/",
    ".gemini/",
    ".zed/",
    ".helix/",
    ".continue/",
    ".windsurf/",
    ".roo/",
    ".amazonq/",
    ".kiro/",
    ".opencode/",
    "opencode.json",
    "opencode.jsonc",
    # Toolchain pins that can name a folder of binaries to run (rustup's 'path'); mise's other
    # file names, and the '.config/mise.toml' it reads in every folder up the tree (a project's
    # own .config/ folder is tool configuration by that convention too).
    "rust-toolchain",
    "rust-toolchain.toml",
    "mise.*.toml",
    ".mise.*.toml",
    ".config/",
    # Shell and editor start-up files missing from the defaults (Debian's .bashrc sources
    # .bash_aliases; vim's 'exrc' reads .vimrc from the current folder).
    ".bash_aliases",
    ".zlogout",
    ".kshrc",
    ".mkshrc",
    ".cshrc",
    ".tcshrc",
    ".login",
    ".vimrc",
    ".gvimrc",
    # A root that is a home folder: ~/.local/bin is on PATH (a planted 'git' runs instead of
    # git) and ~/.local/share holds editor plugins; credential helpers and auth plugins run
    # commands (aws credential_process, kubectl exec, docker credsStore, gpg-agent's pinentry);
    # psql and sqlite3 run their rc file's shell escapes; X and PAM sessions source these.
    "/.local/",
    "/.aws/",
    "/.kube/",
    "/.docker/",
    "/.gnupg/",
    "/.vim/",
    "/.emacs",
    "/.emacs.el",
    "/.emacs.d/",
    "/.tmux.conf",
    "/.hgrc",
    "/.psqlrc",
    "/.sqliterc",
    "/.mailcap",
    "/.xprofile",
    "/.xinitrc",
    "/.xsession",
    "/.xsessionrc",
    "/.pam_environment",
)


#: File names (folded) that make their folder a git repository: git takes any folder holding a
#: valid HEAD, objects/ and refs/ for one (an "embedded bare repository") and then obeys its
#: 'config' (hooks, aliases, pager, sshCommand, credential helpers) for every git command run
#: inside it, a shell prompt's included. objects/ and refs/ are ordinary folder names and
#: 'config' an ordinary file name, but only git writes a file called HEAD: refusing that one
#: name (as a file, not as a folder) is enough to keep a planted folder from being a repository.
_REPO_MARKERS = frozenset({"head"})
_REPO_MARKER_RULE = "HEAD"


def _rules(context: ToolContext) -> tuple[str, ...]:
    """The defaults, the pack's own and the context's rules: extend-only, whatever it holds."""
    given = context.protected_paths or ()
    try:
        return _merged_rules(tuple(given))
    except TypeError:  # an unhashable entry: merge without the cache
        return _merged_rules.__wrapped__(tuple(given))


@functools.lru_cache(maxsize=64)
def _merged_rules(given: tuple[object, ...]) -> tuple[str, ...]:
    # Cached: every write builds a Guard, and merging ~120 rules costs ~70 µs each time.
    extra = [r for r in given if isinstance(r, str) and r.strip("/ ")]
    extra = [*PACK_PROTECTED_PATHS, *extra]
    try:
        return normalise_rules(extra)
    except ValueError:  # a '..' rule can never match; keep the others
        return normalise_rules(r for r in extra if ".." not in r.split("/"))


# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): invisible characters that
# case-insensitive file systems and many tools drop when they compare names.
_IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)


def fold_name(name: str) -> str:
    """``name`` as a case- and normalisation-insensitive file system may see it.

    NFKC, casefold, NFKC again (Unicode's caseless identifier match) and default-ignorable
    code points removed: ``ＴＯＯＬＤＥＣＫ.toml`` and ``tooldeck\u200d.toml`` both give
    ``tooldeck.toml``. A name that folds to nothing is kept as it was.
    """
    if name.isascii():
        return name  # the hot path: nothing to fold beyond the rule matcher's casefold
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
    return _IGNORABLE.sub("", folded) or name


def _variants(parts: Sequence[str]) -> list[str]:
    """The path, the path with trailing dots/spaces stripped from every component, and the
    stripped path folded (:func:`fold_name`); duplicates dropped."""
    joined = "/".join(parts)
    stripped = [p.rstrip(". ") or p for p in parts]
    folded = [fold_name(p) for p in stripped]
    # Folding can leave new trailing dots/spaces ('x.\u200b'): strip once more.
    folded = [p.rstrip(". ") or p for p in folded]
    return list(dict.fromkeys((joined, "/".join(stripped), "/".join(folded))))


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
        for variant in _variants(parts):
            rule = protected_rule(variant, self.rules)
            if rule is not None:
                raise self._refuse(rule)
            if file and variant.rsplit("/", 1)[-1].casefold() in _REPO_MARKERS:
                raise self._refuse(_REPO_MARKER_RULE)

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
        if not inside:
            raise ToolFailure(ErrorCode.PATH_NOT_ALLOWED,
                              f"path {clip(self.target.display)!r} is not allowed: it resolves "
                              "outside the allowed directories",
                              suggestion="Use a path inside the working directory.")

    def __call__(self, dirfd: int, name: str) -> None:
        """The ``MkdirGuard`` of open_parent: the directory about to be created is checked."""
        self.check_resolved(dirfd, name, file=False)
