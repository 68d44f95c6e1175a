"""Protected paths: files and folders the model's tools never create or change.

Some files inside a writable workdir are not data but code or configuration the *host* runs or
reads later: tooldeck's own configuration (``tooldeck.toml``, ``pyproject.toml`` with its
``[tool.tooldeck]`` table), git's ``.git/`` (``config`` with ``core.fsmonitor``, ``hooks/*``),
shell start-up files, editor task files, Python start-up hooks (``*.pth``,
``sitecustomize.py``). A prompt-injected model that writes one of them runs code outside any
sandbox the next time a developer types ``git status`` or ``tooldeck ...``. So, like the OpenAI
Codex and Anthropic sandbox-runtime sandboxes keep ``.git`` and their own configuration
read-only inside writable roots, every tool that writes on the model's behalf refuses these paths
(``PATH_NOT_ALLOWED`` naming the rule) and the sandbox binds them read-only.

A rule is a small gitignore-style pattern, matched case-insensitively (git itself honours
``.GIT`` on case-insensitive file systems):

- ``name`` (no slash; ``*``, ``?`` and ``[...]`` allowed) matches a path component at any depth,
  and protects everything beneath a matching folder: ``.git`` covers ``.git/hooks/pre-commit``
  and ``sub/.git/config``;
- ``/name`` or ``a/b`` (a slash inside) is anchored at the root (the workdir, or the allowed
  folder the path lies in) and protects everything beneath it too;
- ``**/a/b`` (a leading ``**/``) matches ``a/b`` at any depth: ``**/.config/mise/`` covers
  ``sub/.config/mise/config.toml`` but not ``sub/.config/nvim/init.lua``;
- a trailing ``/`` is accepted and means the same (it documents that the rule names a folder).

Names are also matched with trailing dots and spaces stripped (``tooldeck.toml.``: file systems
with Windows semantics, vfat, ntfs3, CIFS, store it as the protected name) and folded
(:func:`fold_name`: NFKC and casefold with default-ignorable code points removed, so
``tooldeck\u200d.toml`` and fullwidth ``ＴＯＯＬＤＥＣＫ.toml`` are ``tooldeck.toml``), as
case-insensitive file systems compare them. Folding only ever adds matches.

One check is not a rule of the list: a *file* (anything but a folder) named ``HEAD``
(:data:`REPOSITORY_MARKER_FILES`) is protected wherever it lies, a folder of that name is not.
git takes any folder holding a valid ``HEAD``, ``objects/`` and ``refs/`` for a repository (an
"embedded bare repository") and obeys its ``config`` (hooks, aliases, pager, ``sshCommand``,
credential helpers) for every git command run inside it, a shell prompt's included.
:func:`protected_rule` reports it with ``is_file=True`` (rule ``"HEAD"``), and
:func:`find_protected` for every entry that is not a folder.

The list is extend-only: configuration adds rules with ``protected_paths = [...]`` at the top level
of the ``tooldeck`` table; nothing removes the defaults.

This module is pure (no I/O except :func:`find_protected`, which lists a folder tree, and
:func:`find_environment`, which looks for the markers of a Python environment).
"""

from __future__ import annotations

import fnmatch
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

import attrs

__all__ = [
    "DEFAULT_PROTECTED_PATHS",
    "ENVIRONMENT_MARKERS",
    "REPOSITORY_MARKER_FILES",
    "ProtectedMatch",
    "ProtectedScan",
    "find_environment",
    "find_protected",
    "fold_name",
    "host_which",
    "normalise_rules",
    "protected_rule",
    "protected_message",
]

