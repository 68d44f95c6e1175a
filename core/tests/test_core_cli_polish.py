"""CLI polish: --version, large arguments from stdin or a file, one-line errors, safe output."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tooldeck.cli import build_parser

TOOLDECK = str(Path(sys.executable).with_name("tooldeck"))


def run(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    text: bool = True,
):
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLDECK_DISABLE_PLUGINS": "faiss"}
    environ.pop("TOOLDECK_CONFIG", None)
    environ.pop("TOOLDECK_PLUGINS", None)
    environ.pop("PYTHONIOENCODING", None)
    # Each test trusts configuration files in a store of its own, never the user's.
    environ["TOOLDECK_TRUST_FILE"] = str(cwd.parent / f"{cwd.name}-trust.json")
    environ.update(env or {})
    return subprocess.run(
        [TOOLDECK, *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=text,
        input=stdin,
        timeout=120,
    )


def test_version_names_the_core_and_the_contract(tmp_path):
    proc = run("--version", cwd=tmp_path)
    assert proc.returncode == 0
    core = importlib.metadata.version("tooldeck")
    contract = importlib.metadata.version("tooldeck-hookspecs")
    assert proc.stdout.strip() == f"tooldeck {core}, tooldeck-hookspecs {contract}"


def _options(parser: argparse.ArgumentParser, where: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _options(child, f"{where} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield where, action


def test_every_option_has_help_text():
    missing = [
        f"{where}: {action.dest}"
        for where, action in _options(build_parser(), "tooldeck")
        if not action.help
    ]
    assert missing == []


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    # Bigger than a comfortable command line: read through stdin or @FILE.
    (work / "big.txt").write_text("line\n" * 50_000)
    return work


def test_args_json_from_stdin(big_file):
    arguments = json.dumps({"path": "big.txt", "max_bytes": 10})
    proc = run("call", "file_read", "-", "--workdir", str(big_file), cwd=big_file, stdin=arguments)
    assert proc.returncode in (0, 1), proc.stderr
    result = json.loads(proc.stdout)
    # Whatever the tool said, it got the arguments: no INVALID_ARGUMENTS about a missing path.
    assert result["success"] or result["error"]["code"] != "INVALID_ARGUMENTS", result


def test_args_json_from_a_file(big_file):
    payload = {"path": "big.txt", "content": "x" * 300_000}
    (big_file / "args.json").write_text(json.dumps(payload))
    # A tool that rejects the content's size still proves the 300 kB arrived whole.
    proc = run("call", "file_read", f"@{big_file / 'args.json'}", cwd=big_file)
    assert proc.returncode in (0, 1), proc.stderr
    result = json.loads(proc.stdout)
    assert not result["success"] and result["error"]["code"] == "INVALID_ARGUMENTS"
    assert "content" in json.dumps(result["error"])


@pytest.mark.parametrize(
    ("spec", "stdin", "words"),
    [
        ("@missing.json", None, "cannot read 'missing.json': No such file or directory"),
        ("-", "{not json", "ARGS_JSON is not valid JSON"),
        ("-", "[" * 10_000 + "]" * 10_000, "ARGS_JSON is nested too deeply"),
        ('{"a": ' * 10_000 + "1" + "}" * 10_000, None, "ARGS_JSON is nested too deeply"),
        ('{"n": ' + "9" * 5000 + "}", None, "ARGS_JSON is not usable JSON"),
        ("[1, 2]", None, "ARGS_JSON must be a JSON object"),
    ],
    ids=["missing-file", "bad-json", "deep-stdin", "deep-inline", "huge-int", "not-object"],
)
def test_bad_args_json_is_one_line_exit_2(tmp_path, spec, stdin, words):
    proc = run("call", "file_read", spec, cwd=tmp_path, stdin=stdin)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("tooldeck call: ") and words in lines[-1], proc.stderr


def test_args_json_file_that_is_not_utf8_is_one_line(tmp_path):
    (tmp_path / "args.json").write_bytes(b'{"path": "\xff"}')
    proc = run("call", "file_read", "@args.json", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cannot read 'args.json'" in proc.stderr


@pytest.mark.parametrize("command", ["check", "trust", "untrust"])
def test_non_utf8_file_names_do_not_crash_the_output(tmp_path, command):
    work = tmp_path / "work"
    work.mkdir()
    name = os.fsdecode(b"tool\xffdeck.toml")  # not UTF-8: a surrogate-escaped str in Python
    (work / name).write_text("[hand]\nlimit = 3\n")
    # A strict stream, as under a UTF-8 locale: a surrogate would raise UnicodeEncodeError.
    proc = run(
        "config",
        command,
        name,
        cwd=work,
        env={"PYTHONIOENCODING": "utf-8:strict"},
        text=False,
    )
    assert b"Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode("utf-8")  # valid UTF-8: the odd byte is shown escaped
    assert "tool\\udcffdeck.toml" in out


def test_tool_output_with_odd_names_is_valid_utf8(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / os.fsdecode(b"caf\xe9.txt")).write_text("x")
    proc = run(
        "call",
        "list_dir",
        json.dumps({"path": "."}),
        "--workdir",
        str(work),
        cwd=work,
        env={"PYTHONIOENCODING": "utf-8:strict"},
        text=False,
    )
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    entries = json.loads(proc.stdout.decode("utf-8"))["data"]["entries"]
    assert any(e["name"].startswith("caf") for e in entries)


def test_busy_port_for_serve_mcp_is_one_line_exit_2(tmp_path):
    pytest.importorskip("mcp", reason="the MCP extra (tooldeck[mcp]) is not installed")
    pytest.importorskip("hypercorn", reason="the MCP extra (tooldeck[mcp]) is not installed")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run("serve", "mcp", "--transport", "http", "--port", str(port), cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"tooldeck serve mcp: cannot listen on 127.0.0.1:{port}: Address already in use "
        "(pick another --port, or 0 for any free one)"
    )
