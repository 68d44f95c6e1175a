"""Modules a model plants where the deck imports from.

A hostile model with only the ``filesystem`` grant wrote ``trio.py`` into the workdir; the next
``python -m tooldeck`` started there imported it (Python puts the current folder first on
``sys.path``), and a ``numpy.py`` ran inside a live deck at its next lazy import. Two fixes, both
tested here with a real Deck (schema, runner, fs, policy) and real interpreters:

- ``python -m tooldeck`` no longer imports from the folder it was started in;
- a session whose workdir holds a folder this process imports from refuses to write, there,
  any module name importable from somewhere else, in every form (``name.py``, ``name/``,
  extension modules), while the project's own modules and ordinary files stay writable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

tooldeck_testing = pytest.importorskip("tooldeck.testing")
from tooldeck import _imports  # noqa: E402

# Modules `python -m tooldeck` imports on its way to the CLI: the package's dependencies, the
# standard library modules it loads after start-up, and tooldeck's own plugin packages.
PLANTED_MODULES = ["trio", "attrs", "pluggy", "cattrs", "json", "tooldeck_hookspecs",
                   "tooldeck_policy", "numpy", "argparse", "__future__", "threading",
                   "annotationlib", "org"]

SHADOWING = [
    ("json.py", "/json.py"),
    ("trio.py", "/trio.py"),
    ("trio/__init__.py", "/trio/__init__.py"),
    ("numpy/__init__.py", "/numpy/__init__.py"),
    ("tooldeck/__init__.py", "**/tooldeck/__init__.py"),
    ("tooldeck_policy/__init__.py", "/tooldeck_policy/__init__.py"),
    ("attrs.cpython-311-x86_64-linux-gnu.so", "/*.so"),
    ("trio/__init__.cpython-311-x86_64-linux-gnu.so", "/*/__init__.*.so"),
    ("subprocess.py", "/subprocess.py"),
    ("email/__init__.py", "/email/__init__.py"),
]

# Ordinary project files: the project's own modules, names that only look alike, modules below
# the top of the folder, CPython's own test package name.
ORDINARY = ["main.py", "helpers.py", "mypkg/__init__.py", "mypkg/json.py", "notes/json.py",
            "test.py", "json_tools.py", "docs/readme.md", "data.json", "numpy_notes.txt",
            "html/index.html", "json/data.json", "email/templates/welcome.txt"]


def _deck():
    return tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "fs", "policy"])


async def _write(session, path: str):
    return await session.call("file_write", {"path": path, "content": "print('x')\n",
                                             "create_dirs": True})


def _plant(folder: Path, names: list[str], marker: Path) -> None:
    for name in names:
        (folder / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n"
            "raise SystemExit('planted module ran')\n"
        )


def test_python_dash_m_tooldeck_imports_nothing_from_its_folder(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "ran.txt"
    _plant(work, PLANTED_MODULES, marker)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    ran = subprocess.run([sys.executable, "-m", "tooldeck", "--help"], cwd=work, env=env,
                         capture_output=True, text=True, check=False, timeout=120)
    assert not marker.exists(), marker.read_text()
    assert ran.returncode == 0, ran.stderr
    assert "usage" in ran.stdout.lower()


def test_the_same_folder_is_imported_from_without_the_fix(tmp_path):
    """Why it matters: a plain interpreter started there runs the planted module."""
    marker = tmp_path / "ran.txt"
    _plant(tmp_path, ["trio"], marker)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    ran = subprocess.run([sys.executable, "-c", "import trio"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=False, timeout=60)
    assert marker.read_text() == "trio\n" and ran.returncode != 0


@pytest.mark.parametrize(("path", "rule"), SHADOWING)
async def test_a_module_that_would_shadow_another_is_refused(tmp_path, monkeypatch, path, rule):
    monkeypatch.syspath_prepend(str(tmp_path))  # as for `python agent.py` started there
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        result = await _write(session, path)
    assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
    assert f"rule {rule!r}" in result.error.message
    assert not any(tmp_path.iterdir())  # not even the folder on the way


async def test_the_projects_own_modules_and_files_stay_writable(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        for path in ORDINARY:
            result = await _write(session, path)
            assert result.success, (path, result.error)
        # mypkg now lives here and nowhere else: changing it is changing the project.
        assert (await _write(session, "mypkg/__init__.py")).success


async def test_the_workdirs_top_is_protected_even_when_this_process_does_not_import_from_it(
    tmp_path,
):
    """A session under the ``tooldeck`` command does not import from its workdir, but the next
    ``python -m tooldeck`` or ``python agent.py`` started there does."""
    assert str(tmp_path) not in sys.path
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        for path, rule in (("json.py", "/json.py"), ("trio/__init__.py", "/trio/__init__.py"),
                           ("tooldeck/__init__.py", "**/tooldeck/__init__.py"),
                           ("__future__.py", "/__future__.py")):
            result = await _write(session, path)
            assert result.error is not None and f"rule {rule!r}" in result.error.message, path
        # Below the top, a folder Python does not import from keeps every name.
        for path in ("sub/json.py", "sub/trio/__init__.py", "sub/numpy.py", "main.py"):
            assert (await _write(session, path)).success, path


async def test_a_name_this_process_looked_for_and_did_not_find_is_protected(
    tmp_path, monkeypatch
):
    """An optional dependency that is not installed (cattrs tries ``annotationlib``, ``copy``
    tries ``org``): a file of that name would be imported at the next start."""
    name = "tooldeck_optional_dependency_not_installed"
    with pytest.raises(ImportError):
        __import__(name)
    assert name in _imports.missed_modules()
    (tmp_path / "src").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        for path in (f"src/{name}.py", f"src/{name}/__init__.py", f"src/{name}/portion.py",
                     f"{name}.py"):
            result = await _write(session, path)
            assert result.error is not None and result.error.code == "PATH_NOT_ALLOWED", path
        assert (await _write(session, "src/another_new_module.py")).success
    assert not (tmp_path / "src" / name).exists()


async def test_an_import_folder_below_the_workdir_is_protected_there(tmp_path, monkeypatch):
    (tmp_path / "src").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path / "src"))  # an editable install's src layout
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        refused = await _write(session, "src/json.py")
        assert refused.error is not None and "rule '/src/json.py'" in refused.error.message
        assert (await _write(session, "docs/json.py")).success  # not an import folder


async def test_the_folder_python_dash_m_started_in_stays_protected(tmp_path, monkeypatch):
    """The folder dropped from sys.path is first again at the next `python -m tooldeck`."""
    monkeypatch.setattr(_imports, "_DROPPED", [os.path.realpath(tmp_path)])
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        for path, rule in (("tooldeck/__init__.py", "**/tooldeck/__init__.py"),
                           ("trio.py", "/trio.py")):
            result = await _write(session, path)
            assert result.error is not None and f"rule {rule!r}" in result.error.message
    assert not any(tmp_path.iterdir())


async def test_sessions_of_one_deck_each_get_their_workdirs_rules(tmp_path, monkeypatch):
    plain, imported = tmp_path / "plain", tmp_path / "imported"
    (plain / "lib").mkdir(parents=True)
    (imported / "lib").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(imported / "lib"))
    async with _deck() as deck:
        first = deck.session(workdir=plain, grants={"filesystem"})
        second = deck.session(workdir=imported, grants={"filesystem"})
        assert (await _write(first, "lib/json.py")).success
        result = await _write(second, "lib/json.py")
        assert result.error is not None and "rule '/lib/json.py'" in result.error.message
        assert (await _write(first, "lib/trio.py")).success


def test_shadow_rules_name_every_form_and_skip_the_folders_own_modules(tmp_path):
    site = tmp_path / "site-packages"
    (site / "installed_pkg").mkdir(parents=True)
    (site / "installed_pkg" / "__init__.py").write_text("")
    (site / "nsonly").mkdir()  # a namespace package in a site folder counts
    (site / "single.py").write_text("")
    (site / "ext.cpython-311-x86_64-linux-gnu.so").write_text("")
    project = tmp_path / "project"
    (project / "own").mkdir(parents=True)
    (project / "own" / "__init__.py").write_text("")
    other = tmp_path / "other"
    (other / "plainfolder").mkdir(parents=True)  # not a package, outside a site folder
    (other / "regular").mkdir()
    (other / "regular" / "__init__.py").write_text("")
    roots = [str(project), str(site), str(other)]
    rules = set(_imports.shadow_rules(str(project), roots))
    for name in ("installed_pkg", "single", "ext", "regular", "json", "os"):
        assert {f"/{name}.py", f"/{name}/__init__.py"} <= rules, name
    assert {"/nsonly.py", "/nsonly/"} <= rules  # a namespace package: any portion joins it
    assert {"/*.so", "/*/__init__.so", "/*/__init__.*.so"} <= rules
    assert not any(r.startswith("/plainfolder") for r in rules)
    assert "/own.py" not in rules and "/own/" not in rules
    assert "/test.py" not in rules  # CPython's regression tests: nobody imports them
    # A workdir holding no import folder: rules for its top only.
    top_only = _imports.shadow_rules(str(site), [str(project)])
    assert "/json.py" in top_only and "/installed_pkg.py" not in top_only
    assert all(rule.count("/") <= 2 for rule in top_only)
