"""Tiers, grants and the guards as the authorize hook applies them; the filter and result hooks."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from tooldeck_policy import BOOST, plugin

from tooldeck_hookspecs import (
    Decision,
    ErrorCode,
    Exclusion,
    Preference,
    SecurityConfig,
    SessionInfo,
    ToolCall,
    ToolDefinition,
    ToolResult,
)


def _tool(name: str = "t", category: str = "filesystem", **security: object) -> ToolDefinition:
    return ToolDefinition(
        name=name, description="d", category=category, security=SecurityConfig(**security)
    )


def _session(workdir: str = "/tmp", **kw: object) -> SessionInfo:
    return SessionInfo(session_id="s1", workdir=workdir, **kw)


def _decide(tool: ToolDefinition, session: SessionInfo, **arguments: object) -> Decision | None:
    call = ToolCall(name=tool.name, arguments=arguments)
    return plugin.tooldeck_authorize_call(call=call, tool=tool, session=session)


# ----------------------------------------------------------------- tiers


def test_policy_safe_passes() -> None:
    assert _decide(_tool(level="safe"), _session()) is None


def test_policy_moderate_needs_grant() -> None:
    tool = _tool("file_write", level="moderate")
    decision = _decide(tool, _session())
    assert decision is not None and decision.action == "deny"
    assert decision.code == ErrorCode.PERMISSION_DENIED
    assert "--grant filesystem" in decision.reason
    assert _decide(tool, _session(grants={"filesystem"})) is None
    assert _decide(tool, _session(grants={"shell"})) is not None


def test_policy_dangerous_asks_unless_always_allowed() -> None:
    tool = _tool("shell_exec", category="shell", level="dangerous")
    decision = _decide(tool, _session())
    assert decision is not None and decision.action == "ask"
    assert decision.code == ErrorCode.CONFIRMATION_REQUIRED
    assert "shell_exec" in decision.reason
    assert _decide(tool, _session(always_allow={"shell_exec"})) is None


def test_policy_require_confirm_asks() -> None:
    tool = _tool("send_mail", category="api", level="safe", require_confirm=True)
    decision = _decide(tool, _session())
    assert decision is not None and decision.action == "ask"
    assert _decide(tool, _session(always_allow={"send_mail"})) is None


def test_policy_above_max_level_denied() -> None:
    tool = _tool("shell_exec", category="shell", level="dangerous")
    decision = _decide(tool, _session(max_level="moderate", always_allow={"shell_exec"}))
    assert decision is not None and decision.action == "deny"
    assert decision.code == ErrorCode.PERMISSION_DENIED
    assert "maximum level" in decision.reason
    moderate = _tool(level="moderate")
    assert _decide(moderate, _session(max_level="safe", grants={"filesystem"})) is not None


# ----------------------------------------------------------------- guards in the hook


def test_policy_path_params(tmp_path: Path) -> None:
    tool = _tool("file_read", path_params="path")
    session = _session(str(tmp_path))
    assert _decide(tool, session, path="a.txt") is None
    decision = _decide(tool, session, path="../../etc/passwd")
    assert decision is not None and decision.code == ErrorCode.PATH_NOT_ALLOWED
    assert "argument 'path'" in decision.reason
    # Lists of paths are checked item by item; absent optional parameters are skipped.
    multi = _tool("file_diff", path_params=("paths", "other"))
    assert _decide(multi, session, paths=["a", "b"]) is None
    bad = _decide(multi, session, paths=["a", "/etc/shadow"])
    assert bad is not None and bad.code == ErrorCode.PATH_NOT_ALLOWED


def test_policy_command_params() -> None:
    tool = _tool("shell_exec", category="shell", command_params="command")
    session = _session()
    assert _decide(tool, session, command="ls -la") is None
    decision = _decide(tool, session, command="ls; id")
    assert decision is not None and decision.code == ErrorCode.COMMAND_INJECTION
    assert "';'" in decision.reason and decision.suggestion
    ask = _decide(tool, session, command="rm -rf /")
    assert ask is not None and ask.action == "ask"
    assert "destructive" in ask.reason
    piped = _tool("shell_exec", category="shell", command_params="command", allow_pipes=True)
    assert _decide(piped, session, command="ls | head") is None
    assert _decide(tool, session, command=["grep", "a;b", "f"]) is None
    wrong = _decide(tool, session, command=42)
    assert wrong is not None and wrong.code == ErrorCode.COMMAND_INJECTION


def test_policy_destructive_asks_even_when_tool_always_allowed() -> None:
    tool = _tool("shell_exec", category="shell", level="dangerous", command_params="command")
    session = _session(always_allow={"shell_exec"})
    assert _decide(tool, session, command="ls") is None
    decision = _decide(tool, session, command="mkfs.ext4 /dev/sda1")
    assert decision is not None and decision.action == "ask"


def test_policy_url_params(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLDECK_URL_ALLOW", raising=False)
    tool = _tool("http_get", category="browser", url_params="url")
    assert _decide(tool, _session(), url="https://8.8.8.8/") is None
    decision = _decide(tool, _session(), url="http://169.254.169.254/")
    assert decision is not None and decision.code == ErrorCode.URL_NOT_ALLOWED
    # Allowed by the session's attributes, or by the environment variable.
    allowed = _session(attributes={"url_allow": "127.0.0.1"})
    assert _decide(tool, allowed, url="http://127.0.0.1:8000/") is None
    assert _decide(tool, _session(attributes={"url_allow": ["::1"]}), url="http://[::1]/") is None
    assert _decide(tool, _session(), url="http://127.0.0.1:8000/") is not None
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1, localhost")
    assert _decide(tool, _session(), url="http://localhost:8000/") is None


def test_policy_all_problems_reported_deny_first(tmp_path: Path) -> None:
    tool = _tool(
        "do_all",
        level="dangerous",
        path_params="path",
        command_params="command",
        url_params="url",
    )
    decision = _decide(
        tool,
        _session(str(tmp_path)),
        path="/etc/passwd",
        command="ls && id",
        url="http://10.0.0.1/",
    )
    assert decision is not None and decision.action == "deny"  # deny beats the tier's ask
    codes = [p["code"] for p in decision.details["problems"]]
    assert codes == ["PATH_NOT_ALLOWED", "COMMAND_INJECTION", "URL_NOT_ALLOWED"]
    assert decision.code == ErrorCode.PATH_NOT_ALLOWED


def test_policy_authorize_benchmark(tmp_path: Path) -> None:
    """Reports the hook's cost for a typical guarded call; asserts nothing about time."""
    tool = _tool("file_read", path_params="path")
    shell = _tool("shell_exec", category="shell", command_params="command")
    session = _session(str(tmp_path))
    call = ToolCall(name="file_read", arguments={"path": "src/module/a.py"})
    started = time.perf_counter()
    for _ in range(500):
        plugin.tooldeck_authorize_call(call=call, tool=tool, session=session)
    path_us = (time.perf_counter() - started) / 500 * 1e6
    calls = [ToolCall(name="shell_exec", arguments={"command": f"ls -la d{i}"}) for i in range(200)]
    started = time.perf_counter()
    for c in calls:
        plugin.tooldeck_authorize_call(call=c, tool=shell, session=session)
    shell_us = (time.perf_counter() - started) / len(calls) * 1e6
    print(
        f"\n[policy] authorize: {path_us:.0f} us per path-guarded call, "
        f"{shell_us:.0f} us per new shell command"
    )


