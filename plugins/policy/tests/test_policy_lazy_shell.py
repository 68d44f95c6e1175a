"""The shell analyzer loads at the first call with a command argument, not with the policy.

Every ``tooldeck`` command loads the policy plugin; compiling the analyzer's patterns is paid
only by a process that checks a command. Each check runs in a new interpreter.
"""

from __future__ import annotations

from tooldeck.testing import run_python


def _run(code: str) -> list[str]:
    return run_python(code).split()


def test_the_policy_loads_and_checks_a_path_without_the_shell_analyzer():
    out = _run(
        """
        import sys
        import tooldeck_policy, tooldeck_policy.plugin
        from tooldeck_hookspecs import SecurityConfig, SessionInfo, ToolCall, ToolDefinition

        tool = ToolDefinition(name="file_read", description="d", category="fs",
                              security=SecurityConfig(path_params=("path",)))
        decision = tooldeck_policy.authorize(
            ToolCall(name="file_read", arguments={"path": "notes.txt"}), tool,
            SessionInfo(session_id="s", workdir="/tmp"),
        )
        print(decision is None or decision.action, "tooldeck_policy._shell" in sys.modules)
        """
    )
    assert out == ["True", "False"]


def test_a_command_argument_loads_the_analyzer_and_is_refused():
    out = _run(
        """
        import sys
        import tooldeck_policy
        from tooldeck_hookspecs import SecurityConfig, SessionInfo, ToolCall, ToolDefinition

        tool = ToolDefinition(name="shell_exec", description="d", category="shell",
                              security=SecurityConfig(command_params=("command",)))
        decision = tooldeck_policy.authorize(
            ToolCall(name="shell_exec", arguments={"command": "ls; id"}), tool,
            SessionInfo(session_id="s", workdir="/tmp"),
        )
        print(decision.action, decision.code.name, "tooldeck_policy._shell" in sys.modules)
        shell = sys.modules["tooldeck_policy._shell"]
        print(tooldeck_policy.analyze_command is shell.analyze_command)
        """
    )
    assert out == ["deny", "COMMAND_INJECTION", "True", "True"]
