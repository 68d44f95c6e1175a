"""shell_exec's ``env`` refuses variables that choose where programs read configuration that
names programs to run, and runtime options read from the environment (audit s39).

``HOME`` was settable: ``{"command": ["git", "status"], "env": {"HOME": "x"}}`` made git read
``x/.config/git/config`` (a folder the model can write; only the root's ``.config/`` is
protected), whose ``core.fsmonitor`` ran a program the user never saw in the approved command.
The same holds for ``KUBECONFIG`` (a kubeconfig's exec plugin), ``WGETRC`` (``use_askpass``),
``JDK_JAVA_OPTIONS`` (``-javaagent``), ``GOFLAGS`` (``-toolexec``), ``RUSTC_WRAPPER``,
``LUA_INIT`` (Lua code) and cargo's program-naming configuration keys.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tooldeck_tools_shell.tools import command_environment, shell_exec

from tooldeck_hookspecs import ErrorCode, ToolContext, ToolFailure

REFUSED = [
    "HOME", "home", "KUBECONFIG", "WGETRC", "SYSTEM_WGETRC", "AWS_CONFIG_FILE", "CARGO_HOME",
    "GOENV", "GNUPGHOME", "OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES", "PHPRC",
    "PHP_INI_SCAN_DIR", "R_PROFILE_USER", "R_ENVIRON", "PSQLRC", "BUNDLE_GEMFILE", "GEM_PATH",
    "RUSTUP_TOOLCHAIN", "JDK_JAVA_OPTIONS", "JAVA_OPTS", "MAVEN_OPTS", "GRADLE_OPTS",
    "CLASSPATH", "GOFLAGS", "RUSTC", "RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "RUSTDOC",
    "RUSTFLAGS", "LUA_INIT", "LUA_INIT_5_4", "LUA_PATH", "LUA_CPATH_5_4",
    "CARGO_BUILD_RUSTC_WRAPPER", "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER",
    "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", "CARGO_BUILD_RUSTFLAGS",
    "CARGO_REGISTRIES_MINE_CREDENTIAL_PROVIDER", "CARGO_ALIAS_B", "cargo_build_rustc",
]
PLAIN = ["CI", "LANG", "TZ", "RUST_LOG", "CARGO_TARGET_DIR", "CARGO_BUILD_JOBS",
         "CARGO_TERM_COLOR", "CARGO_INCREMENTAL", "GOOS", "GOPROXY", "JAVA_HOME_HINT"]


@pytest.mark.parametrize("name", REFUSED)
def test_audit_s39_env_config_names_refused(name: str) -> None:
    with pytest.raises(ToolFailure) as caught:
        command_environment({name: "x"})
    assert caught.value.code is ErrorCode.INVALID_ARGUMENTS
    assert name in caught.value.message


@pytest.mark.parametrize("name", PLAIN)
def test_audit_s39_env_plain_names_kept(name: str) -> None:
    assert command_environment({name: "1"})[name] == "1"


def test_audit_s39_env_base_home_stays() -> None:
    # The command still gets a HOME: the private /tmp of the sandbox.
    assert command_environment(None)["HOME"] == "/tmp"


def test_audit_s39_env_guard_table_matches(tmp_path: Path) -> None:
    shell = pytest.importorskip("tooldeck_policy._shell")
    for name in REFUSED:
        assert shell.code_bearing_env_name(name.upper()), name
    for name in PLAIN:
        assert not shell.code_bearing_env_name(name), name


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_audit_s39_env_home_fsmonitor_never_runs(tmp_path: Path) -> None:
    """The end-to-end shape of the attack: a home folder written by the model inside the
    workdir, then an innocent-looking 'git status' with HOME pointing at it."""
    workdir = tmp_path / "work"
    config = workdir / "x" / ".config" / "git" / "config"
    config.parent.mkdir(parents=True)
    canary = tmp_path / "fsmonitor-ran"
    config.write_text(f"[core]\n\tfsmonitor = touch {canary}; false\n")
    context = ToolContext(session_id="s39", workdir=str(workdir))
    shell_exec({"command": ["git", "init", "-q", "."]}, context)
    with pytest.raises(ToolFailure) as caught:
        shell_exec({"command": ["git", "status"], "env": {"HOME": str(workdir / "x")}},
                   context)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENTS
    assert not canary.exists()
