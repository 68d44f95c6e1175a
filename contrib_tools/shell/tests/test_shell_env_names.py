"""shell_exec's ``env`` refuses every variable the shell guard counts as code-bearing.

The guard refuses ``GIT_CONFIG_COUNT=1 git status`` on a command line; the same variables given
through ``env`` must be refused too (the guard never sees ``env``). Nothing is run here.
"""

from __future__ import annotations

import pytest
from tooldeck_tools_shell.tools import REFUSED_ENV_NAMES, command_environment

from tooldeck_hookspecs import ToolFailure

_shell = pytest.importorskip("tooldeck_policy._shell")


def _refused(name: str) -> bool:
    try:
        command_environment({name: "x"})
    except ToolFailure:
        return True
    return False


@pytest.mark.parametrize("name", sorted(_shell._CODE_VARIABLES))
def test_shell_env_refuses_every_guard_variable(name: str) -> None:
    assert _refused(name), name
    assert _refused(name.lower()), name


@pytest.mark.parametrize("prefix", _shell._CODE_PREFIXES)
def test_shell_env_refuses_every_guard_prefix(prefix: str) -> None:
    assert _refused(prefix + "X0"), prefix


def test_shell_env_list_covers_the_guard_list() -> None:
    assert set(_shell._CODE_VARIABLES) <= set(REFUSED_ENV_NAMES)


@pytest.mark.parametrize(
    "name",
    ["GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0", "GIT_CONFIG_GLOBAL",
     "GIT_CONFIG_SYSTEM", "GIT_CONFIG_PARAMETERS", "GIT_PAGER", "GIT_EXTERNAL_DIFF", "GIT_SSH",
     "GIT_SSH_COMMAND", "GIT_ASKPASS", "SSH_ASKPASS", "SUDO_ASKPASS", "ANY_ASKPASS", "EDITOR",
     "VISUAL", "PAGER", "GIT_EDITOR", "TAR_OPTIONS", "GIT_DIR", "GIT_EXEC_PATH", "LESSOPEN",
     "npm_config_script_shell", "RSYNC_RSH", "PERL5DB", "PYTHONBREAKPOINT"],
)
def test_shell_env_refuses_code_bearing_names(name: str) -> None:
    assert _refused(name), name
    assert _shell.code_bearing_env_name(name) or _shell.code_bearing_env_name(name.upper())


def test_shell_env_audit_git_fsmonitor_payload_is_refused() -> None:
    with pytest.raises(ToolFailure) as caught:
        command_environment({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.fsmonitor",
                             "GIT_CONFIG_VALUE_0": "touch x; false #"})
    message = str(caught.value.message if hasattr(caught.value, "message") else caught.value)
    assert "GIT_CONFIG_COUNT" in message and "GIT_CONFIG_KEY_0" in message


@pytest.mark.parametrize("name", ["CI", "RUST_LOG", "GIT_AUTHOR_NAME", "PYTHONUNBUFFERED",
                                  "MY_SETTING", "LANG"])
def test_shell_env_plain_names_pass(name: str) -> None:
    assert command_environment({name: "1"})[name] == "1"