#: The rules that always apply. Grouped by what the host does with the file.
DEFAULT_PROTECTED_PATHS: tuple[str, ...] = (
    # tooldeck's own configuration (and its state folder).
    "tooldeck.toml",
    ".tooldeck.toml",
    "pyproject.toml",
    ".tooldeck/",
    "tooldeck-trust.json",
    # tooldeck's own package in every form the import system takes, in every folder:
    # `python -m tooldeck` looks the package up with its current folder first on sys.path,
    # before any code of tooldeck's runs, so a `docs/tooldeck.py` (or `tooldeck/__init__.py`)
    # runs on the host as soon as someone starts `python -m tooldeck` in `docs/`. (Once
    # tooldeck/__init__.py runs, it stops importing from that folder: tooldeck._cwd.)
    "tooldeck.py",
    "tooldeck.so",
    "tooldeck.*.so",
    "**/tooldeck/__init__.py",
    "**/tooldeck/__init__.so",
    "**/tooldeck/__init__.*.so",
    # git runs what these say: config (core.fsmonitor, core.hooksPath, aliases), hooks/*,
    # filters named in .gitattributes, submodule URLs. (A planted bare repository's HEAD is
    # refused by REPOSITORY_MARKER_FILES, a file-only check.)
    ".git/",
    ".gitmodules",
    ".gitattributes",
    ".gitconfig",
    ".pre-commit-config.yaml",
    # Environment loaders and shells started in the folder (Debian's .bashrc sources
    # .bash_aliases).
    ".envrc",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".bash_aliases",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".kshrc",
    ".mkshrc",
    ".cshrc",
    ".tcshrc",
    ".login",
    # Editors and coding agents that run the tasks, MCP servers or language servers their
    # project folder's configuration names; devcontainer's files (initializeCommand runs on
    # the host).
    ".vscode/",
    ".idea/",
    ".mcp.json",
    ".claude/",
    ".codex/",
    ".devcontainer/",
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
    # Other version control systems and hook managers: Mercurial's .hg/hgrc names hooks; husky
    # and lefthook run the scripts their folder or file names at every commit.
    ".hg/",
    ".husky/",
    "lefthook.yml",
    ".lefthook.yml",
    # Package managers and build tools read these from the project folder and run what they
    # name: npm's script-shell and node-options, yarn's yarnPath, pnpm's hooks file, bun's
    # preload, cargo's runner and rustc-wrapper, Maven's extensions and JVM options.
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pnpmfile.cjs",
    "bunfig.toml",
    ".cargo/",
    ".mvn/",
    # Toolchain pins that can name a folder of binaries to run (rustup's 'path').
    "rust-toolchain",
    "rust-toolchain.toml",
    # Tool managers that run scripts on entering the folder (mise's env sources and hooks),
    # under every name mise reads in each folder up the tree: mise.toml, mise.local.toml,
    # mise.<env>.toml (and the dotted ones, also inside .config/), .mise/, .config/mise/,
    # mise/config.toml. (The root's whole .config/ is protected below.)
    "mise.toml",
    ".mise.toml",
    "mise.local.toml",
    "mise.*.toml",
    ".mise.*.toml",
    ".mise/",
    "**/.config/mise/",
    "**/mise/config.toml",
    "**/mise/config.*.toml",
    # Debuggers, REPLs and editors that run a start-up file found in the current folder (vim's
    # 'exrc' reads .vimrc; IPython and Jupyter load *_config.py, Python code).
    ".pdbrc",
    ".Rprofile",
    # R reads .Renviron from the folder it starts in too, and its R_PROFILE_USER names a file
    # of R code to run.
    ".Renviron",
    ".irbrc",
    ".pryrc",
    ".exrc",
    ".vimrc",
    ".gvimrc",
    ".nvimrc",
    ".nvim.lua",
    ".gdbinit",
    ".lldbinit",
    "ipython_config.py",
    "ipython_kernel_config.py",
    "jupyter_*_config.py",
    # Python runs these at interpreter start-up when they lie on sys.path. A virtual
    # environment in the workdir, whatever its folder is called, is code the developer runs:
    # the interpreter reads pyvenv.cfg at start-up ('home' chooses the standard library it
    # runs) and imports from site-packages on every run; editors start it on their own to index
    # the project.
    ".venv/",
    "pyvenv.cfg",
    "site-packages/",
    "dist-packages/",
    "*.pth",
    # ... in every form the import system takes: a module, a package folder, bytecode or an
    # extension module (sitecustomize/__init__.py and sitecustomize.cpython-311-*.so run as
    # surely as sitecustomize.py). site itself too: a folder on PYTHONPATH comes before the
    # standard library, so its site.py replaces Python's own at start-up.
    "sitecustomize",
    "sitecustomize.*",
    "usercustomize",
    "usercustomize.*",
    "site.py",
    "site.*.so",
    "site.so",
    "**/site/__init__.py",
    # Compiled bytecode: Python imports __pycache__/m.cpython-311.pyc instead of m.py when the
    # stamp in its header (the source's mtime and size, both readable) matches, and a lone m.pyc
    # on sys.path is imported where no m.py exists. Either runs code no reviewer sees in the
    # source. Sandboxed commands run with PYTHONDONTWRITEBYTECODE=1, so everyday work (running
    # tests) writes none.
    "__pycache__/",
    "*.pyc",
    # Installed-distribution metadata: a folder on sys.path (the workdir itself, for a script
    # started there) with a `*.dist-info/entry_points.txt` adds (or shadows) plugins every
    # entry-point scan loads, tooldeck's own included.
    "*.dist-info/",
    "*.egg-info/",
    # A workdir that is a home folder: what the user's tools run from there. git's second user
    # configuration, ssh's keys and client configuration, per-user services and autostart
    # entries, fish's start-up file, the user site-packages; and tooldeck's own state (use
    # history and embeddings: they steer which tools are dealt).
    "/.config/git/",
    "/.ssh/",
    "/.config/systemd/",
    "/.config/autostart/",
    "/.config/fish/",
    "/.local/lib/",
    "/.local/state/tooldeck/",
    "/.cache/tooldeck/",
    # ... and the rest of those folders: ~/.config is every XDG tool's configuration (nvim's
    # init.lua, mise's config), and a project's own .config/ is tool configuration by the same
    # convention (mise, cargo-nextest's setup scripts, dotnet's local tools); ~/.local/bin is on
    # PATH (a planted 'git' runs instead of git) and ~/.local/share holds editor plugins.
    "/.config/",
    "/.local/",
    # Credential helpers and auth plugins run commands (aws credential_process, kubectl exec,
    # docker credsStore, gpg-agent's pinentry); editors, tmux and Mercurial run their
    # start-up files; psql and sqlite3 run their rc file's shell escapes; X and PAM sessions
    # source these.
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
    # More start-up code of a home folder: IPython's startup/*.py, the folders Fedora's
    # .bashrc (and others' .profile) source, Gradle's init scripts (every build on the
    # machine), csh's logout script, screen's and wezterm's configuration (commands, Lua),
    # wget's use_askpass program, ptpython's config.py, browser and mail profiles
    # (extensions, user.js), xbindkeys' key commands and macOS login agents.
    "/.ipython/",
    "/.bashrc.d/",
    "/.profile.d/",
    "/.gradle/init.d/",
    "/.gradle/init.gradle",
    "/.gradle/init.gradle.kts",
    "/.logout",
    "/.screenrc",
    "/.wezterm.lua",
    "/.wgetrc",
    "/.ptpython/",
    "/.mozilla/",
    "/.thunderbird/",
    "/.xbindkeysrc",
    "/Library/LaunchAgents/",
)

