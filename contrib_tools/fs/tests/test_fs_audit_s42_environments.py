"""A Python environment in the workdir, under any name, is never written by the fs tools.

``.venv/``, ``site-packages/`` and ``pyvenv.cfg`` were protected by name, but a virtual
environment called ``venv/`` (or ``env/``, ``.tox/py311/``) kept the rest writable: with only
the ``filesystem`` grant, a model replaced ``venv/bin/activate`` (sourced by the developer's next
``. venv/bin/activate``) and ``venv/bin/pip`` (a replaced file keeps its mode, so it stayed
executable), and the next shell or ``pip`` ran its code on the host. The fs pack now refuses any
path inside a folder that holds ``pyvenv.cfg`` or ``conda-meta``
(:func:`tooldeck_hookspecs.find_environment`), checked on the resolved folders.
"""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest

from tooldeck import testing as tooldeck_testing


def _deck():
    return tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "fs", "policy"])


def _planted(marker: Path) -> str:
    """A shell script (and a sourced file) that leaves ``marker`` when the host runs it."""
    return f"#!/bin/sh\ntouch {marker}\n"


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    """A workdir with a real virtual environment ``venv/`` and an executable console script."""
    work = tmp_path / "project"
    work.mkdir()
    venv.create(work / "venv", with_pip=False)
    script = work / "venv" / "bin" / "tooldeck"
    script.write_text("#!/bin/sh\necho the-real-script\n")
    script.chmod(0o755)
    return work, tmp_path / "ran-on-the-host"


@pytest.mark.parametrize("path", [
    "venv/bin/activate",
    "venv/bin/tooldeck",
    "venv/bin/new-script",
    "venv/share/jupyter/kernels/evil/kernel.json",
    "venv/etc/jupyter/nbconfig/notebook.json",
    "venv/include/x.h",
    "./venv/../venv/bin/activate",
    "VENV/bin/activate",  # another folder here (case-sensitive): written, see below
])
async def test_nothing_in_a_virtual_environment_is_written(project, path):
    work, marker = project
    before = (work / "venv" / "bin" / "activate").read_bytes()
    async with _deck() as deck:
        session = deck.session(workdir=work, grants={"filesystem"})
        result = await session.call("file_write", {"path": path, "content": _planted(marker),
                                                   "create_dirs": True})
    if path.startswith("VENV/"):
        # On a case-sensitive file system VENV/ is another folder, holding no environment:
        # nothing the host runs, so it is written.
        assert result.success, result.error
        return
    assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
    assert "Python environment" in result.error.message
    assert result.error.details["rule"] == "pyvenv.cfg"
    assert (work / "venv" / "bin" / "activate").read_bytes() == before
    assert not (work / "venv" / "share").exists() and not (work / "venv" / "etc").exists()

    # The later processes: a developer's shell activating the environment, its console script.
    shell = subprocess.run(["bash", "-c", ". venv/bin/activate && echo $VIRTUAL_ENV"], cwd=work,
                           capture_output=True, text=True, timeout=60, check=False)
    assert shell.returncode == 0 and shell.stdout.strip().endswith("venv"), shell
    script = subprocess.run([str(work / "venv" / "bin" / "tooldeck")], capture_output=True,
                            text=True, timeout=60, check=False)
    assert script.stdout.strip() == "the-real-script"
    assert not marker.exists(), "planted code ran on the host"


async def test_a_symlink_into_the_environment_is_refused_too(project):
    work, marker = project
    (work / "tools").symlink_to("venv/bin")
    async with _deck() as deck:
        session = deck.session(workdir=work, grants={"filesystem"})
        result = await session.call("file_write", {"path": "tools/activate",
                                                   "content": _planted(marker)})
    assert result.error is not None and result.error.code == "PATH_NOT_ALLOWED", result
    assert "touch" not in (work / "venv" / "bin" / "activate").read_text()


async def test_a_conda_environment_is_refused_and_ordinary_folders_stay_writable(tmp_path):
    work = tmp_path / "project"
    (work / "env" / "conda-meta").mkdir(parents=True)
    (work / "env" / "conda-meta" / "history").write_text("")
    # Folders that only look like environments: named venv/, a bin/ of the project's own.
    (work / "venv").mkdir()
    async with _deck() as deck:
        session = deck.session(workdir=work, grants={"filesystem"})
        refused = await session.call("file_write", {
            "path": "env/etc/conda/activate.d/evil.sh", "content": "touch /tmp/x\n",
            "create_dirs": True})
        assert refused.error is not None and refused.error.details["rule"] == "conda-meta"
        assert not (work / "env" / "etc").exists()
        for path in ("venv/bin/activate", "bin/run.sh", "src/app.py", "env.txt",
                     "envs/dev/readme.md"):
            written = await session.call("file_write", {"path": path, "content": "x\n",
                                                        "create_dirs": True})
            assert written.success, (path, written.error)

