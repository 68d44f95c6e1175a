"""The config trust store damaged on disk, or written by two processes at once.

A damaged store trusts nothing and is never silently replaced: it is set aside with one
warning when the user next trusts a file. A huge one is not read whole. A newer tooldeck's
store is left alone. Two `tooldeck config trust` at once keep both entries.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import tracemalloc

import pytest

from tooldeck._config import is_trusted, load_config, trust_config, untrust_config
from tooldeck_hookspecs import ConfigError


@pytest.fixture
def project(tmp_path):
    file = tmp_path / "proj" / "tooldeck.toml"
    file.parent.mkdir()
    file.write_text('[session]\ngrants = ["filesystem"]\n')
    store = tmp_path / "conf" / "trust.json"
    store.parent.mkdir()
    return file, store, {"TOOLDECK_TRUST_FILE": str(store)}


def _warnings(caplog, store):
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and str(store) in r.getMessage()]


@pytest.mark.parametrize("damage", ["truncated", "not_an_object", "empty"])
def test_a_damaged_store_is_set_aside_when_trusting(project, damage, caplog):
    """A damaged store was overwritten by the next `tooldeck config trust`: whatever it held
    was gone, with nothing left to recover from."""
    file, store, environ = project
    other = str(file.parent / "other.toml")
    store.write_text({
        "truncated": '{"version": 1, "files": {"' + other + '": "ab',
        "not_an_object": '["files"]',
        "empty": "",
    }[damage])
    before = store.read_bytes()
    assert not is_trusted(file, environ)
    trust_config(file, environ)
    assert is_trusted(file, environ)
    (aside,) = store.parent.glob("trust.json.corrupt-*")
    assert aside.read_bytes() == before
    assert list(json.loads(store.read_text())["files"]) == [os.path.realpath(file)]
    assert any("set aside" in m for m in _warnings(caplog, store))


def test_a_directory_in_place_of_the_store(project, tmp_path):
    """`tooldeck config trust` with a directory where the store belongs ended in a traceback
    (IsADirectoryError from os.replace)."""
    file, store, environ = project
    store.mkdir()
    env = {**os.environ, **environ, "TOOLDECK_HISTORY_FILE": "off"}
    env.pop("TOOLDECK_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "tooldeck", "config", "trust", str(file)],
        capture_output=True, text=True, env=env, cwd=file.parent, timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert str(store) in done.stderr and "set aside" in done.stderr
    assert store.is_file() and is_trusted(file, environ)


def test_an_unwritable_store_is_one_line(project):
    """A store that cannot be replaced (its folder read-only to us, here: a file in place of
    the folder) is a ConfigError naming it, not an OSError traceback."""
    file, store, _ = project
    blocker = store.parent / "not-a-folder"
    blocker.write_text("")
    environ = {"TOOLDECK_TRUST_FILE": str(blocker / "trust.json")}
    with pytest.raises(ConfigError, match="trust store"):
        trust_config(file, environ)


def test_a_newer_tooldecks_store_is_left_alone(project):
    file, store, environ = project
    text = json.dumps({"version": 2, "files": {os.path.realpath(file): {"sha256": "x"}}})
    store.write_text(text)
    with pytest.raises(ConfigError, match="newer tooldeck"):
        trust_config(file, environ)
    with pytest.raises(ConfigError, match="newer tooldeck"):
        untrust_config(file, environ)
    assert store.read_text() == text
    assert not is_trusted(file, environ)


def test_a_2gb_store_is_not_read_whole(project, caplog):
    """Every start read the whole store: a 2 GB file cost 4.2 GB and 15 s per start."""
    file, store, environ = project
    with store.open("wb") as fh:
        fh.truncate(2 << 30)  # sparse: costs no disk
    tracemalloc.start()
    try:
        config = load_config(cwd=file.parent, environ=environ)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not config.trusted
    assert peak < 64 << 20, f"peak {peak:,} bytes"
    assert _warnings(caplog, store)


def test_concurrent_trusts_keep_every_entry(project, tmp_path):
    """Three `tooldeck config trust` running at once lost entries (345 of 900 kept): each
    read the store, added its file and replaced the store with its own copy."""
    _, store, environ = project
    go = tmp_path / "go"
    script = textwrap.dedent(f"""
        import os, sys
        from tooldeck._config import trust_config
        tag = sys.argv[1]
        paths = []
        for i in range(120):
            path = os.path.join({str(tmp_path)!r}, f"{{tag}}-{{i}}.toml")
            with open(path, "w") as fh:
                fh.write(f"# {{tag}} {{i}}\\n")
            paths.append(path)
        print("ready", flush=True)
        while not os.path.exists({str(go)!r}):
            pass
        for path in paths:
            trust_config(path, {environ!r})
    """)
    procs = [
        subprocess.Popen([sys.executable, "-c", script, tag], stdout=subprocess.PIPE, text=True)
        for tag in "abc"
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    go.write_text("")
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    files = json.loads(store.read_text())["files"]
    assert len(files) == 360
    assert all(is_trusted(path, environ) for path in files)