#: File names (compared folded) that make their folder a git repository, protected as *files*
#: only (anything but a folder): git takes any folder holding a valid HEAD, objects/ and refs/
#: for one and then obeys its 'config' (hooks, aliases, pager, sshCommand, credential helpers)
#: for every git command run inside it. objects/ and refs/ are ordinary folder names and
#: 'config' an ordinary file name, but only git writes a file called HEAD: refusing that one
#: name is enough to keep a planted folder from being a repository. A folder named ``head``
#: (``templates/head/``) stays writable. Reported with the rule text ``"HEAD"``.
REPOSITORY_MARKER_FILES: tuple[str, ...] = ("HEAD",)

#: What makes a folder a Python environment: a virtual environment's ``pyvenv.cfg``, a conda
#: environment's ``conda-meta``. Everything inside such a folder is code the host runs
#: (:func:`find_environment`): ``bin/activate`` that a shell sources, ``bin/pip`` and the
#: console scripts (``bin/tooldeck``), conda's ``etc/conda/activate.d/*.sh``, Jupyter's
#: ``etc/jupyter/*.py`` and kernel specs under ``share/jupyter/``. ``.venv/``,
#: ``site-packages/`` and ``pyvenv.cfg`` are rules of the list, but the folder's name is the
#: user's choice (``venv/``, ``env/``, ``.tox/py311/``), so it is known by what it holds: a
#: writer checks the folders of its target (:func:`find_environment`), and :func:`find_protected`
#: reports the environment folder whole (the sandbox binds all of it read-only).
ENVIRONMENT_MARKERS: tuple[str, ...] = ("pyvenv.cfg", "conda-meta")

