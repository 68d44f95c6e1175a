"""Audit: planted files the host runs, spellings that reach them, and what a write leaves behind.

The incident: a model with only the ``filesystem`` grant planted a file the host later loaded.
These tests go through a real Deck (schema, runner, fs, policy) where the behaviour is the
deck's answer, and call the tool directly where the tool's own check is what holds.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys

import pytest
from tooldeck_tools_fs import file_read, file_write

from tooldeck_hookspecs import ErrorCode, ToolContext, ToolFailure

tooldeck_testing = pytest.importorskip("tooldeck.testing")


def _deck():
    return tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "fs", "policy"])


def _files(root):
    """Every path under root (relative), so a test can say nothing was created."""
    return sorted(os.path.relpath(os.path.join(d, n), root)
                  for d, dirs, files in os.walk(root) for n in dirs + files)


# Files (or folders) a host tool loads or runs on its own, without the user asking for it, that
# the shared defaults once missed (now in DEFAULT_PROTECTED_PATHS, so the sandbox binds them
# read-only too). Each with the rule the refusal names.
PLANTED = [
    # A virtual environment's interpreter reads pyvenv.cfg at start-up ('home' chooses the
    # standard library it runs) and imports from site-packages on every run, whatever the
    # folder is called (editors start it on their own to index the project).
    ("venv/pyvenv.cfg", "pyvenv.cfg"),
    ("pyvenv.cfg", "pyvenv.cfg"),
    ("venv/lib/python3.11/site-packages/trio/__init__.py", "site-packages/"),
    ("env/lib/python3/dist-packages/x.py", "dist-packages/"),
    # IPython/Jupyter load *_config.py from the folder they start in.
    ("ipython_config.py", "ipython_config.py"),
    ("jupyter_server_config.py", "jupyter_*_config.py"),
    # The devcontainer file's other spelling (initializeCommand runs on the host).
    (".devcontainer.json", ".devcontainer.json"),
    # Editors and coding agents that start MCP servers, language servers or tasks it names.
    (".cursor/mcp.json", ".cursor/"),
    (".gemini/settings.json", ".gemini/"),
    (".zed/settings.json", ".zed/"),
    (".helix/languages.toml", ".helix/"),
    (".continue/config.yaml", ".continue/"),
    (".roo/mcp.json", ".roo/"),
    (".amazonq/mcp.json", ".amazonq/"),
    (".kiro/settings/mcp.json", ".kiro/"),
    ("opencode.json", "opencode.json"),
    # Toolchain pins that name a folder of binaries to run, and mise's other file names.
    ("rust-toolchain.toml", "rust-toolchain.toml"),
    ("mise.dev.toml", "mise.*.toml"),
    (".mise.local.toml", ".mise.*.toml"),
    ("sub/.config/mise/config.toml", "**/.config/mise/"),
    ("sub/mise/config.toml", "**/mise/config.toml"),
    # Shell start-up files the defaults missed (Debian's .bashrc sources .bash_aliases).
    (".bash_aliases", ".bash_aliases"),
    (".kshrc", ".kshrc"),
    (".cshrc", ".cshrc"),
    (".vimrc", ".vimrc"),
    # A workdir that is a home folder: ~/.local/bin is on PATH (a planted 'git' runs instead
    # of git), credential helpers run commands, psql/sqlite3 run their rc files' shell escapes.
    (".local/bin/git", "/.local/"),
    (".config/nvim/init.lua", "/.config/"),
    (".aws/config", "/.aws/"),
    (".kube/config", "/.kube/"),
    (".docker/config.json", "/.docker/"),
    (".gnupg/gpg-agent.conf", "/.gnupg/"),
    (".tmux.conf", "/.tmux.conf"),
    (".hgrc", "/.hgrc"),
    (".psqlrc", "/.psqlrc"),
    (".sqliterc", "/.sqliterc"),
    (".emacs.d/init.el", "/.emacs.d/"),
    (".xprofile", "/.xprofile"),
    # More start-up code of a home folder, and R's .Renviron (read from the start folder too).
    (".ipython/profile_default/startup/00-x.py", "/.ipython/"),
    (".bashrc.d/x.sh", "/.bashrc.d/"),
    (".gradle/init.d/x.gradle", "/.gradle/init.d/"),
    (".logout", "/.logout"),
    (".screenrc", "/.screenrc"),
    (".wezterm.lua", "/.wezterm.lua"),
    (".wgetrc", "/.wgetrc"),
    (".mozilla/firefox/p/user.js", "/.mozilla/"),
    ("Library/LaunchAgents/x.plist", "/Library/LaunchAgents/"),
    (".Renviron", ".Renviron"),
    ("analysis/.Renviron", ".Renviron"),
]


@pytest.mark.parametrize(("path", "rule"), PLANTED)
async def test_planted_host_files_are_refused_through_the_deck(tmp_path, path, rule):
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        result = await session.call("file_write", {"path": path, "content": "x",
                                                   "create_dirs": True})
    assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
    assert f"rule {rule!r}" in result.error.message
    assert result.error.suggestion
    assert _files(tmp_path) == []  # no folder was created on the way either


# Ordinary source edits stay allowed: files a developer's tooling runs only when the user runs
# it (tests, builds, task runners) are source like any other.
ORDINARY = [
    "conftest.py", "tests/conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "setup.py",
    "noxfile.py", "Makefile", "Justfile", "Taskfile.yml", ".editorconfig", ".python-version",
    ".tool-versions", "src/app.py", "config/settings.toml", "docs/config.md",
    "src/site_packages.py", "venv_notes.txt", "src/local/bin/tool.sh", "mise.md",
    ".github/workflows/ci.yml", "sub/.local/x.txt", "notes/.config/todo.txt", "mise/notes.md",
    "sub/.ipython/notes.txt", "src/Library/LaunchAgents.md", "docs/.gradle/init.d/x.md",
]


async def test_ordinary_source_edits_stay_allowed(tmp_path, monkeypatch):
    # `python -m pytest` puts the repository on sys.path: its noxfile.py would be a module
    # importable from elsewhere, which a workdir's top may not shadow.
    here = os.path.realpath(os.getcwd())
    monkeypatch.setattr(sys, "path", [p for p in sys.path if os.path.realpath(p or ".") != here])
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        for path in ORDINARY:
            result = await session.call("file_write", {"path": path, "content": "x",
                                                       "create_dirs": True})
            assert result.success, (path, result.error)


# Spellings a file system may fold into the protected name: default-ignorable characters
# (zero-width joiner, soft hyphen, BOM) that case-insensitive file systems drop, and
# compatibility forms (fullwidth letters) that NFKC folds.
CONFUSABLES = [
    ("tooldeck\u200d.toml", "tooldeck.toml"),
    ("tool\u00addeck.toml", "tooldeck.toml"),
    ("\ufeffpyproject.toml", "pyproject.toml"),
    ("pyproject.to\u200bml", "pyproject.toml"),
    ("\uff34\uff2f\uff2f\uff2c\uff24\uff25\uff23\uff2b.toml", "tooldeck.toml"),
    (".g\u200cit/config", ".git/"),
    (".\uff47it/hooks/pre-commit", ".git/"),
    ("evil.p\ufe0fth", "*.pth"),
]


@pytest.mark.parametrize(("path", "rule"), CONFUSABLES)
def test_unicode_spellings_of_protected_names_are_refused(tmp_path, path, rule, resolve_mode):
    ctx = ToolContext(session_id="t", workdir=str(tmp_path))
    with pytest.raises(ToolFailure) as info:
        file_write({"path": path, "content": "x", "create_dirs": True}, ctx)
    assert info.value.code == ErrorCode.PATH_NOT_ALLOWED
    assert f"rule {rule!r}" in info.value.message
    assert _files(tmp_path) == []


def test_unicode_spellings_through_a_symlink_are_refused_too(tmp_path, resolve_mode):
    # The resolved check folds too: the lexical path is harmless, the real one is not.
    (tmp_path / "d").mkdir()
    os.symlink("d", tmp_path / "link")
    os.symlink("tooldeck\u200d.toml", tmp_path / "d" / "dangling")
    ctx = ToolContext(session_id="t", workdir=str(tmp_path))
    with pytest.raises(ToolFailure) as info:
        file_write({"path": "link/dangling", "content": "x"}, ctx)
    assert info.value.code == ErrorCode.PATH_NOT_ALLOWED
    assert not (tmp_path / "d" / "tooldeck\u200d.toml").exists()


@pytest.mark.parametrize("path", ["notes.txt/", "new/", "sub/notes.txt/", "notes.txt/.",
                                  "notes.txt//"])
def test_a_path_that_names_a_folder_never_creates_a_file(tmp_path, path, resolve_mode):
    # POSIX: a trailing '/' names a directory; creating a *file* 'notes.txt' instead surprises.
    (tmp_path / "sub").mkdir()
    ctx = ToolContext(session_id="t", workdir=str(tmp_path))
    with pytest.raises(ToolFailure) as info:
        file_write({"path": path, "content": "x", "create_dirs": True}, ctx)
    assert info.value.code == ErrorCode.INVALID_ARGUMENTS
    assert "folder" in info.value.message and info.value.suggestion
    assert _files(tmp_path) == ["sub"]


def test_reading_a_socket_says_it_is_not_a_regular_file(tmp_path, resolve_mode):
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s.sock"))
        ctx = ToolContext(session_id="t", workdir=str(tmp_path))
        with pytest.raises(ToolFailure) as info:
            file_read({"path": "s.sock"}, ctx)
    finally:
        sock.close()
    assert info.value.code == ErrorCode.EXECUTION_ERROR
    assert "not a regular file" in info.value.message, info.value.message
    assert info.value.suggestion


@pytest.fixture
def no_umask():
    """A deck started with umask 0 (some containers and service managers do that)."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize("atomic_mode", ["auto", "named"])