# ----------------------------------------------------------------- filter hook


def test_policy_filter_excludes_category_and_level(tmp_path: Path) -> None:
    tools = [
        _tool("shell_exec", category="shell", level="dangerous"),
        _tool("file_read", category="filesystem"),
        _tool("file_write", category="filesystem", level="moderate"),
    ]
    session = _session(str(tmp_path), excluded_categories={"shell"}, max_level="safe")
    verdicts = plugin.tooldeck_filter_tools(query="x", candidates=tools, session=session)
    excluded = {v.name: v.reason for v in verdicts if isinstance(v, Exclusion)}
    assert excluded["shell_exec"] == "category 'shell' excluded by session"
    assert "above this session's maximum" in excluded["file_write"]
    assert "file_read" not in excluded
    # Moderate tools without a grant stay in the hand: the user can grant them.
    verdicts = plugin.tooldeck_filter_tools(query="x", candidates=tools, session=_session())
    assert not [v for v in verdicts if isinstance(v, Exclusion)]


def test_policy_filter_prefers_workdir_and_environment(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    tools = [
        _tool("git_log", category="git"),
        ToolDefinition(name="run_pytest", description="d", category="code", tags=("python",)),
        _tool("npm_install", category="node"),
        ToolDefinition(name="kubectl_get", description="d", category="api", tags="kubernetes"),
    ]
    session = _session(str(tmp_path), environment={"KUBECONFIG": "/x"})
    verdicts = plugin.tooldeck_filter_tools(query="x", candidates=tools, session=session)
    boosts = {v.name: v for v in verdicts if isinstance(v, Preference)}
    assert set(boosts) == {"git_log", "run_pytest", "kubectl_get"}
    assert all(p.boost == BOOST for p in boosts.values())
    assert ".git" in boosts["git_log"].reason
    assert "pyproject.toml" in boosts["run_pytest"].reason
    assert "$KUBECONFIG" in boosts["kubectl_get"].reason


def test_policy_filter_scan_is_cached(tmp_path: Path) -> None:
    from tooldeck_policy import workdir_topics

    first = workdir_topics(str(tmp_path))
    (tmp_path / "package.json").write_text("{}")
    # Within the cache window the scan is reused (cheap on every selection) ...
    assert workdir_topics(str(tmp_path)) == first
    # ... and a missing workdir is no error.
    assert workdir_topics(os.path.join(str(tmp_path), "missing")) == frozenset()


# ----------------------------------------------------------------- result hook


def test_policy_process_result_redacts() -> None:
    import importlib.util
    import random
    import string

    if importlib.util.find_spec("tooldeck_policy.redact") is None:
        pytest.skip("tooldeck_policy.redact is not there yet")
    # A fake AWS key id built at run time (never commit realistic tokens).
    rng = random.Random(7)
    fake = "AKIA" + "".join(rng.choice(string.ascii_uppercase + "234567") for _ in range(16))
    result = ToolResult.ok({"text": f"aws_access_key_id = {fake}"})
    out = plugin.tooldeck_process_result(call=ToolCall(name="t"), tool=_tool(), result=result)
    assert out is not None and fake not in str(out.data)
    clean = ToolResult.ok({"text": "nothing secret here"})
    same = plugin.tooldeck_process_result(call=ToolCall(name="t"), tool=_tool(), result=clean)
    assert same is None or same.data == clean.data


def test_policy_filter_scan_of_a_huge_workdir_is_bounded(tmp_path: Path) -> None:
    from tooldeck_policy import _filters

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / ".git").mkdir()
    for i in range(_filters._SCAN_ENTRIES + 50):
        (tmp_path / f"f{i:05d}.txt").touch()
    topics = _filters.workdir_topics(str(tmp_path))
    assert ("python", "pyproject.toml") in topics and ("git", ".git") in topics
    # The built-in filter runs on the event loop: it says so.
    from tooldeck_hookspecs import is_nonblocking

    assert is_nonblocking(plugin.tooldeck_filter_tools)
