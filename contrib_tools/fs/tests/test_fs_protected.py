"""Protected paths: file_write never creates or changes them, whatever the spelling."""

from __future__ import annotations

import os
import stat

import pytest
from tooldeck_tools_fs import _protect, file_read, file_write

from tooldeck_hookspecs import ErrorCode, ToolContext, ToolFailure

tooldeck_testing = pytest.importorskip("tooldeck.testing")


def _tree(root):
    """Every path under root with its content (files) or None (dirs), symlinks as targets."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                out[rel] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                out[rel] = None
            else:
                with open(path, "rb") as fh:
                    out[rel] = (fh.read(), stat.S_IMODE(os.stat(path).st_mode))
    return out


def _plant(root):
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    hook = root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    (root / "tooldeck.toml").write_text("[session]\n")
    (root / "pyproject.toml").write_text("[project]\nname='x'\n")
    (root / "sub").mkdir()
    os.symlink(".git", root / "link")
    os.symlink(".git/config", root / "cfg")
    os.symlink(str(root / ".git"), root / "abslink")
    os.symlink("link", root / "chain")
    os.symlink(".", root / "self")
    os.symlink("../.git/hooks", root / "sub" / "up")
    os.symlink(".git/hooks/post-checkout", root / "dangling")


ATTACKS = [
    ("tooldeck.toml", "tooldeck.toml"),
    ("./tooldeck.toml", "tooldeck.toml"),
    ("TOOLDECK.TOML", "tooldeck.toml"),
    ("tooldeck.toml.", "tooldeck.toml"),
    ("tooldeck.toml/", "tooldeck.toml"),
    ("tooldeck.toml/x", "tooldeck.toml"),
    ("sub/tooldeck.toml", "tooldeck.toml"),
    ("sub/../tooldeck.toml", "tooldeck.toml"),
    ("self/tooldeck.toml", "tooldeck.toml"),
    ("pyproject.toml", "pyproject.toml"),
    ("sub/PyProject.toml", "pyproject.toml"),
    (".git/config", ".git/"),
    (".GIT/config", ".git/"),
    (".git//config/.", ".git/"),
    ("sub/../.git/config", ".git/"),
    ("link/config", ".git/"),
    ("chain/config", ".git/"),
    ("abslink/config", ".git/"),
    ("cfg", ".git/"),
    ("link/hooks/pre-commit", ".git/"),
    ("sub/up/pre-commit", ".git/"),
    ("self/link/hooks/pre-commit", ".git/"),
    ("dangling", ".git/"),
    (".git/hooks/pre-push", ".git/"),
    ("new/.git/hooks/pre-commit", ".git/"),
    ("link/newdir/x", ".git/"),
    (".vscode/tasks.json", ".vscode/"),
    ("evil.pth", "*.pth"),
    ("__pycache__/mod.cpython-311.pyc", "__pycache__/"),
    ("pkg/__pycache__/__init__.cpython-311.pyc", "__pycache__/"),
    ("pkg/__PYCACHE__/x.txt", "__pycache__/"),
    ("mod.pyc", "*.pyc"),
    (".npmrc", ".npmrc"),
    ("web/.yarnrc.yml", ".yarnrc.yml"),
    (".pnpmfile.cjs", ".pnpmfile.cjs"),
    ("bunfig.toml", "bunfig.toml"),
    (".cargo/config.toml", ".cargo/"),
    ("crate/.cargo/config", ".cargo/"),
    (".hg/hgrc", ".hg/"),
    (".husky/pre-commit", ".husky/"),
    ("lefthook.yml", "lefthook.yml"),
    (".mvn/extensions.xml", ".mvn/"),
    ("mise.toml", "mise.toml"),
    (".pdbrc", ".pdbrc"),
    (".Rprofile", ".Rprofile"),
    (".devcontainer/devcontainer.json", ".devcontainer/"),
    (".nvim.lua", ".nvim.lua"),
    ("pkg/helpers.PYC", "*.pyc"),
    (".venv/lib/site.py", ".venv/"),
    (".bashrc", ".bashrc"),
    ("sub/.envrc", ".envrc"),
]


@pytest.mark.parametrize(("path", "rule"), ATTACKS)
async def test_protected_paths_are_never_written_through_the_deck(tmp_path, path, rule):
    _plant(tmp_path)
    before = _tree(tmp_path)
    deck = tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "fs", "policy"])
    async with deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        result = await session.call("file_write", {"path": path, "content": "[core]\nfsmonitor="
                                                   "touch /tmp/pwned\n", "create_dirs": True})
    assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
    assert "protected" in result.error.message or "not allowed" in result.error.message
    assert _tree(tmp_path) == before  # nothing created, nothing changed, modes kept


@pytest.mark.parametrize(("path", "rule"), ATTACKS)
def test_the_tool_itself_names_the_rule(tmp_path, path, rule, resolve_mode):
    # Directly, without the policy plugin in front: the tool's own check is what holds.
    _plant(tmp_path)
    before = _tree(tmp_path)
    ctx = ToolContext(session_id="t", workdir=str(tmp_path))
    with pytest.raises(ToolFailure) as info:
        file_write({"path": path, "content": "x", "create_dirs": True}, ctx)
    assert info.value.code == ErrorCode.PATH_NOT_ALLOWED
    assert f"rule {rule!r}" in info.value.message, info.value.message
    assert _tree(tmp_path) == before


def test_reading_protected_files_stays_allowed(tmp_path):
    _plant(tmp_path)
    ctx = ToolContext(session_id="t", workdir=str(tmp_path))
    assert file_read({"path": ".git/config"}, ctx)["content"] == "[core]\n"
    assert file_read({"path": "cfg"}, ctx)["content"] == "[core]\n"
    assert file_write({"path": "sub/ok.txt", "content": "fine"}, ctx)["created"] is True


def test_user_rules_are_honoured_and_extend_the_defaults(tmp_path):
    (tmp_path / "secrets").mkdir()
    os.symlink("secrets", tmp_path / "s")
    ctx = ToolContext(session_id="t", workdir=str(tmp_path), protected_paths=("/secrets/",))
    for path in ("secrets/key.txt", "s/key.txt", "SECRETS/k", ".git/config"):
        with pytest.raises(ToolFailure) as info:
            file_write({"path": path, "content": "x", "create_dirs": True}, ctx)
        assert info.value.code == ErrorCode.PATH_NOT_ALLOWED, path
    assert os.listdir(tmp_path / "secrets") == [] and not (tmp_path / ".git").exists()
    assert file_write({"path": "other/secrets.txt", "content": "x", "create_dirs": True},
                      ctx)["created"]


def test_without_proc_the_dotdot_fallback_is_used_and_reported(tmp_path, monkeypatch):
    _plant(tmp_path)
    before = _tree(tmp_path)
    monkeypatch.setattr(_protect, "PROC_FD", "/nonexistent/fd")
    _protect.STATS.clear()
    ctx = ToolContext(session_id="t", workdir=str(tmp_path))
    for path in ("link/config", "sub/up/pre-commit", "self/tooldeck.toml"):
        with pytest.raises(ToolFailure) as info:
            file_write({"path": path, "content": "x"}, ctx)
        assert info.value.code == ErrorCode.PATH_NOT_ALLOWED
    assert _tree(tmp_path) == before
    assert file_write({"path": "sub/fine.txt", "content": "x"}, ctx)["created"]
    assert _protect.STATS["realpath:dotdot"] > 0 and _protect.STATS["realpath:proc"] == 0