def test_new_files_and_folders_are_never_world_writable(tmp_path, no_umask, atomic_mode,
                                                        resolve_mode, monkeypatch):
    from tooldeck_tools_fs import _atomic

    monkeypatch.setattr(_atomic, "MODE", atomic_mode)
    ctx = ToolContext(session_id="t", workdir=str(tmp_path))
    assert file_write({"path": "a/b/new.py", "content": "x", "create_dirs": True},
                      ctx)["created"]
    for path in ("a", "a/b", "a/b/new.py"):
        mode = stat.S_IMODE(os.stat(tmp_path / path).st_mode)
        assert not mode & stat.S_IWOTH, (path, oct(mode))
    # A file that already was world-writable keeps its mode: that was the user's choice.
    (tmp_path / "shared.txt").write_text("old")
    os.chmod(tmp_path / "shared.txt", 0o666)
    file_write({"path": "shared.txt", "content": "new"}, ctx)
    assert stat.S_IMODE(os.stat(tmp_path / "shared.txt").st_mode) == 0o666


def test_a_hard_link_to_a_protected_file_is_replaced_not_written_through(tmp_path,
                                                                         resolve_mode):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n")
    os.link(tmp_path / ".git" / "config", tmp_path / "notes.txt")
    ctx = ToolContext(session_id="t", workdir=str(tmp_path))
    out = file_write({"path": "notes.txt", "content": "[core]\nfsmonitor=evil\n"}, ctx)
    assert (tmp_path / ".git" / "config").read_text() == "[core]\n"
    assert (tmp_path / "notes.txt").read_text() == "[core]\nfsmonitor=evil\n"
    # The broken link is said, not silent: the other name keeps the old content.
    assert "hard link" in out["note"] and out["hard_links"] == 2


