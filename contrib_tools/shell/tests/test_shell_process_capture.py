"""The process runner and the tool's own checks, without a deck (fast, in process)."""

from __future__ import annotations

import json
import os
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tooldeck_tools_shell import (
    BASE_ENVIRONMENT,
    Capture,
    command_environment,
    decode_output,
    run_process,
    shell_exec,
)

from tooldeck_hookspecs import ToolContext, ToolFailure


def test_capture_keeps_head_and_tail_and_counts_the_rest():
    capture = Capture(4, 4)
    for chunk in (b"0123", b"4567", b"89ab", b"cdef"):
        capture.add(chunk)
    assert capture.total == 16 and capture.truncated and capture.discarded == 8
    assert capture.kept() == (b"0123", b"cdef")
    text, label = decode_output(capture, "text")
    assert text == "0123\n[... 8 bytes omitted ...]\ncdef" and label == "utf-8"


@given(
    chunks=st.lists(st.binary(max_size=50), max_size=20),
    head=st.integers(0, 40),
    tail=st.integers(0, 40),
)
def test_capture_invariants(chunks, head, tail):
    capture = Capture(head, tail)
    for chunk in chunks:
        capture.add(chunk)
    data = b"".join(chunks)
    kept_head, kept_tail = capture.kept()
    assert capture.total == len(data)
    if capture.truncated:
        assert kept_head == data[:head] and kept_tail == data[len(data) - len(kept_tail):]
        assert len(kept_tail) == tail and capture.discarded == len(data) - head - tail
    else:
        assert kept_head + kept_tail == data and capture.discarded == 0
    text, label = decode_output(capture, "text")  # never raises, whatever the bytes
    assert label in ("utf-8", "utf-8 (with replacements)") and isinstance(text, str)


def test_large_stdin_and_large_output_at_once_do_not_deadlock(tmp_path):
    data = bytes(range(256)) * 8192  # 2 MiB through cat, both pipes full at times
    done = run_process(["cat"], cwd=str(tmp_path), env={}, stdin=data, timeout_s=30,
                       stdout_caps=(1000, 1000), stderr_caps=(100, 100),
                       discard_limit=len(data))
    assert not done.timed_out and done.exit_code == 0 and done.stdout.total == len(data)
    assert done.stdout.kept() == (data[:1000], data[-1000:])


def test_a_cut_through_a_character_is_not_reported_as_bad_bytes():
    capture = Capture(5, 5)
    capture.add("ééé".encode() + b"-" * 20 + "ééé".encode())  # é is two bytes
    text, label = decode_output(capture, "text")
    assert label == "utf-8" and text.startswith("éé") and text.endswith("éé")
    assert "\ufffd" not in text


def test_small_output_is_whole_and_base64_keeps_exact_bytes():
    capture = Capture(8, 0)
    capture.add(b"\xff\x00a")
    assert decode_output(capture, "base64") == ("/wBh", "base64")
    text, label = decode_output(capture, "text")
    assert text == "\ufffd\x00a" and label == "utf-8 (with replacements)"


def test_run_process_kills_its_group_at_the_deadline(tmp_path):
    # Outside any sandbox: the tool's own group kill must stop a grandchild in the same group.
    marker = tmp_path / "late"
    late = f"import time, pathlib; time.sleep(1.2); pathlib.Path({json.dumps(str(marker))}).touch()"
    code = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {late!r}]); time.sleep(30)"
    )
    done = run_process([sys.executable, "-c", code], cwd=str(tmp_path), env={}, stdin=None,
                       timeout_s=0.5, stdout_caps=(100, 100), stderr_caps=(100, 100),
                       discard_limit=1000)
    assert done.timed_out and done.signal == "SIGKILL"
    import time

    time.sleep(1.5)
    assert not marker.exists()


def test_a_background_child_holding_the_pipes_does_not_hold_the_call(tmp_path):
    # The program exits at once but leaves a child with our stdout; the call ends anyway.
    code = "import subprocess, sys; subprocess.Popen(['sleep', '30']); print('bye')"
    done = run_process([sys.executable, "-c", code], cwd=str(tmp_path), env={}, stdin=None,
                       timeout_s=20, stdout_caps=(100, 100), stderr_caps=(100, 100),
                       discard_limit=1000)
    assert not done.timed_out and done.exit_code == 0
    assert decode_output(done.stdout, "text")[0] == "bye\n"


def test_environment_is_built_from_scratch_and_refuses_code_variables(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "host-value")
    env = command_environment({"CI": "1"})
    assert env == {**BASE_ENVIRONMENT, "CI": "1"} and "AWS_SECRET_ACCESS_KEY" not in env
    for name in ("LD_PRELOAD", "ld_library_path", "BASH_FUNC_x%%", "PYTHONPATH", "NODE_OPTIONS"):
        with pytest.raises(ToolFailure) as info:
            command_environment({name: "x"})
        assert info.value.code == "INVALID_ARGUMENTS" and repr(name) in info.value.message
    with pytest.raises(ToolFailure):
        command_environment({"OK": 1})


def test_tool_called_directly_checks_cwd_containment(tmp_path):
    inside = tmp_path / "w"
    inside.mkdir()
    os.symlink("/etc", inside / "escape")
    context = ToolContext(session_id="s", workdir=str(inside))
    for cwd in ("..", "/etc", "escape"):
        with pytest.raises(ToolFailure) as info:
            shell_exec({"command": ["true"], "cwd": cwd}, context)
        assert info.value.code == "PATH_NOT_ALLOWED"
    with pytest.raises(ToolFailure) as info:
        shell_exec({"command": ["true"], "cwd": "nope"}, context)
    assert info.value.code == "EXECUTION_ERROR"
    assert shell_exec({"command": ["true"]}, context)["exit_code"] == 0


async def test_degraded_mode_without_bubblewrap_still_scrubs_the_environment(
    tmp_path, monkeypatch
):
    from tooldeck.testing import make_deck

    monkeypatch.setenv("TOOLDECK_TEST_HOST_MARKER", "degraded-secret-value")
    deck = make_deck(load_entry_points=["schema", "runner", "policy", "shell"],
                     config={"runner": {"sandbox": "process"}})
    async with deck:
        session = deck.session(workdir=tmp_path)
        session.always_allow("shell_exec")
        result = await session.call("shell_exec", {"command": ["env"]})
    assert result.success and result.metadata["isolation"] == "process (degraded isolation)"
    assert "degraded-secret-value" not in result.data["stdout"]
    assert "TOOLDECK_TEST_HOST_MARKER" not in result.data["stdout"]
