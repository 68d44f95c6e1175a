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
- a trailing ``/`` is accepted and means the same (it documents that the rule names a folder).

The list is extend-only: configuration adds rules with ``protected_paths = [...]`` at the top level
of the ``tooldeck`` table; nothing removes the defaults.

This module is pure (no I/O except :func:`find_protected`, which lists a folder tree).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

import attrs

__all__ = [
    "DEFAULT_PROTECTED_PATHS",
    "ProtectedMatch",
    "ProtectedScan",
    "find_protected",
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
    # git runs what these say: config (core.fsmonitor, core.hooksPath, aliases), hooks/*,
    # filters named in .gitattributes, submodule URLs.
    ".git/",
    ".gitmodules",
    ".gitattributes",
    ".gitconfig",
    ".pre-commit-config.yaml",
    # Environment loaders and shells started in the folder.
    ".envrc",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    # Editors and agents that run tasks or MCP servers named in their folder's configuration.
    ".vscode/",
    ".idea/",
    ".mcp.json",
    ".claude/",
    ".codex/",
    ".devcontainer/",
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
    # Tool managers that run scripts on entering the folder (mise's env sources and hooks).
    "mise.toml",
    ".mise.toml",
    "mise.local.toml",
    ".mise/",
    # Debuggers, REPLs and editors that run a start-up file found in the current folder.
    ".pdbrc",
    ".Rprofile",
    ".irbrc",
    ".pryrc",
    ".exrc",
    ".nvimrc",
    ".nvim.lua",
    ".gdbinit",
    ".lldbinit",
    # Python runs these at interpreter start-up when they lie on sys.path; a virtual
    # environment in the workdir is code the developer runs.
    ".venv/",
    "*.pth",
    "sitecustomize.py",
    "usercustomize.py",
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
)

_GLOB = re.compile(r"[*?\[]")


@attrs.frozen
class _Rule:
    text: str
    parts: tuple[str, ...]
    anchored: bool
    globbing: bool


@attrs.frozen
class ProtectedMatch:
    """A path that a protection rule covers."""

    #: The path, relative to the root it was checked against (``/``-separated).
    path: str
    #: The rule, as written in the list.
    rule: str


def normalise_rules(rules: Iterable[str] | None) -> tuple[str, ...]:
    """The defaults plus ``rules`` (deduplicated, order kept); raises ValueError on a bad rule.

    A bad rule is not a string, empty, or has a ``..`` component (it could never match a path
    that resolved beneath a root).
    """
    out = list(DEFAULT_PROTECTED_PATHS)
    for rule in rules or ():
        if not isinstance(rule, str) or not rule.strip("/ "):
            raise ValueError(f"a protected path rule must be a non-empty string, not {rule!r}")
        if ".." in rule.split("/"):
            raise ValueError(f"a protected path rule cannot contain '..': {rule!r}")
        if rule not in out:
            out.append(rule)
    return tuple(out)


@lru_cache(maxsize=64)
def _compile(rules: tuple[str, ...]) -> tuple[_Rule, ...]:
    compiled = []
    for text in rules:
        body = text.strip()
        anchored = body.startswith("/") or "/" in body.strip("/")
        parts = tuple(p.casefold() for p in body.strip("/").split("/") if p and p != ".")
        if parts:
            compiled.append(_Rule(text, parts, anchored, bool(_GLOB.search(body))))
    return tuple(compiled)


def _component_matches(pattern: str, name: str, globbing: bool) -> bool:
    return fnmatch.fnmatchcase(name, pattern) if globbing else name == pattern


def protected_rule(relative_path: str, rules: Sequence[str] | None = None) -> str | None:
    """The first rule that covers ``relative_path`` (``/``-separated, relative to its root).

    :param relative_path: a path already resolved beneath its root (no ``..``, no symlinks left
        to follow); a leading ``./`` or ``/`` is ignored.
    :param rules: the rule list (:func:`normalise_rules` output); the defaults when None.
    :returns: the rule as written, or None when nothing protects the path.
    """
    parts = [p.casefold() for p in relative_path.replace(os.sep, "/").split("/") if p and p != "."]
    if not parts:
        return None
    for rule in _compile(tuple(rules) if rules is not None else DEFAULT_PROTECTED_PATHS):
        if rule.anchored:
            n = len(rule.parts)
            if len(parts) >= n and all(
                _component_matches(p, name, rule.globbing)
                for p, name in zip(rule.parts, parts[:n], strict=True)
            ):
                return rule.text
        else:
            pattern = rule.parts[0]
            if any(_component_matches(pattern, name, rule.globbing) for name in parts):
                return rule.text
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


def find_protected(
    root: str,
    rules: Sequence[str] | None = None,
    *,
    max_depth: int = 4,
    max_entries: int = 20_000,
) -> ProtectedScan:
    """List the protected paths that exist under ``root`` (symlinks are not followed).

    The sandbox uses it to bind each match read-only, and again after a call to find protected
    paths the call created. The walk is bounded (``max_depth`` levels, ``max_entries`` entries):
    ``complete`` says whether it saw everything. A matching folder is not descended into.
    """
    compiled_rules = tuple(rules) if rules is not None else DEFAULT_PROTECTED_PATHS
    found: list[ProtectedMatch] = []
    seen = 0
    complete = True
    stack: list[tuple[str, int]] = [("", 0)]
    while stack:
        rel, depth = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel) if rel else root) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > max_entries:
                return ProtectedScan(tuple(found), False)
            path = f"{rel}/{entry.name}" if rel else entry.name
            rule = protected_rule(path, compiled_rules)
            if rule is not None:
                found.append(ProtectedMatch(path, rule))
                continue  # a protected folder is bound as a whole: no need to look inside
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if depth + 1 < max_depth:
                    stack.append((path, depth + 1))
                else:
                    complete = False
    return ProtectedScan(tuple(found), complete)
