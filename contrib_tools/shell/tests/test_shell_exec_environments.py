"""shell_exec cannot leave a Python environment, or a protected path, for the host to run.

A virtual environment is known by its ``pyvenv.cfg`` (a conda one by ``conda-meta``), not by its
folder's name: ``venv/bin/activate``, ``venv/bin/pip``, the console scripts and conda's
``etc/conda/activate.d/*.sh`` are code the host runs. The sandbox used to bind only an
environment's ``pyvenv.cfg`` and ``site-packages`` read-only, so a call rewrote
``venv/bin/activate`` and the next ``. venv/bin/activate`` ran it. And a protected path below
a folder (``sub/.git``) is bound where it lies: ``mv sub sub2`` took the bind along, the call
made a new ``sub/.git/hooks/pre-commit``, and the runner, which took a path that changed its
inode for the user's own editor saving it, left the planted one in place.

Real deck with the session's default settings (bubblewrap found by ``sandbox = "auto"``), real
sandbox, and then the real later host process (a shell sourcing ``activate``, ``git commit``,
``python -m tooldeck``), which must run nothing the call planted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

tooldeck_testing = pytest.importorskip("tooldeck.testing")

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

PY = "/usr/bin/python3"  # the system interpreter, inside the sandbox's read-only /usr
# A shell script run through Python: the policy's shell guard refuses shell syntax in argv, the
# sandbox is what has to hold (a model can always do this).
SHELL = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1], shell=True).returncode)"
PLANTED = "echo PLANTED-RAN"


def _deck():
    # No runner settings: the defaults a session gets (bubblewrap found by "auto", zygotes).
    return tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy", "shell"], config={}
    )


async def _approve(request) -> bool:
    return True


async def _sh(session, script: str):
    result = await session.call("shell_exec", {"command": [PY, "-c", SHELL, script]})
    if result.metadata.get("isolation") is not None:
        assert result.metadata["isolation"].startswith("bubblewrap"), result.metadata
    return result


def _output(result) -> str:
    data = result.data if result.success else (result.error.details or {}).get("result")
    return (data or {}).get("stdout", "") + (data or {}).get("stderr", "") if data else ""


def _host(argv: list[str], cwd: Path, **env: str) -> str:
    """A later process on the host, outside any sandbox: what it printed."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "VIRTUAL_ENV"))}
    environ.update(env)
    done = subprocess.run(argv, cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=120, check=False)
    return done.stdout + done.stderr


def _make_venv(path: Path) -> None:
    subprocess.run([PY, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    script = path / "bin" / "mytool"
    script.write_text("#!/bin/sh\necho real-tool\n")
    script.chmod(0o755)


def _make_conda(path: Path) -> None:
    (path / "conda-meta").mkdir(parents=True)
    (path / "conda-meta" / "history").write_text("")
    (path / "etc" / "conda" / "activate.d").mkdir(parents=True)
    (path / "etc" / "conda" / "activate.d" / "env.sh").write_text("echo real-activate\n")


# What a call tries in an existing environment, each by a way the shell offers.
ATTEMPTS = [
    f"echo '{PLANTED}' >> venv/bin/activate",
    f"echo '{PLANTED}' > venv/bin/mytool",
    f"echo '{PLANTED}' > venv/bin/pip",
    f"echo '{PLANTED}' > venv/bin/newtool && chmod +x venv/bin/newtool",
    "echo 'import os; os.system(\"echo PLANTED-RAN\")' > "
    "venv/lib/python3.11/site-packages/zz.pth",
    f"echo '{PLANTED}' >> cenv/etc/conda/activate.d/env.sh",
    f"echo '{PLANTED}' > cenv/etc/conda/activate.d/zz.sh",
    "rm -rf venv/bin && mkdir venv/bin",
    "mv venv/bin venv/bin2",
    "ln venv/bin/activate act-link && echo x >> act-link",
    "ln -s ../../../payload.sh cenv/etc/conda/activate.d/link.sh",
]


async def test_an_existing_environment_is_read_only_whatever_its_name(tmp_path: Path) -> None:
    _make_venv(tmp_path / "venv")
    _make_conda(tmp_path / "cenv")
    (tmp_path / "payload.sh").write_text(f"{PLANTED}\n")
    before = {p: p.read_bytes() for p in (tmp_path / "venv").rglob("*")
              if p.is_file() and not p.is_symlink()}
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, confirm=_approve)
        for script in ATTEMPTS:
            result = await _sh(session, script)
            out = _output(result)
            assert "Read-only file system" in out or "cross-device" in out, (script, result)
    after = {p: p.read_bytes() for p in (tmp_path / "venv").rglob("*")
             if p.is_file() and not p.is_symlink()}
    assert after == before
    assert sorted(os.listdir(tmp_path / "cenv" / "etc" / "conda" / "activate.d")) == ["env.sh"]
    # The later host process: a developer's shell activating either environment.
    out = _host(["/bin/sh", "-c", ". venv/bin/activate && mytool && python -c pass"], tmp_path)
    assert "real-tool" in out and "PLANTED" not in out, out
    out = _host(["/bin/sh", "-c", "for f in cenv/etc/conda/activate.d/*.sh; do . ./$f; done"],
                tmp_path)
    assert out == "real-activate\n", out


async def test_a_new_environment_is_removed_whole_and_the_model_is_told(tmp_path: Path) -> None:
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, confirm=_approve)
        result = await _sh(session, f"{PY} -m venv --without-pip newenv && "
                                    f"echo '{PLANTED}' >> newenv/bin/activate")
        assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
        assert "'newenv' is a Python environment (rule 'pyvenv.cfg'" in result.error.message
        assert "/tmp" in result.error.suggestion
        assert result.error.details["protected"][0] == {
            "path": "newenv", "rule": "pyvenv.cfg", "environment": True}
        assert not (tmp_path / "newenv").exists()
        result = await _sh(session, "mkdir -p c/conda-meta c/etc/conda/activate.d && "
                                    f"echo '{PLANTED}' > c/etc/conda/activate.d/a.sh")
        assert not result.success and "'c' is a Python environment" in result.error.message
        assert not (tmp_path / "c").exists()
        # What is legitimate still works: an environment under the call's own /tmp.
        result = await _sh(session, f"{PY} -m venv --without-pip /tmp/env && "
                                    "/tmp/env/bin/python -c 'import sys; print(sys.prefix)'")
        assert result.success and result.data["stdout"] == "/tmp/env\n", result
    assert os.listdir(tmp_path) == []


