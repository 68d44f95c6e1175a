"""Plugins add ``tooldeck`` subcommands through ``tooldeck_register_commands`` (issue 15).

The entry-point cases install real (tiny) distributions: a ``.dist-info`` folder with an
``entry_points.txt`` on ``PYTHONPATH``, found by ``importlib.metadata`` as pip's would be, and
run ``python -m tooldeck`` in a new process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tooldeck._plugins import TooldeckPluginManager
from tooldeck.cli import build_parser
from tooldeck.testing import inline_plugin
from tooldeck_hookspecs import PluginLoadError

HELLO = """
import sys
from tooldeck_hookspecs import hookimpl

LOADS = 0

def _hello(args):
    from tooldeck import cli
    deck = cli.load_deck()
    print(f"hello {args.name}; loaded {sys.modules[__name__].LOADS} time(s); "
          f"plugin in deck: {'{NAME}' in {i.name for i in deck.plugin_infos()}}; "
          f"one manager: {deck.plugins is cli._LOADED[1]}")
    return 0

@hookimpl
def tooldeck_register_commands(subparsers):
    p = subparsers.add_parser("{COMMAND}", help="{HELP}")
    p.add_argument("name")
    p.set_defaults(func=_hello)

LOADS += 1
"""

BROKEN = """
from tooldeck_hookspecs import hookimpl

@hookimpl
def tooldeck_register_commands(subparsers):
    subparsers.add_parser("half-built", help="never shown")
    raise RuntimeError("cannot add my command")
"""


def _hello(install, root: Path, module: str, command: str = "hello") -> None:
    source = (
        HELLO.replace("{NAME}", module)
        .replace("{COMMAND}", command)
        .replace("{HELP}", f"greet from {module}")
    )
    install(root, module, source)


def _run(root: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        **os.environ,
        "PYTHONPATH": str(root),
        "HF_HUB_OFFLINE": "1",
        "TOOLDECK_HISTORY_FILE": "off",
        "COLUMNS": "120",
        **env,
    }
    environ.pop("TOOLDECK_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "tooldeck", *argv],
        capture_output=True,
        text=True,
        env=environ,
        cwd=root,
        timeout=300,
    )


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    return root


def test_plugin_command_shows_in_help_and_runs_on_the_same_plugins(site, install_plugin):
    _hello(install_plugin, site, "td_hello")
    helped = _run(site, "--help")
    assert helped.returncode == 0, helped.stderr
    assert "hello" in helped.stdout and "greet from td_hello" in helped.stdout
    ran = _run(site, "hello", "world")
    assert ran.returncode == 0, ran.stderr
    # Loaded once: the deck the command built reused the module the command hook came from.
    assert "hello world; loaded 1 time(s); plugin in deck: True; one manager: True" in ran.stdout
    assert "Traceback" not in ran.stderr


def test_disabled_plugin_adds_no_command(site, install_plugin):
    _hello(install_plugin, site, "td_hello")
    ran = _run(site, "--help", TOOLDECK_DISABLE_PLUGINS="td_hello")
    assert ran.returncode == 0, ran.stderr
    assert "greet from td_hello" not in ran.stdout
    refused = _run(site, "hello", "world", TOOLDECK_DISABLE_PLUGINS="td_hello")
    assert refused.returncode == 2 and "invalid choice: 'hello'" in refused.stderr


def test_raising_command_hook_is_a_failed_plugin_not_a_traceback(site, install_plugin):
    install_plugin(site, "td_broken", BROKEN)
    helped = _run(site, "--help")
    assert helped.returncode == 0, helped.stderr
    assert "half-built" not in helped.stdout  # what it added before raising is taken back
    assert "Traceback" not in helped.stderr
    listed = _run(site, "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    failed = {f["name"]: f for f in json.loads(listed.stdout)["failed"]}
    assert failed["td_broken"]["stage"] == "commands"
    assert "cannot add my command" in failed["td_broken"]["error"]
    table = _run(site, "plugins")
    assert "FAILED (commands)" in table.stdout


def test_two_plugins_adding_one_command_is_an_error_naming_both(site, install_plugin):
    _hello(install_plugin, site, "td_alpha")
    _hello(install_plugin, site, "td_beta")
    ran = _run(site, "--help")
    assert ran.returncode == 2
    assert "'hello'" in ran.stderr and "td_alpha" in ran.stderr and "td_beta" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_plugin_cannot_take_a_core_command(site, install_plugin):
    _hello(install_plugin, site, "td_select", command="select")
    ran = _run(site, "tools")
    assert ran.returncode == 2
    assert "'select'" in ran.stderr and "tooldeck core" in ran.stderr and "td_select" in ran.stderr


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_inline_plugin_adds_a_command_and_its_errors_propagate():
    def tooldeck_register_commands(subparsers):
        p = subparsers.add_parser("shout", help="say it loud")
        p.add_argument("word")
        p.set_defaults(func=lambda args: args.word.upper())

    manager = TooldeckPluginManager()
    manager.register(inline_plugin(tooldeck_register_commands), name="loud")
    parser = build_parser()
    owners = manager.register_commands(_subparsers(parser))
    assert owners == {"shout": "loud"}
    args = parser.parse_args(["shout", "hi"])
    assert args.func(args) == "HI"
    assert "say it loud" in parser.format_help()

    def tooldeck_register_commands(subparsers):
        raise ValueError("inline bug")

    manager.register(inline_plugin(tooldeck_register_commands), name="buggy")
    with pytest.raises(ValueError, match="inline bug"):
        manager.register_commands(_subparsers(build_parser()))


def test_inline_duplicate_command_names_both():
    def tooldeck_register_commands(subparsers):
        subparsers.add_parser("twice")

    def other(subparsers):
        subparsers.add_parser("twice")

    manager = TooldeckPluginManager()
    manager.register(inline_plugin(tooldeck_register_commands), name="first")
    manager.register(inline_plugin(tooldeck_register_commands=other), name="second")
    with pytest.raises(PluginLoadError, match="'first'.*'second'"):
        manager.register_commands(_subparsers(build_parser()))
