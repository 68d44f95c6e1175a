"""Plugins add subcommands under a core command group: ``subparsers.group("serve")`` (issue 15).

``tooldeck serve mcp`` is added this way by tooldeck-mcp; the core keeps the ``serve`` group and,
where no plugin added ``mcp``, a stand-in that says what to install (tested in plugins/mcp/tests).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tooldeck._plugins import TooldeckPluginManager
from tooldeck.cli import build_parser
from tooldeck.testing import inline_plugin
from tooldeck_hookspecs import PluginLoadError

GROUPED = """
from tooldeck_hookspecs import hookimpl

@hookimpl
def tooldeck_register_commands(subparsers):
    p = subparsers.group("serve").add_parser("echo", help="serve an echo, from td_echo")
    p.add_argument("--word", default="hi")
    p.set_defaults(func=lambda args: print("echo " + args.word) or 0)
"""

HALF_GROUPED = """
from tooldeck_hookspecs import hookimpl

@hookimpl
def tooldeck_register_commands(subparsers):
    subparsers.group("serve").add_parser("half", help="never shown")
    subparsers.group("no-such-group")
"""


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_inline_plugin_adds_a_subcommand_under_serve():
    def tooldeck_register_commands(subparsers):
        p = subparsers.group("serve").add_parser("echo", help="serve an echo")
        p.add_argument("--word", default="hi")
        p.set_defaults(func=lambda args: f"echo {args.word}")

    manager = TooldeckPluginManager()
    manager.register(inline_plugin(tooldeck_register_commands), name="echoer")
    parser = build_parser()
    assert manager.register_commands(_subparsers(parser)) == {"serve echo": "echoer"}
    args = parser.parse_args(["serve", "echo", "--word", "there"])
    assert args.func(args) == "echo there" and args.protocol == "echo"
    serve = _subparsers(parser).choices["serve"]
    assert "serve an echo" in serve.format_help()


def test_a_group_that_does_not_exist_is_an_error_naming_it():
    def tooldeck_register_commands(subparsers):
        subparsers.group("select").add_parser("x")  # a command, but not a group

    manager = TooldeckPluginManager()
    manager.register(inline_plugin(tooldeck_register_commands), name="lost")
    with pytest.raises(ValueError, match="no command group 'select'"):
        manager.register_commands(_subparsers(build_parser()))


def test_two_plugins_adding_one_grouped_command_names_both():
    def tooldeck_register_commands(subparsers):
        subparsers.group("serve").add_parser("twice")

    def other(subparsers):
        subparsers.group("serve").add_parser("twice")

    manager = TooldeckPluginManager()
    manager.register(inline_plugin(tooldeck_register_commands), name="first")
    manager.register(inline_plugin(tooldeck_register_commands=other), name="second")
    with pytest.raises(PluginLoadError, match="'serve twice'.*'first'.*'second'"):
        manager.register_commands(_subparsers(build_parser()))


def _run(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "COLUMNS": "120"}
    env["TOOLDECK_HISTORY_FILE"] = "off"
    env.pop("TOOLDECK_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "tooldeck", *argv],
        capture_output=True, text=True, env=env, cwd=root, timeout=300,
    )


def test_entry_point_subcommand_shows_in_the_group_help_and_runs(tmp_path: Path, install_plugin):
    install_plugin(tmp_path, "td_echo", GROUPED)
    # The group's own help loads the plugins (a core command's help does not need them).
    helped = _run(tmp_path, "serve", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "serve an echo, from td_echo" in helped.stdout
    ran = _run(tmp_path, "serve", "echo", "--word", "back")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "echo back\n"


def test_raising_after_adding_under_a_group_takes_the_subcommand_back(
    tmp_path: Path, install_plugin
):
    install_plugin(tmp_path, "td_half", HALF_GROUPED)
    helped = _run(tmp_path, "serve", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "half" not in helped.stdout and "Traceback" not in helped.stderr
    listed = _run(tmp_path, "plugins")
    assert "FAILED (commands)" in listed.stdout and "no-such-group" in listed.stdout
