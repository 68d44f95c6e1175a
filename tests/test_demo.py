"""`tooldeck demo --json`: the tour runs on embedded defaults; each step shows what it claims."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_demo_tour_shows_every_step(tmp_path):
    environ = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for variable in ("TOOLDECK_CONFIG", "TOOLDECK_PLUGINS", "TOOLDECK_DISABLE_PLUGINS"):
        environ.pop(variable, None)
    tooldeck = str(Path(sys.executable).with_name("tooldeck"))
    proc = subprocess.run(
        [tooldeck, "demo", "--json"],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = {s["step"].split(".")[0]: s for s in json.loads(proc.stdout)["steps"]}
    assert steps["1"]["tools"] >= 300
    hands = steps["2"]["hands"]
    assert all(h["tokens"] < steps["2"]["catalog_tokens"] / 10 for h in hands)
    assert "exchange_rate" in hands[1]["tools"] and "book_restaurant_table" in hands[2]["tools"]
    assert steps["3"]["result"]["error"]["code"] == "INVALID_ARGUMENTS"
    assert steps["4"]["result"]["error"]["code"] == "PATH_NOT_ALLOWED"
    assert steps["5"]["moderate"]["error"]["code"] == "PERMISSION_DENIED"
    assert steps["5"]["dangerous"]["error"]["code"] == "CONFIRMATION_REQUIRED"
    assert steps["6"]["cached"] == [False, True, True, True, True]
    assert steps["6"]["rate_limited"][0]["error"]["code"] == "RATE_LIMIT_EXCEEDED"
    assert steps["7"]["result"]["error"]["code"] == "SANDBOX_MEMORY_LIMIT"
    assert steps["7"]["next_call"]["success"] is True


@pytest.mark.parametrize("columns", [80, 200])
def test_demo_tables_fit_the_terminal_without_cutting(tmp_path, columns):
    # Hands and calls are tables whose cells wrap: at 80 columns no line is longer and no tool
    # name or outcome is cut to "…"; at 200 the same content is there.
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": str(columns)}
    for variable in ("TOOLDECK_CONFIG", "TOOLDECK_PLUGINS", "TOOLDECK_DISABLE_PLUGINS"):
        environ.pop(variable, None)
    tooldeck = str(Path(sys.executable).with_name("tooldeck"))
    proc = subprocess.run(
        [tooldeck, "demo"], capture_output=True, text=True, env=environ, cwd=tmp_path, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    too_long = [line for line in lines if len(line) > columns]
    assert too_long == []
    assert "…" not in proc.stdout
    # The tables are there, with their columns, and the names and outcomes in full.
    assert any(line.split() == ["┃", "tool", "┃", "score", "┃", "why", "┃"] for line in lines)
    assert any(line.split() == ["┃", "call", "┃", "latency", "┃", "outcome", "┃"] for line in lines)
    cells = " ".join(proc.stdout.replace("│", " ").split())
    for expected in (
        "book_restaurant_table",
        "exchange_rate",
        "dealt:",
        "cache hit",
        "RATE_LIMIT_EXCEEDED",
        "SANDBOX_MEMORY_LIMIT",
        "PATH_NOT_ALLOWED",
    ):
        assert expected in cells
