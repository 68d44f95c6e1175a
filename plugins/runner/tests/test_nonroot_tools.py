"""Tool functions the non-root sandbox tests (``test_nonroot.py``) import BY REFERENCE.

Not tests: this module is on the workers' ``PYTHONPATH`` (``runner.python_path``), and its name
only follows the owning task's file pattern. Each function takes ``(arguments, context)``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import subprocess
import sys
from typing import Any


def _status() -> dict[str, str]:
    fields = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            name, _, value = line.partition(":")
            if name in ("Uid", "Gid", "Groups", "CapEff", "CapBnd", "NoNewPrivs", "Seccomp"):
                fields[name] = " ".join(value.split())
    return fields


def who_am_i(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """The ids the tool has inside, and how it sees the workdir's existing files."""
    with open("/proc/self/uid_map") as fh:
        uid_map = " ".join(fh.read().split())
    return {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "uid_map": uid_map,
        "status": _status(),
        "owners": {
            name: [os.stat(name).st_uid, os.stat(name).st_gid] for name in sorted(os.listdir("."))
        },
    }


def write_tree(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """Create a file, a folder with a file, and append to an existing file; report owners."""
    with open("made-file", "w") as fh:
        fh.write("made inside")
    os.mkdir("made-dir")
    with open("made-dir/inner", "w") as fh:
        fh.write("inner")
    done = subprocess.run(
        ["/bin/sh", "-c", "echo from-a-child > made-by-child"], capture_output=True, text=True
    )
    appended = None
    if arguments.get("append"):
        with open(arguments["append"], "a") as fh:
            appended = fh.write(" appended")
    return {
        "uid": os.getuid(),
        "child": done.returncode,
        "appended": appended,
        "owners": {
            name: os.stat(name).st_uid
            for name in ("made-file", "made-dir", "made-dir/inner", "made-by-child")
        },
    }


def read_and_try_write(arguments: dict[str, Any], context: Any) -> dict[str, str]:
    """Read ``arguments["path"]``, then try to append to it."""
    path = arguments["path"]
    with open(path) as fh:
        text = fh.read()
    try:
        with open(path, "a") as fh:
            fh.write("changed")
        write = "written"
    except OSError as exc:
        write = f"refused: {errno.errorcode.get(exc.errno or 0, exc.errno)}"
    return {"read": text, "write": write}


def linger(arguments: dict[str, Any], context: Any) -> None:
    """Start a child carrying ``arguments["marker"]`` in its command line and wait for it."""
    sleeper = "import time; time.sleep(60)"
    subprocess.run([sys.executable, "-c", sleeper, arguments["marker"]], check=False)


_KEYCTL = {"x86_64": 250, "aarch64": 219}
_KEYCTL_GET_KEYRING_ID = 0
_KEY_SPEC_SESSION_KEYRING = -3


def session_keyring(arguments: dict[str, Any], context: Any) -> str:
    """Ask for the (inherited) session keyring's id: refused by the sandbox's filter."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    rc = libc.syscall(
        ctypes.c_long(_KEYCTL[platform.machine()]),
        ctypes.c_int(_KEYCTL_GET_KEYRING_ID),
        ctypes.c_int(_KEY_SPEC_SESSION_KEYRING),
        ctypes.c_int(0),
    )
    if rc < 0:
        return f"refused: {errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())}"
    return f"keyring {rc}"
