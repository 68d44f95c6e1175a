"""The examples run: the custom policy combines with the defaults, the tool pack installs and
registers through its entry point, and the agent loops exit cleanly without a key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tooldeck import ErrorCode
from tooldeck.testing import make_deck

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))
import custom_policy  # noqa: E402


async def test_custom_policy_works_alongside_the_default_policy(tmp_path):
    deck = make_deck(custom_policy, load_entry_points=["schema", "runner", "policy", "fs"])
    async with deck:
        bob = deck.session(workdir=tmp_path, grants={"filesystem"}, attributes={"user": "bob"})
        env = await bob.call("file_write", {"path": "config/.env", "content": "X=1"})
        normal = await bob.call("file_write", {"path": "notes.txt", "content": "hi"})
        escape = await bob.call("file_write", {"path": "../escape.txt", "content": "x"})
        ungranted = await deck.session(workdir=tmp_path).call(
            "file_write", {"path": "n2.txt", "content": "x"}
        )
    assert env.error.code is ErrorCode.PATH_NOT_ALLOWED
    assert env.error.plugin == "custom_policy" and ".env" in env.error.message
    assert not (tmp_path / "config" / ".env").exists()
    assert normal.success and (tmp_path / "notes.txt").read_text() == "hi"
    # The defaults still apply next to it: traversal and grants.
    assert escape.error.code is ErrorCode.PATH_NOT_ALLOWED and escape.error.plugin == "policy"
    assert ungranted.error.code is ErrorCode.PERMISSION_DENIED


@pytest.mark.slow
def test_the_example_tool_pack_installs_and_registers(tmp_path):
    # pip install the pack into its own folder; a fresh `tooldeck` process that sees that folder
    # must find the tools through the pack's entry point alone.
    target = tmp_path / "pack"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(EXAMPLES / "custom_tool_pack"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    environ = {**os.environ, "PYTHONPATH": str(target), "TOOLDECK_PLUGINS": "schema,runner,acme"}
    proc = subprocess.run(
        [sys.executable, "-m", "tooldeck", "tools", "--json"],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    tools = {t["name"]: t for t in json.loads(proc.stdout)}
    assert set(tools) == {"word_count", "fibonacci"}
    assert tools["fibonacci"]["security"]["sandbox"] is True
    assert tools["word_count"]["plugin"] == "acme"


@pytest.mark.parametrize("script", ["openai_agent.py", "anthropic_agent.py"])
def test_agent_examples_exit_cleanly_without_a_key(script):
    environ = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "API_KEY" in proc.stdout