async def test_long_names_and_folder_paths_say_what_to_do(tmp_path):
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        long_name = await session.call("file_write", {"path": "x" * 300, "content": "a"})
        folder = await session.call("file_write", {"path": ".", "content": "a"})
    assert long_name.error.code == "EXECUTION_ERROR"
    assert "too long" in long_name.error.message
    assert "shorter" in long_name.error.suggestion
    assert folder.error.code == "EXECUTION_ERROR"
    assert "notes/todo.txt" in folder.error.suggestion
    assert _files(tmp_path) == []


def _git_dir_of(folder) -> subprocess.CompletedProcess[str]:
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CEILING_DIRECTORIES"] = str(folder.parent)  # never find the repo this runs in
    return subprocess.run([git, "rev-parse", "--git-dir"], cwd=folder, env=env,
                          capture_output=True, text=True, check=False, timeout=60)


@pytest.mark.parametrize("head", ["HEAD", "head", "HEAD."])
def test_an_embedded_bare_repository_cannot_be_planted(tmp_path, head, resolve_mode):
    # git takes any folder holding HEAD, objects/ and refs/ for a repository, and then obeys
    # its 'config' (hooks, aliases, pager, sshCommand, credential helpers) for every git
    # command run inside it: a shell prompt's 'git status' is enough.
    ctx = ToolContext(session_id="t", workdir=str(tmp_path))
    for path, content in (("evil/config", "[core]\n\tsshCommand = touch pwned\n"),
                          ("evil/objects/.keep", ""), ("evil/refs/.keep", "")):
        file_write({"path": path, "content": content, "create_dirs": True}, ctx)
    with pytest.raises(ToolFailure) as info:
        file_write({"path": f"evil/{head}", "content": "ref: refs/heads/main\n"}, ctx)
    assert info.value.code == ErrorCode.PATH_NOT_ALLOWED
    assert "rule 'HEAD'" in info.value.message and info.value.suggestion
    assert _git_dir_of(tmp_path / "evil").returncode != 0  # not a repository for git


def test_folders_and_files_merely_named_like_head_stay_writable(tmp_path, resolve_mode):
    ctx = ToolContext(session_id="t", workdir=str(tmp_path))
    for path in ("templates/head/meta.html", "head.html", "src/Header.tsx", "HEAD.md"):
        assert file_write({"path": path, "content": "x", "create_dirs": True}, ctx)["created"]
