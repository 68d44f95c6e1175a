"""Host files once protected by file_write only are protected inside the sandbox too.

The rules of the fs pack's former ``PACK_PROTECTED_PATHS`` (virtual environments, coding
agents' folders, more shell start-up files, a root's ``.config/``...) and its embedded bare
repository check (a *file* named ``HEAD``) are now shared defaults: a sandboxed shell_exec that
creates one gets ``PATH_NOT_ALLOWED`` and what it created is removed, and existing ones are
mounted read-only. Real deck, real bubblewrap.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

tooldeck_testing = pytest.importorskip("tooldeck.testing")

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

PY = "python3"  # the system interpreter, inside the sandbox's read-only /usr

# Creates the file named by argv[1] (and its folders) with argv[2], or says why it could not.
WRITE = (
    "import os, sys\n"
    "path, text = sys.argv[1], sys.argv[2]\n"
    "try:\n"
    "    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)\n"
    "    open(path, 'a').write(text)\n"
    "    print('written')\n"
    "except OSError as exc:\n"
    "    print('refused', exc.strerror)\n"
)


def _deck():
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "shell"],
        config={"runner": {"sandbox": "bubblewrap"}},
    )


async def _approve(request) -> bool:
    return True


def _git_dir_of(folder) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CEILING_DIRECTORIES"] = str(folder.parent)  # never find the repo this runs in
    return subprocess.run(["git", "rev-parse", "--git-dir"], cwd=folder, env=env,
                          capture_output=True, text=True, check=False, timeout=60)


# Paths no default rule covered before the fs pack's rules moved into the defaults, with the
# rule the refusal names.
PLANTED = [
    ("env/pyvenv.cfg", "pyvenv.cfg"),
    ("lib/site-packages/x.py", "site-packages/"),
    (".cursor/mcp.json", ".cursor/"),
    (".config/nextest.toml", "/.config/"),
    ("sub/.config/mise/config.toml", "**/.config/mise/"),
    (".bash_aliases", ".bash_aliases"),
    ("ipython_config.py", "ipython_config.py"),
    ("sub/HEAD", "HEAD"),
    # Python's start-up modules as a package or an extension module, not only as a .py file.
    ("sitecustomize/__init__.py", "sitecustomize"),
    ("usercustomize.cpython-311-x86_64-linux-gnu.so", "usercustomize.*"),
    ("site.py", "site.py"),
]


async def test_host_files_a_sandboxed_command_plants_do_not_survive(workdir):
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approve)
        for path, rule in PLANTED:
            result = await session.call("shell_exec", {"command": [PY, "-c", WRITE, path, "x"]})
            assert not result.success and result.error.code == "PATH_NOT_ALLOWED", (path, result)
            assert f"rule {rule!r}" in result.error.message, (path, result.error.message)
            assert "was removed" in result.error.message
            assert not (workdir / path).exists(), path


async def test_an_embedded_bare_repository_cannot_be_planted(workdir):
    # git takes any folder holding HEAD, objects/ and refs/ for a repository and obeys its
    # config (hooks, aliases, sshCommand...) for every git command run inside it.
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approve)
        bare = await session.call("shell_exec", {"command": ["git", "init", "-q", "--bare",
                                                             "evil"]})
        assert not bare.success and bare.error.code == "PATH_NOT_ALLOWED", bare
        assert "rule 'HEAD'" in bare.error.message
        assert not (workdir / "evil" / "HEAD").exists()
        assert _git_dir_of(workdir / "evil").returncode != 0  # not a repository for git

        (workdir / "x" / "objects").mkdir(parents=True)
        (workdir / "x" / "refs").mkdir()
        head = [PY, "-c", WRITE, "x/HEAD", "ref: refs/heads/main\n"]
        planted = await session.call("shell_exec", {"command": head})
        assert not planted.success and planted.error.code == "PATH_NOT_ALLOWED", planted
        assert not (workdir / "x" / "HEAD").exists()
        assert _git_dir_of(workdir / "x").returncode != 0

        # A folder named like it is an ordinary folder.
        folder = await session.call(
            "shell_exec", {"command": [PY, "-c", WRITE, "templates/head/meta.html", "<meta>"]}
        )
        assert folder.success and folder.data["stdout"] == "written\n", folder
    assert (workdir / "templates" / "head" / "meta.html").read_text() == "<meta>"


async def test_existing_host_files_are_read_only_inside(workdir):
    (workdir / ".cursor").mkdir()
    (workdir / ".cursor" / "mcp.json").write_text("{}")
    (workdir / "repo").mkdir()
    (workdir / "repo" / "HEAD").write_text("ref: refs/heads/main\n")
    (workdir / "env").mkdir()
    (workdir / "env" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approve)
        for path in (".cursor/mcp.json", ".cursor/new.json", "repo/HEAD", "env/pyvenv.cfg"):
            result = await session.call("shell_exec", {"command": [PY, "-c", WRITE, path, "!"]})
            assert result.success, (path, result.error)
            assert result.data["stdout"] == "refused Read-only file system\n", (path, result.data)
        moved = await session.call("shell_exec", {"command": ["mv", "repo/HEAD", "repo/x"]})
        assert moved.success and moved.data["exit_code"] != 0, moved
    assert (workdir / ".cursor" / "mcp.json").read_text() == "{}"
    assert not (workdir / ".cursor" / "new.json").exists()
    assert (workdir / "repo" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert (workdir / "env" / "pyvenv.cfg").read_text() == "home = /usr/bin\n"


async def test_a_virtual_environment_in_the_workdir_is_refused(workdir):
    # The everyday cost, consistent with .venv/ being protected: the host would run what a
    # planted environment holds (pyvenv.cfg's 'home', site-packages' .pth files and modules).
    async with _deck() as deck:
        session = deck.session(workdir=workdir, confirm=_approve)
        venv = await session.call("shell_exec", {"command": [PY, "-m", "venv", "--without-pip",
                                                             "env"]})
        assert not venv.success and venv.error.code == "PATH_NOT_ALLOWED", venv
        rules = {p["rule"] for p in venv.error.details["protected"]}
        assert rules & {"pyvenv.cfg", "site-packages/"}, rules
    assert not (workdir / "env" / "pyvenv.cfg").exists()
    assert not list(workdir.rglob("site-packages"))
