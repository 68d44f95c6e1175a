"""Python's start-up modules in every form the import system takes.

``sitecustomize.py`` was protected, but Python imports the *module* ``sitecustomize`` at
start-up from any folder on ``sys.path`` (``PYTHONPATH`` included): a package folder
``sitecustomize/__init__.py`` or an extension module ``sitecustomize.cpython-311-*.so`` ran as
surely, and a model with only the ``filesystem`` grant could write them. So could ``site.py``,
which a folder on ``PYTHONPATH`` puts before the standard library's own. Real Deck (schema,
runner, fs, policy), and a real interpreter showing what the planted file would have done.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

tooldeck_testing = pytest.importorskip("tooldeck.testing")

PLANTED = [
    ("sitecustomize/__init__.py", "sitecustomize"),
    ("usercustomize/__init__.py", "usercustomize"),
    ("sitecustomize.py", "sitecustomize.*"),
    ("sitecustomize.pyw", "sitecustomize.*"),
    ("sitecustomize.cpython-311-x86_64-linux-gnu.so", "sitecustomize.*"),
    ("sitecustomize.abi3.so", "sitecustomize.*"),
    ("lib/usercustomize.so", "usercustomize.*"),
    ("site.py", "site.py"),
    ("site.cpython-311-x86_64-linux-gnu.so", "site.*.so"),
    ("site.so", "site.so"),
    ("site/__init__.py", "**/site/__init__.py"),
    ("src/site/__init__.py", "**/site/__init__.py"),
]

# Names that only look alike stay ordinary source: a website's folder, a module about sites.
ORDINARY = [
    "site/index.html", "site/css/main.css", "website/site.css", "src/mysite.py",
    "site_config.py", "sites.py", "docs/site.md", "sitecustom.py", "customize_site.py",
]


def _deck():
    return tooldeck_testing.make_deck(load_entry_points=["schema", "runner", "fs", "policy"])


def test_a_sitecustomize_package_runs_at_interpreter_start_up(tmp_path):
    """Why the package form matters: Python imports it at start-up like the file."""
    (tmp_path / "sitecustomize").mkdir()
    (tmp_path / "sitecustomize" / "__init__.py").write_text("print('planted ran')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    ran = subprocess.run([sys.executable, "-c", "pass"], env=env, capture_output=True,
                         text=True, check=False, timeout=60)
    assert ran.stdout == "planted ran\n"


@pytest.mark.parametrize(("path", "rule"), PLANTED)
async def test_every_form_of_a_start_up_module_is_refused(tmp_path, path, rule):
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        result = await session.call("file_write", {"path": path, "content": "print('x')\n",
                                                   "create_dirs": True})
    assert not result.success and result.error.code == "PATH_NOT_ALLOWED", result
    assert f"rule {rule!r}" in result.error.message
    assert not any(tmp_path.iterdir())  # not even the folder on the way


async def test_names_that_only_look_alike_stay_writable(tmp_path):
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path, grants={"filesystem"})
        for path in ORDINARY:
            result = await session.call("file_write", {"path": path, "content": "x",
                                                       "create_dirs": True})
            assert result.success, (path, result.error)
