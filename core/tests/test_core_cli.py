"""End-to-end: the `tooldeck` command as an agent developer runs it, in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TOOLDECK = str(Path(sys.executable).with_name("tooldeck"))


def run(*args: str, cwd: Path, env: dict[str, str] | None = None, stdin: str | None = None):
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLDECK_DISABLE_PLUGINS": "faiss"}
    environ.pop("TOOLDECK_CONFIG", None)
    environ.pop("TOOLDECK_PLUGINS", None)
    # Each test trusts configuration files in a store of its own, never the user's.
    environ["TOOLDECK_TRUST_FILE"] = str(cwd.parent / f"{cwd.name}-trust.json")
    environ.update(env or {})
    return subprocess.run(
        [TOOLDECK, *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
    )


def test_plugins_json_lists_distributions_versions_hooks(tmp_path):
    proc = run("plugins", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    by_name = {p["name"]: p for p in data["plugins"]}
    assert by_name["fs"]["distribution"] == "tooldeck-tools-fs"
    assert "tooldeck_register_tools" in by_name["fs"]["hooks"]
    assert "faiss" not in by_name
    assert data["providers"]["execute"] == "runner"


def test_tools_json_is_the_whole_definition(tmp_path):
    proc = run("tools", "--json", "--category", "filesystem", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    tools = {t["name"]: t for t in json.loads(proc.stdout)}
    assert {"file_read", "file_write", "list_dir"} <= set(tools)
    read = tools["file_read"]
    for key in (
        "name",
        "version",
        "description",
        "category",
        "parameters",
        "security",
        "execution",
        "plugin",
    ):
        assert key in read
    assert read["plugin"] == "fs" and read["security"]["level"] == "safe"
    assert tools["file_write"]["security"]["level"] == "moderate"


@pytest.mark.parametrize("fmt", ["openai", "openai-responses", "anthropic", "mcp", "gemini"])
def test_export_prints_a_json_array(tmp_path, fmt):
    proc = run("export", "--format", fmt, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    exported = json.loads(proc.stdout)
    assert isinstance(exported, list) and len(exported) >= 3


def test_call_success_tool_error_and_usage_error(tmp_path):
    (tmp_path / "hello.txt").write_text("hi there")
    ok = run("call", "file_read", '{"path": "hello.txt"}', "--workdir", str(tmp_path), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    result = json.loads(ok.stdout)
    assert result["success"] is True and result["data"]["content"] == "hi there"

    outside = run(
        "call",
        "file_read",
        '{"path": "../../etc/passwd"}',
        "--workdir",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert outside.returncode == 1
    assert json.loads(outside.stdout)["error"]["code"] == "PATH_NOT_ALLOWED"

    bad_json = run("call", "file_read", "{not json", cwd=tmp_path)
    assert bad_json.returncode == 2 and "not valid JSON" in bad_json.stderr
    assert run("call", cwd=tmp_path).returncode == 2  # argparse: NAME missing


def test_call_moderate_tool_needs_a_grant(tmp_path):
    args = ("call", "file_write", '{"path": "out.txt", "content": "x"}', "--workdir", str(tmp_path))
    denied = run(*args, cwd=tmp_path)
    assert denied.returncode == 1
    assert json.loads(denied.stdout)["error"]["code"] == "PERMISSION_DENIED"
    assert not (tmp_path / "out.txt").exists()
    granted = run(*args, "--grant", "filesystem", cwd=tmp_path)
    assert granted.returncode == 0, granted.stdout + granted.stderr
    assert (tmp_path / "out.txt").read_text() == "x"


def test_call_dangerous_tool_asks_and_yes_approves(tmp_path):
    (tmp_path / "tooldeck.toml").write_text('[tools.file_write.security]\nlevel = "dangerous"\n')
    assert run("config", "trust", cwd=tmp_path).returncode == 0
    args = ("call", "file_write", '{"path": "d.txt", "content": "y"}', "--workdir", str(tmp_path))
    pending = run(*args, cwd=tmp_path)
    assert pending.returncode == 1
    error = json.loads(pending.stdout)["error"]
    assert error["code"] == "CONFIRMATION_REQUIRED" and error["details"]["approval_id"]
    approved = run(*args, "--yes", cwd=tmp_path)
    assert approved.returncode == 0, approved.stdout
    assert (tmp_path / "d.txt").read_text() == "y"


def test_disabled_plugin_via_config_file(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.tooldeck]\ndisable = ["fs"]\n')
    assert run("config", "trust", cwd=tmp_path).returncode == 0
    proc = run("tools", "--json", cwd=tmp_path)
    assert proc.returncode == 0
    assert [t for t in json.loads(proc.stdout) if t["plugin"] == "fs"] == []


def test_start_up_error_is_exit_2_with_a_message(tmp_path):
    proc = run("tools", cwd=tmp_path, env={"TOOLDECK_PLUGINS": "schema"})
    assert proc.returncode == 2
    assert "pip install tooldeck-runner" in proc.stderr


@pytest.mark.parametrize("json_out", [False, True])
def test_plugins_lists_an_incomplete_install_and_names_the_missing_stage(tmp_path, json_out):
    # `tooldeck plugins` is what a user runs when an install is broken: it used to stop at the
    # missing stage (exit 2) without listing what is installed.
    (tmp_path / "pyproject.toml").write_text('[tool.tooldeck]\ndisable = ["runner"]\n')
    assert run("config", "trust", cwd=tmp_path).returncode == 0
    proc = run("plugins", *(["--json"] if json_out else []), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    if json_out:
        report = json.loads(proc.stdout)
        assert "execute stage" in report["missing_stage"]
        names = {p["name"] for p in report["plugins"]}
        assert {"schema", "fs", "shell"} <= names and "runner" not in names
    else:
        assert "tooldeck-schema" in proc.stdout and "tooldeck-tools-fs" in proc.stdout
        assert "pip install tooldeck-runner" in " ".join(proc.stdout.split())


@pytest.mark.parametrize("json_out", [False, True])
def test_plugins_lists_an_install_missing_a_required_plugin(tmp_path, json_out):
    # A required plugin that is not installed raised PluginLoadError, which the fallback did
    # not catch: `tooldeck plugins` listed nothing and exited 2.
    (tmp_path / "pyproject.toml").write_text(
        '[tool.tooldeck]\nrequired_plugins = ["policy", "runner", "schema", "acme_missing"]\n'
    )
    assert run("config", "trust", cwd=tmp_path).returncode == 0
    proc = run("plugins", *(["--json"] if json_out else []), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    if json_out:
        report = json.loads(proc.stdout)
        assert "acme_missing" in report["missing_stage"]
        assert {"schema", "runner", "policy"} <= {p["name"] for p in report["plugins"]}
    else:
        assert "tooldeck-schema" in proc.stdout and "acme_missing" in proc.stdout