async def test_making_a_users_folder_an_environment_keeps_its_files(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "main.py").write_text("print('user code')\n")
    (proj / "src" / "lib.py").write_text("X = 1\n")
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, confirm=_approve)
        result = await _sh(session, f"cd proj && {PY} -m venv --without-pip . && "
                                    f"echo '{PLANTED}' >> bin/activate && "
                                    "echo 'import os' > lib/python3.11/site-packages/zz.pth")
        assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
        assert result.error.message.startswith("the call made 'proj' a Python environment")
        assert "the folder's other files were kept" in result.error.message
        removed = {p["path"] for p in result.error.details["protected"]}
        assert removed == {"proj", "proj/lib/python3.11/site-packages"}
        # The user's files are there; the folder is no environment, and stays writable.
        assert (proj / "main.py").read_text() == "print('user code')\n"
        assert (proj / "src" / "lib.py").read_text() == "X = 1\n"
        assert not (proj / "pyvenv.cfg").exists()
        assert not (proj / "lib" / "python3.11" / "site-packages").exists()
        result = await _sh(session, "echo more > proj/notes.txt && cat proj/notes.txt")
        assert result.success and result.data["stdout"] == "more\n", result


async def test_a_protected_path_replaced_through_a_renamed_folder_is_put_back(
    tmp_path: Path,
) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    env = {"GIT_CEILING_DIRECTORIES": str(tmp_path), "HOME": str(tmp_path),
           "GIT_CONFIG_NOSYSTEM": "1"}
    _host(["git", "init", "-q", "."], sub, **env)
    _make_venv(tmp_path / "apps" / "venv")
    marker = tmp_path / "hook-ran"
    hook = f"#!/bin/sh\ntouch {marker}\n"
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, confirm=_approve)
        result = await _sh(session, (
            "mv sub sub2 && mkdir -p sub/.git/hooks && cp -r sub2/.git/* sub/.git/ ; "
            f"printf '{hook}' > sub/.git/hooks/pre-commit && chmod +x sub/.git/hooks/pre-commit"
        ))
        assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
        result = await _sh(session, (
            "mv apps apps2 && mkdir -p apps && cp -r apps2/venv apps/venv && "
            f"echo '{PLANTED}' >> apps/venv/bin/activate"
        ))
        assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
        assert "'apps/venv' is a Python environment" in result.error.message
    # The user's repository and environment are back where they were, and nothing planted ran.
    assert not (sub / ".git" / "hooks" / "pre-commit").exists()
    assert not (tmp_path / "sub2" / ".git").exists()
    out = _host(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                 "--allow-empty", "-m", "x"], sub, **env)
    assert not marker.exists(), out
    out = _host(["/bin/sh", "-c", ". apps/venv/bin/activate && mytool"], tmp_path)
    assert out == "real-tool\n", out
    assert not (tmp_path / "apps2" / "venv").exists()


async def test_a_folder_renamed_to_a_protected_name_goes_back_or_goes(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "tasks.json").write_text('{"tasks": []}\n')
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, confirm=_approve)
        result = await _sh(session, "mv src .vscode")
        assert not result.success and "'.vscode' is a protected path" in result.error.message
        # The user's folder is put back, not deleted.
        assert (tmp_path / "src" / "tasks.json").read_text() == '{"tasks": []}\n'
        assert not (tmp_path / ".vscode").exists()
        # Its name taken again, it cannot go back: it must not stay where an editor reads it.
        result = await _sh(session, "mv src .vscode && mkdir src")
        assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
        assert not (tmp_path / ".vscode").exists()


@pytest.mark.parametrize("script", [
    "mkdir -p docs && echo 'print(\"PLANTED-RAN\")' > docs/tooldeck.py",
    "mkdir -p docs/tooldeck && echo 'print(\"PLANTED-RAN\")' > docs/tooldeck/__init__.py",
    "mkdir -p docs/__pycache__ && echo x > docs/__pycache__/tooldeck.cpython-311.pyc",
])
async def test_python_dash_m_tooldeck_runs_nothing_a_call_planted(
    tmp_path: Path, script: str
) -> None:
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, confirm=_approve)
        result = await _sh(session, script)
        assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
    (tmp_path / "docs").mkdir(exist_ok=True)
    # The host's `python -m tooldeck` started in that folder, with tooldeck importable as it
    # is for these tests (no empty PYTHONPATH entry: that one means "the current folder").
    path = os.pathsep.join(p for p in sys.path if p and os.path.isabs(p))
    out = _host([sys.executable, "-m", "tooldeck", "--version"], tmp_path / "docs",
                PYTHONPATH=path)
    assert "PLANTED" not in out and "tooldeck" in out.lower(), out
