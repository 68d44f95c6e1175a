"""Files a model with only the ``filesystem`` grant planted for a later tooldeck process.

Two ways that used to work, each driven through a real deck session's ``file_write`` and then
the real later process:

1. ``python -m tooldeck`` started in a *subfolder* of the workdir imported a planted
   ``docs/tooldeck.py`` (or ``examples/tooldeck/__init__.py``): Python looks the package up
   with the current folder first on ``sys.path`` before any of tooldeck's code runs. Only the
   workdir's top and the deck's current folder were guarded; ``tooldeck`` is now protected in
   every folder, in every form the import system takes.
2. A trust store named with ``TOOLDECK_TRUST_FILE`` inside the workdir (a container's
   ``/app/state/trust.json``) was writable: the model recorded the SHA-256 of the project's
   untrusted ``pyproject.toml`` and the next deck applied its grants in full. Sessions now
   protect the store's path (as named and through symbolic links) when it lies in the workdir.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tooldeck._deck import _trust_store_rules
from tooldeck.testing import make_deck


def _deck():
    return make_deck(load_entry_points=["schema", "runner", "fs", "policy"])


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLDECK_DISABLE_PLUGINS": "faiss", **extra}
    env.pop("TOOLDECK_CONFIG", None)
    env.pop("TOOLDECK_PLUGINS", None)
    return env


def _python_m_tooldeck(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tooldeck", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


PACKAGE_FORMS = [
    "docs/tooldeck.py",
    "examples/tooldeck/__init__.py",
    "a/b/c/tooldeck.py",
    "docs/TOOLDECK.py",  # a case-insensitive file system's tooldeck.py
    "docs/tooldeck.py.",  # vfat / ntfs3 / CIFS store it as tooldeck.py
    "docs/tooldeck\u200b.py",
    "docs/tooldeck.cpython-311-x86_64-linux-gnu.so",
    "docs/tooldeck.abi3.so",
    "docs/tooldeck.so",
    "docs/tooldeck/__init__.cpython-311-x86_64-linux-gnu.so",
    "docs/tooldeck/__init__.so",
]


async def test_python_dash_m_tooldeck_in_a_subfolder_runs_nothing_planted(tmp_path: Path):
    work = tmp_path / "project"
    work.mkdir()
    marker = tmp_path / "ran-on-the-host"
    code = f"open({str(marker)!r}, 'w').write('planted')\n"
    async with _deck() as deck:
        session = deck.session(workdir=work, grants={"filesystem"})
        for path in PACKAGE_FORMS:
            result = await session.call("file_write", {"path": path, "content": code,
                                                       "create_dirs": True})
            assert not result.success and result.error.code == "PATH_NOT_ALLOWED", path
            assert "tooldeck" in result.error.details["rule"], (path, result.error)
        # What only looks alike stays the project's: notes, a subpackage's module, tooldeck_*.
        for path in ("docs/tooldeck.md", "docs/tooldeck/notes.txt", "src/app/tooldeck.txt",
                     "docs/tooldeck_notes.py", "docs/use_tooldeck.py"):
            written = await session.call("file_write", {"path": path, "content": "x\n",
                                                        "create_dirs": True})
            assert written.success, (path, written.error)
    for folder in ("docs", "examples", "a/b/c"):
        (work / folder).mkdir(parents=True, exist_ok=True)
        done = _python_m_tooldeck("--help", cwd=work / folder, env=_env())
        assert done.returncode == 0, done.stderr[-2000:]
        assert "usage" in done.stdout.lower()
    assert not marker.exists(), "a planted tooldeck module ran on the host"
    assert not (work / "docs" / "tooldeck.py").exists()
    assert not (work / "examples" / "tooldeck").exists()


def test_why_a_planted_tooldeck_module_in_the_current_folder_would_run(tmp_path: Path):
    """The mechanism the rules close: written by hand, the module *does* run."""
    marker = tmp_path / "ran"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "tooldeck.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    _python_m_tooldeck("--help", cwd=tmp_path / "docs", env=_env())
    assert marker.exists()


@pytest.mark.parametrize("python_path", [":{rest}", "{rest}:", "{rest}::{rest}", ".:{rest}"])
@pytest.mark.parametrize("safe_path", [False, True], ids=["plain", "-P"])
def test_an_empty_pythonpath_entry_imports_nothing_from_the_current_folder(
    tmp_path: Path, python_path: str, safe_path: bool
):
    """Python turns an empty PYTHONPATH entry (``PYTHONPATH=$PYTHONPATH:/x`` with PYTHONPATH
    unset) into the current folder: ``python -m tooldeck`` in ``docs/`` imported a
    ``docs/pluggy.py`` a tool had written there, before any of tooldeck's rules could see it."""
    marker = tmp_path / "ran"
    docs = tmp_path / "docs"
    docs.mkdir()
    for module in ("pluggy", "trio", "attrs", "cattrs"):  # imported by tooldeck's first lines
        (docs / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').write({module!r})\n")
    env = _env()
    rest = env.get("PYTHONPATH", "").strip(":") or os.path.dirname(os.path.dirname(__file__))
    env["PYTHONPATH"] = python_path.format(rest=rest)
    flags = ["-P"] if safe_path else []
    done = subprocess.run([sys.executable, *flags, "-m", "tooldeck", "--help"], cwd=docs,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert not marker.exists(), marker.read_text()
    assert done.returncode == 0, done.stderr[-2000:]


def _untrusted_pyproject(work: Path) -> Path:
    pyproject = work / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n[tool.tooldeck.session]\n'
                         'grants = ["filesystem", "shell", "code"]\nmax_level = "dangerous"\n')
    return pyproject


def _store_body(pyproject: Path) -> str:
    digest = hashlib.sha256(pyproject.read_bytes()).hexdigest()
    return json.dumps({"version": 1, "files": {os.path.realpath(pyproject): digest}})


@pytest.mark.parametrize("spelling", ["state/trust.json", "STATE/trust.json", "link/trust.json",
                                      "./state/../state/trust.json"])
async def test_a_trust_store_in_the_workdir_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
):
    work = tmp_path / "project"
    (work / "state").mkdir(parents=True)
    (work / "link").symlink_to("state")
    store = work / "state" / "trust.json"
    monkeypatch.setenv("TOOLDECK_TRUST_FILE", str(store))
    pyproject = _untrusted_pyproject(work)
    async with _deck() as deck:
        session = deck.session(workdir=work, grants={"filesystem"})
        result = await session.call("file_write", {"path": spelling,
                                                   "content": _store_body(pyproject)})
    # STATE/ too: rules match case-insensitively (the store on a case-insensitive system).
    assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
    assert result.error.details["rule"] == "/state/trust.json"
    assert not store.exists() and not (work / "STATE").exists()
    # The later process: a deck started in the project reads the store.
    shown = _python_m_tooldeck("config", "show", cwd=work,
                               env=_env(TOOLDECK_TRUST_FILE=str(store)))
    assert "NOT trusted" in shown.stdout, shown.stdout + shown.stderr
    grants = subprocess.run(
        [sys.executable, "-c",
         "from tooldeck import load_config; print(sorted(load_config().settings))"],
        cwd=work, env=_env(TOOLDECK_TRUST_FILE=str(store)), capture_output=True, text=True,
        timeout=120, check=True)
    assert "session" not in grants.stdout