_GLOB = re.compile(r"[*?\[]")
_MARKERS = frozenset(m.casefold() for m in REPOSITORY_MARKER_FILES)

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
    ``tooldeck.toml``. An ASCII name is returned as it is (the matcher casefolds it); a name
    that folds to nothing is kept as it was.
    """
    if name.isascii():
        return name
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
    return _IGNORABLE.sub("", folded) or name


@attrs.frozen
class _Rule:
    index: int
    #: One entry per component: the casefolded name, or a compiled pattern for a glob.
    parts: tuple[str | re.Pattern[str], ...]

    def matches_at(self, names: Sequence[str], start: int) -> bool:
        if len(names) - start < len(self.parts):
            return False
        for part, name in zip(self.parts, names[start:], strict=False):
            if not (part == name if isinstance(part, str) else part.match(name)):
                return False
        return True


@attrs.frozen
class _Matcher:
    """A rule list compiled for speed: the sandbox matches every entry of a workdir tree."""

    #: Unanchored plain names (``.git``): name -> index of the first rule.
    names: dict[str, int]
    #: Unanchored globs (``*.pth``) as (index, pattern), in list order, and all of them as one
    #: pattern (a quick filter: most names match none).
    globs: tuple[tuple[int, re.Pattern[str]], ...]
    any_glob: re.Pattern[str] | None
    #: Anchored rules by their first component (plain), and those whose first one is a glob.
    anchored: dict[str, tuple[_Rule, ...]]
    anchored_globs: tuple[_Rule, ...]
    #: ``**/a/b`` rules.
    floating: tuple[_Rule, ...]
    texts: tuple[str, ...]

    def first(self, names: Sequence[str]) -> int | None:
        """The index of the first rule that covers the casefolded path ``names``."""
        best: int | None = None
        for name in names:
            index = self.names.get(name)
            if index is not None and (best is None or index < best):
                best = index
        if self.any_glob is not None and any(self.any_glob.match(n) for n in names):
            for index, pattern in self.globs:
                if best is not None and index > best:
                    break
                if any(pattern.match(n) for n in names):
                    best = index
                    break
        for rule in (*self.anchored.get(names[0], ()), *self.anchored_globs):
            if (best is None or rule.index < best) and rule.matches_at(names, 0):
                best = rule.index
        for rule in self.floating:
            if best is not None and rule.index > best:
                break
            if any(rule.matches_at(names, i) for i in range(len(names))):
                best = rule.index
                break
        return best


@attrs.frozen
class ProtectedMatch:
    """A path that a protection rule covers."""

    #: The path, relative to the root it was checked against (``/``-separated).
    path: str
    #: The rule, as written in the list (``"HEAD"`` for a repository marker file; the marker,
    #: ``"pyvenv.cfg"`` or ``"conda-meta"``, for a Python environment).
    rule: str
    #: The path is a folder that is a Python environment (it holds one of
    #: :data:`ENVIRONMENT_MARKERS`), protected whole whatever its name.
    environment: bool = False


def normalise_rules(rules: Iterable[str] | None) -> tuple[str, ...]:
    """The defaults plus ``rules`` (deduplicated, order kept); raises ValueError on a bad rule.

    A bad rule is not a string, empty, or has a ``..`` component (it could never match a path
    that resolved beneath a root).
    """
    out = list(DEFAULT_PROTECTED_PATHS)
    seen = set(out)  # a session adds a rule per importable module name (a thousand or so)
    for rule in rules or ():
        if not isinstance(rule, str) or not rule.strip("/ "):
            raise ValueError(f"a protected path rule must be a non-empty string, not {rule!r}")
        if ".." in rule.split("/"):
            raise ValueError(f"a protected path rule cannot contain '..': {rule!r}")
        if rule not in seen:
            seen.add(rule)
            out.append(rule)
    return tuple(out)


def _component(pattern: str) -> str | re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern)) if _GLOB.search(pattern) else pattern


@lru_cache(maxsize=64)
def _compile(rules: tuple[str, ...]) -> _Matcher:
    names: dict[str, int] = {}
    globs: list[tuple[int, re.Pattern[str]]] = []
    anchored: dict[str, list[_Rule]] = {}
    anchored_globs: list[_Rule] = []
    floating: list[_Rule] = []
    for index, text in enumerate(rules):
        body = text.strip()
        is_floating = body.startswith("**/")
        if is_floating:
            body = body[3:]
        parts = tuple(
            _component(p.casefold()) for p in body.strip("/").split("/") if p and p != "."
        )
        if not parts:
            continue
        rule = _Rule(index, parts)
        if len(parts) == 1 and not body.startswith("/"):  # a name at any depth ('**/x' too)
            if isinstance(parts[0], str):
                names.setdefault(parts[0], index)
            else:
                globs.append((index, parts[0]))
        elif is_floating:
            floating.append(rule)
        elif isinstance(parts[0], str):
            anchored.setdefault(parts[0], []).append(rule)
        else:
            anchored_globs.append(rule)
    any_glob = re.compile("|".join(f"(?:{p.pattern})" for _, p in globs)) if globs else None
    return _Matcher(
        names, tuple(globs), any_glob, {k: tuple(v) for k, v in anchored.items()},
        tuple(anchored_globs), tuple(floating), tuple(rules),
    )


def _variants(parts: list[str]) -> list[list[str]]:
    """The path's components casefolded; then with trailing dots/spaces stripped, and stripped
    and folded (:func:`fold_name`), when those differ."""
    raw = [p.casefold() for p in parts]
    if all(p.isascii() and p[-1] not in ". " for p in parts):
        return [raw]  # the hot path: nothing to strip or fold
    stripped = [p.rstrip(". ") or p for p in parts]
    folded = [fold_name(p) for p in stripped]
    # Folding can leave new trailing dots/spaces ('x.\u200b'): strip once more.
    folded = [p.rstrip(". ") or p for p in folded]
    out = [raw]
    for variant in ([p.casefold() for p in stripped], [p.casefold() for p in folded]):
        if variant not in out:
            out.append(variant)
    return out


def protected_rule(
    relative_path: str, rules: Sequence[str] | None = None, *, is_file: bool = False
) -> str | None:
    """The first rule that covers ``relative_path`` (``/``-separated, relative to its root).

    The path is matched as spelled, with trailing dots and spaces stripped from its names, and
    folded (:func:`fold_name`).

    :param relative_path: a path already resolved beneath its root (no ``..``, no symlinks left
        to follow); a leading ``./`` or ``/`` is ignored.
    :param rules: the rule list (:func:`normalise_rules` output); the defaults when None.
    :param is_file: the path names (or will name) something that is not a folder: a regular
        file, a symlink, ... Only then is a :data:`REPOSITORY_MARKER_FILES` name (``HEAD``)
        protected, with the rule text ``"HEAD"``.
    :returns: the rule as written, or None when nothing protects the path.
    """
    parts = [p for p in relative_path.replace(os.sep, "/").split("/") if p and p != "."]
    if not parts:
        return None
    matcher = _compile(tuple(rules) if rules is not None else DEFAULT_PROTECTED_PATHS)
    for names in _variants(parts):
        index = matcher.first(names)
        if index is not None:
            return matcher.texts[index]
        if is_file and names[-1] in _MARKERS:
            return next(m for m in REPOSITORY_MARKER_FILES if m.casefold() == names[-1])
    return None


def protected_message(path: str, rule: str) -> str:
    """The one wording every refusal uses, so a model and a log reader see the same thing."""
    return (
        f"{path!r} is a protected path (rule {rule!r}): tooldeck's configuration, git's "
        "metadata and other files the host runs are never written by a tool"
    )


@attrs.frozen
class ProtectedScan:
    """What :func:`find_protected` saw under one root."""

    #: Protected paths that exist, outermost only (``.git`` but not ``.git/hooks``).
    matches: tuple[ProtectedMatch, ...]
    #: True when the walk stopped early (depth or entry budget): deeper paths were not seen.
    complete: bool
    #: Entries below the top the walk counted against ``max_entries``.
    seen: int = 0
    #: With ``record_folders``: ``inode -> relative path`` of every folder the walk saw that no
    #: rule covers (the runner tells a folder a call made from one that was there before).
    folders: dict[int, str] = attrs.field(factory=dict)


def find_protected(
    root: str,
    rules: Sequence[str] | None = None,
    *,
    max_depth: int = 4,
    max_entries: int = 20_000,
    environments: bool = True,
    record_folders: bool = False,
) -> ProtectedScan:
    """List the protected paths that exist under ``root`` (symlinks are not followed).

    The sandbox uses it to bind each match read-only, and again after a call to find protected
    paths the call created. The walk is bounded (``max_depth`` levels, ``max_entries``
    entries below the top): ``complete`` says whether it saw everything. It goes level by
    level, and the top folder is always read whole: a call that made 60,000 files there no
    longer hid the ``tooldeck.toml`` it planted among them from a depth-first walk that ran out
    of entries, and the levels nearest the top, where what the host reads lies, come first. A
    matching folder is not descended into. Every entry that is not a folder (a symlink
    included: git reads a symlinked HEAD) is matched with ``is_file=True``, so a planted
    ``x/HEAD`` is found too.

    With ``environments`` (the default), a folder below ``root`` that holds one of
    :data:`ENVIRONMENT_MARKERS` (a virtual environment's ``pyvenv.cfg``, a conda environment's
    ``conda-meta``; compared case-insensitively) is reported whole, with ``environment=True``
    and the marker as its rule, whatever it is called: ``venv/bin/activate``, its console
    scripts and ``etc/conda/activate.d/*.sh`` are code the host runs as surely as its
    ``site-packages``. ``root`` itself is not checked (as :func:`find_environment`).

    A folder that cannot be listed (its path longer than ``PATH_MAX``, a permission) makes the
    scan incomplete: what lies in it was not seen. ``record_folders`` fills
    :attr:`ProtectedScan.folders`.
    """
    from collections import deque

    compiled_rules = tuple(rules) if rules is not None else DEFAULT_PROTECTED_PATHS
    markers = {m.casefold(): m for m in ENVIRONMENT_MARKERS} if environments else {}
    found: list[ProtectedMatch] = []
    folders: dict[int, str] = {}
    seen = 0
    complete = True
    # (relative path, depth, inode or -1)
    queue: deque[tuple[str, int, int]] = deque([("", 0, -1)])
    while queue:
        rel, depth, inode = queue.popleft()
        try:
            with os.scandir(os.path.join(root, rel) if rel else root) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone meanwhile: nothing in it can be read by anyone either
        except OSError:
            # Unseen is not clean: a .envrc planted where the folder's path is longer than
            # PATH_MAX was reported by no scan, and the call that left it was not withheld.
            complete = False
            continue
        if rel and markers:
            marker = next(
                (markers[e.name.casefold()] for e in entries if e.name.casefold() in markers),
                None,
            )
            if marker is not None:
                found.append(ProtectedMatch(rel, marker, environment=True))
                if folders.get(inode) == rel:
                    del folders[inode]  # a match after all, not a folder no rule covers
                continue  # protected (and bound) as a whole: no need to look inside
        for entry in entries:
            if depth:
                seen += 1
                if seen > max_entries:
                    return ProtectedScan(tuple(found), False, seen - 1, folders)
            path = f"{rel}/{entry.name}" if rel else entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            rule = protected_rule(path, compiled_rules, is_file=not is_dir)
            if rule is not None:
                found.append(ProtectedMatch(path, rule))
                continue  # a protected folder is bound as a whole: no need to look inside
            if is_dir:
                number = -1
                if record_folders:
                    try:
                        number = entry.inode()
                        folders[number] = path
                    except OSError:
                        pass
                if depth + 1 < max_depth:
                    queue.append((path, depth + 1, number))
                else:
                    complete = False
    return ProtectedScan(tuple(found), complete, seen, folders)


def find_environment(root: str, parts: Sequence[str]) -> ProtectedMatch | None:
    """The outermost folder ``root/parts[:i]`` (``i`` from 1 to ``len(parts)``) that is a
    Python environment (it holds one of :data:`ENVIRONMENT_MARKERS`), or None.

    A writer checks the folders of a path it is about to write (``parts``: the real path of
    the target's folder, relative to ``root``), so that nothing is added to or changed in an
    environment whatever its name. ``root`` itself is not checked: a root that *is* an
    environment was handed to the tools as such. The markers are looked up by their exact
    names (what Python and conda open; a case-insensitive file system finds any spelling).

    :returns: the folder (relative to ``root``) with the marker as its rule, else None.
    """
    folder = root
    for depth, part in enumerate(parts):
        folder = os.path.join(folder, part)
        for marker in ENVIRONMENT_MARKERS:
            try:
                os.lstat(os.path.join(folder, marker))
            except OSError:
                continue
            return ProtectedMatch("/".join(parts[: depth + 1]), marker)
    return None


def host_which(name: str) -> str | None:
    """The absolute path of the program ``name`` that the deck may start on the host, looked up
    in the absolute entries of ``PATH`` only (None: not found).

    ``shutil.which`` also searches relative entries (``.``, or an empty one, which means the
    current folder): with such a ``PATH``, ``which("bwrap")`` answered ``./bwrap``, and a deck
    started in its workdir would have run a program the model planted there, on the host,
    before any sandbox exists.
    """
    import shutil

    search = os.pathsep.join(
        entry for entry in os.environ.get("PATH", os.defpath).split(os.pathsep)
        if os.path.isabs(entry)
    )
    found = shutil.which(name, path=search) if search else None
    return os.path.abspath(found) if found else None
