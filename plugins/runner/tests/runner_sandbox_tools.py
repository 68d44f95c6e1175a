"""Tool functions the sandbox fault tests import BY REFERENCE inside workers.

This directory is put on the workers' PYTHONPATH through ``runner.python_path``. Each function
takes ``(arguments, context)`` (``call_style="mapping"``). Processes meant to linger carry
``arguments["marker"]`` in their command line, so tests can prove none are left behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from typing import Any

from tooldeck_hookspecs import ToolFailure

SLEEP = "/bin/sleep"


def echo(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    return {
        "arguments": dict(arguments),
        "session_id": context.session_id,
        "workdir": context.workdir,
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "attributes": dict(context.attributes),
        "settings": dict(context.settings),
    }


async def async_echo(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    import trio

    await trio.sleep(0)
    return {"arguments": dict(arguments), "async": True}


def environment(arguments: dict[str, Any], context: Any) -> dict[str, str]:
    return dict(os.environ)


def read_file(arguments: dict[str, Any], context: Any) -> str:
    with open(arguments["path"]) as fh:
        return fh.read()


def write_file(arguments: dict[str, Any], context: Any) -> int:
    with open(arguments["path"], "w") as fh:
        return fh.write(arguments["text"])


def printer(arguments: dict[str, Any], context: Any) -> str:
    print("hello from the tool")
    return "done"


def fail_structured(arguments: dict[str, Any], context: Any) -> None:
    raise ToolFailure("PATH_NOT_ALLOWED", "no such place", suggestion="stay home")


def raise_value_error(arguments: dict[str, Any], context: Any) -> None:
    raise ValueError("bad value 42")


def allocate_gigabyte(arguments: dict[str, Any], context: Any) -> int:
    block = bytearray(1024 * 1024 * 1024)
    return len(block)


def segfault(arguments: dict[str, Any], context: Any) -> None:
    ctypes.string_at(0)


def abort(arguments: dict[str, Any], context: Any) -> None:
    os.abort()


def kill_parent(arguments: dict[str, Any], context: Any) -> str:
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(0.2)
    return "parent still there"


def busy_loop(arguments: dict[str, Any], context: Any) -> None:
    while True:
        pass


def sleep_an_hour(arguments: dict[str, Any], context: Any) -> None:
    time.sleep(3600)


def _spawn_marked(marker: str) -> None:
    # argv[0] carries the marker: /proc/<pid>/cmdline shows it.
    os.execv(SLEEP, [marker, "3600"])


def daemons(arguments: dict[str, Any], context: Any) -> str:
    """A setsid daemon and a classic double-fork daemon, both outliving the call."""
    marker = arguments["marker"]
    # setsid: leaves the process group and the session.
    if os.fork() == 0:
        os.setsid()
        _spawn_marked(marker)
    # Double fork: the grandchild is orphaned (reparented away from the tool).
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            _spawn_marked(marker)
        os._exit(0)
    os.waitpid(pid, 0)
    return "daemons started"


def thousand_children(arguments: dict[str, Any], context: Any) -> int:
    marker = arguments["marker"]
    started = 0
    for _ in range(arguments.get("count", 1000)):
        try:
            os.posix_spawn(SLEEP, [marker, "3600"], {})
        except OSError:
            break
        started += 1
    return started


def flood_stdout(arguments: dict[str, Any], context: Any) -> None:
    chunk = "x" * (1024 * 1024)
    for _ in range(1024):
        sys.stdout.write(chunk)
    sys.stdout.flush()


def huge_result(arguments: dict[str, Any], context: Any) -> str:
    return "y" * arguments.get("size", 5_000_000)


def flood_file(arguments: dict[str, Any], context: Any) -> None:
    chunk = b"z" * (1024 * 1024)
    with open(arguments["path"], "wb") as fh:
        for _ in range(1024):
            fh.write(chunk)


def network_probe(arguments: dict[str, Any], context: Any) -> list[str]:
    import socket

    return sorted(name for _, name in socket.if_nameindex())


def exit_abruptly(arguments: dict[str, Any], context: Any) -> None:
    os._exit(7)


def thousand_children_then_sleep(arguments: dict[str, Any], context: Any) -> None:
    thousand_children(arguments, context)
    time.sleep(3600)