async def test_a_trust_store_reached_through_a_symlink_is_protected_at_its_real_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    work = tmp_path / "project"
    (work / "real").mkdir(parents=True)
    (work / "named.json").symlink_to("real/store.json")  # the store does not exist yet
    monkeypatch.setenv("TOOLDECK_TRUST_FILE", str(work / "named.json"))
    pyproject = _untrusted_pyproject(work)
    async with _deck() as deck:
        session = deck.session(workdir=work, grants={"filesystem"})
        for path in ("named.json", "real/store.json"):
            result = await session.call("file_write", {"path": path,
                                                       "content": _store_body(pyproject)})
            assert result.error is not None and result.error.code == "PATH_NOT_ALLOWED", path
    assert not (work / "real" / "store.json").exists()


def test_a_trust_store_outside_the_workdir_adds_no_rule(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLDECK_TRUST_FILE", str(tmp_path / "elsewhere" / "trust.json"))
    (tmp_path / "work").mkdir()
    assert _trust_store_rules(str(tmp_path / "work")) == []
    assert _trust_store_rules(str(tmp_path)) == ["/elsewhere/trust.json"]
    monkeypatch.setenv("TOOLDECK_TRUST_FILE", str(tmp_path / "work" / "a[1]*.json"))
    assert _trust_store_rules(str(tmp_path / "work")) == ["/a[[]1[]][*].json"]
