"""Tool functions the sandbox fault tests import BY REFERENCE inside workers.

This directory is put on the workers' PYTHONPATH through ``runner.python_path``. Each function
takes ``(arguments, context)`` (``call_style="mapping"``). Processes meant to linger carry
``arguments["marker"]`` in their command line, so tests can prove none are left behind.
"""

from __future__ import annotations

import ctypes
import os
import random
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


def busy_threads(arguments: dict[str, Any], context: Any) -> dict[str, float]:
    """Keep ``threads`` threads busy (hashing releases the GIL) for ``seconds`` of wall time."""
    import hashlib
    import threading

    block = b"x" * (1 << 22)
    start = time.monotonic()

    def burn() -> None:
        while time.monotonic() - start < arguments["seconds"]:
            hashlib.sha256(block).digest()

    workers = [threading.Thread(target=burn) for _ in range(arguments["threads"])]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return {"wall_s": time.monotonic() - start, "cpu_s": time.process_time()}


def start_threads(arguments: dict[str, Any], context: Any) -> int:
    """Start up to ``count`` idle threads at once; how many could be started."""
    import threading

    release = threading.Event()
    started = 0
    try:
        while started < arguments["count"]:
            threading.Thread(target=release.wait, daemon=True).start()
            started += 1
    except RuntimeError:  # "can't start new thread"
        pass
    release.set()
    return started


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


# -- the call as a whole (limits of the process tree) ------------------------------------------


def children_allocate(arguments: dict[str, Any], context: Any) -> list[int]:
    """``count`` child processes, each holding ``mb`` MiB (touched) at the same time."""
    import subprocess

    mb = arguments.get("mb", 64)
    code = (
        f"import time; b = bytearray({mb} * 1024 * 1024); "
        "print('held', flush=True); time.sleep(3)"
    )
    children = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        for _ in range(arguments.get("count", 8))
    ]
    return [child.wait() for child in children]


def fill_tmp(arguments: dict[str, Any], context: Any) -> int:
    """``mb`` MiB into the private /tmp, in 4 MiB files (under the per-file size limit)."""
    written = 0
    chunk = b"t" * (1024 * 1024)
    for i in range(arguments.get("mb", 600) // 4):
        with open(f"/tmp/fill-{i}.bin", "wb") as fh:
            for _ in range(4):
                fh.write(chunk)
                fh.flush()
                written += len(chunk)
    return written


def write_many(arguments: dict[str, Any], context: Any) -> int:
    """``files`` files of ``mb`` MiB each in the workdir (each under the per-file limit)."""
    chunk = b"w" * (1024 * 1024)
    for i in range(arguments["files"]):
        with open(f"bulk-{i}.bin", "wb") as fh:
            for _ in range(arguments["mb"]):
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
    return arguments["files"]


def run_program(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """Run ``argv`` (a list) as a child process, the way shell and code tools do."""
    import subprocess

    done = subprocess.run(
        arguments["argv"], capture_output=True, text=True, timeout=arguments.get("timeout", 30)
    )
    return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def setid_attempts(arguments: dict[str, Any], context: Any) -> dict[str, str]:
    """Every way to make a set-user-ID or set-group-ID file, and what each gave."""
    import shutil as _shutil
    import subprocess

    outcomes: dict[str, str] = {}

    def attempt(name: str, action: Any) -> None:
        try:
            action()
            outcomes[name] = "done"
        except OSError as exc:
            outcomes[name] = f"refused: {exc.strerror}"

    _shutil.copy("/bin/sh", "copied-sh")
    attempt("chmod 4755", lambda: os.chmod("copied-sh", 0o4755))
    attempt("chmod 2755", lambda: os.chmod("copied-sh", 0o2755))
    attempt("chmod u+s via fchmod", lambda: os.fchmod(os.open("copied-sh", os.O_RDONLY), 0o4711))
    attempt(
        "open O_CREAT 04755",
        lambda: os.close(os.open("created-suid", os.O_CREAT | os.O_WRONLY, 0o4755)),
    )
    attempt("mkdir 02755", lambda: os.mkdir("setgid-dir", 0o2755))
    attempt("mknod 04755", lambda: os.mknod("node-suid", 0o100000 | 0o4755))
    done = subprocess.run(
        ["/bin/sh", "-c", "cp /bin/sh sh2 && chmod 4755 sh2 && chmod g+s sh2"],
        capture_output=True,
        text=True,
    )
    outcomes["shell chmod 4755"] = f"exit {done.returncode}: {done.stderr.strip()}"
    return outcomes


def identity(arguments: dict[str, Any], context: Any) -> dict[str, str]:
    fields = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            name, _, value = line.partition(":")
            if name in ("Uid", "Gid", "CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp"):
                fields[name] = value.strip()
    with open("/proc/self/uid_map") as fh:
        fields["uid_map"] = " ".join(fh.read().split())
    fields["user_ns"] = os.readlink("/proc/self/ns/user")
    return fields


#: Run in a child of the worker: every way at the worker's descriptors and memory.
_PLUMBING_PROBE = r"""
import json, os, struct
parent = os.getppid()
report = {"parent": parent, "fds": {}, "mem": None, "environ": None, "forged": []}
forged = json.dumps({"success": True, "data": "FORGED", "error": None, "metadata": {}}).encode()
frame = struct.pack(">I", len(forged)) + forged
for pid in sorted({parent, 1}):
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError as exc:
        report["fds"][pid] = f"listdir: {exc.strerror}"
        continue
    for name in names:
        path = f"/proc/{pid}/fd/{name}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            report["fds"][f"{pid}/{name}"] = exc.strerror
            continue
        try:
            os.write(fd, frame)
            report["forged"].append(f"{pid}/{name}")
        except OSError as exc:
            report["fds"][f"{pid}/{name}"] = f"write: {exc.strerror}"
        finally:
            os.close(fd)
for what in ("mem", "environ"):
    try:
        with open(f"/proc/{parent}/{what}", "rb") as fh:
            fh.read(16)
        report[what] = "read"
    except OSError as exc:
        report[what] = exc.strerror
print(json.dumps(report))
"""


def plumbing(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    import json
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _PLUMBING_PROBE], capture_output=True, text=True, timeout=20
    )
    report = json.loads(done.stdout) if done.stdout.strip() else {"stderr": done.stderr}
    report["secret_seen"] = "hunter2" in done.stdout
    return report


def unix_connect(arguments: dict[str, Any], context: Any) -> str:
    import socket

    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as exc:
        return f"socket refused: {exc.strerror}"
    try:
        sock.connect(arguments["path"])
    except OSError as exc:
        return f"connect refused: {exc.strerror}"
    sock.sendall(b"hello from the sandbox")
    sock.close()
    return "connected"


def sleep_for(arguments: dict[str, Any], context: Any) -> float:
    time.sleep(arguments["seconds"])
    return arguments["seconds"]


def sleep_marked(arguments: dict[str, Any], context: Any) -> None:
    """A marked child that sleeps, then the tool waits for it."""
    import subprocess

    subprocess.run([arguments["marker"], "3600"], executable=SLEEP)


def protected_writes(arguments: dict[str, Any], context: Any) -> dict[str, str]:
    """Try to change and create protected paths; report each attempt."""
    outcomes: dict[str, str] = {}
    for path, text in arguments["writes"].items():
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "a") as fh:
                fh.write(text)
            outcomes[path] = "written"
        except OSError as exc:
            outcomes[path] = f"refused: {exc.strerror}"
    for name in arguments.get("unlink", ()):
        try:
            os.unlink(name)
            outcomes[f"unlink {name}"] = "removed"
        except OSError as exc:
            outcomes[f"unlink {name}"] = f"refused: {exc.strerror}"
    for name, target in arguments.get("symlinks", {}).items():
        try:
            os.symlink(target, name)
            outcomes[name] = "linked"
        except OSError as exc:
            outcomes[name] = f"refused: {exc.strerror}"
    for src, dst in arguments.get("renames", {}).items():
        try:
            os.rename(src, dst)
            outcomes[f"{src}->{dst}"] = "renamed"
        except OSError as exc:
            outcomes[f"{src}->{dst}"] = f"refused: {exc.strerror}"
    return outcomes


def create_then_sleep(arguments: dict[str, Any], context: Any) -> None:
    with open(arguments["path"], "w") as fh:
        fh.write("[runner]\n")
    time.sleep(3600)


def hard_link(arguments: dict[str, Any], context: Any) -> str:
    os.link(arguments["source"], arguments["name"])
    return "linked"


def proc_listing(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """Every process this call can see in /proc: pid -> command line (argv joined by spaces)."""
    seen: dict[str, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    seen[entry] = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                continue
    return {"self": os.readlink("/proc/self"), "pid": os.getpid(), "processes": seen}


def random_draws(arguments: dict[str, Any], context: Any) -> list[float]:
    """What ``random`` (imported with this module by the zygote: its state is inherited by
    fork) draws in this call."""
    return [random.random() for _ in range(4)]


def proc_writability(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """What of /proc's host-wide knobs this call could change: for each of ``/proc/sys``,
    ``irq``, ``bus`` and ``sysrq-trigger`` that exists, whether its mount is read-only; what
    writing a sysctl its own current value gives (harmless if it were allowed); and what the
    root directory holds that is a proc (a proc of the deck's own must never be reachable)."""
    import errno

    mounts = {}
    for name in ("sys", "irq", "bus", "sysrq-trigger"):
        path = f"/proc/{name}"
        if os.path.exists(path):
            mounts[name] = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    sysctl = "/proc/sys/vm/swappiness"
    try:
        with open(sysctl) as fh:
            value = fh.read()
        with open(sysctl, "w") as fh:
            fh.write(value)
        write = "written"
    except OSError as exc:
        write = f"refused: {errno.errorcode.get(exc.errno or 0, exc.errno)}"
    procs = []
    for entry in os.listdir("/"):  # two levels: where a hidden proc was bound
        top = os.path.join("/", entry)
        below = [top]
        if os.path.isdir(top) and top not in ("/proc", "/usr"):
            try:
                below += [os.path.join(top, name) for name in os.listdir(top)]
            except OSError:
                pass
        procs += [p for p in below if os.path.exists(os.path.join(p, "self", "status"))]
    procs = [p for p in procs if p != "/proc"]
    return {"read_only": mounts, "sysctl_write": write, "other_procs": procs}


def root_file_system_writes(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """Try to leave a file in every directory of the sandbox's own root file system (``/``,
    ``/etc``, the parents bubblewrap made for its mounts: not a mount of their own), three levels
    deep. Returns the paths created (and removes none) and what ``/`` holds."""
    root_dev = os.stat("/").st_dev
    created = []
    todo = ["/"]
    for _ in range(3):
        below = []
        for folder in todo:
            try:
                if os.stat(folder).st_dev != root_dev:
                    continue  # a mount of its own (/tmp, /usr, the workdir): not the root's
                entries = os.listdir(folder)
            except OSError:
                continue
            path = os.path.join(folder, arguments["name"])
            try:
                with open(path, "w") as fh:
                    fh.write("left by an earlier call")
                created.append(path)
            except OSError:
                pass
            below += [os.path.join(folder, e) for e in entries if e != arguments["name"]
                      and os.path.isdir(os.path.join(folder, e))
                      and not os.path.islink(os.path.join(folder, e))]
        todo = below
    return {"created": created, "root": sorted(os.listdir("/"))}


def write_on_channel(arguments: dict[str, Any], context: Any) -> list[int]:
    """Write a raw frame (``payload``, under a header declaring ``length`` bytes, by default
    its own) on every socket or pipe above stderr: the tool's own response channel."""
    import stat
    import struct

    payload = arguments["payload"].encode()
    header = struct.pack(">I", arguments.get("length", len(payload)))
    written = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            mode = os.fstat(fd).st_mode
            if fd > 2 and (stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode)):
                os.write(fd, header + payload)
                written.append(fd)
        except OSError:
            pass
    return written


def call_control(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """What a sandboxed tool knows of its call's deadline and fate (``ToolContext``)."""
    context.commit()  # nothing to refuse in a sandbox: giving up kills the process
    return {"seconds_left": context.seconds_left(), "cancelled": context.cancelled()}


def protected_rules(arguments: dict[str, Any], context: Any) -> list[str]:
    """The protected path rules the tool's own context carries inside the sandbox."""
    return list(context.protected_paths)


# -- test_tool_misbehaviour_sandbox.py: results JSON cannot carry as they are, hostile errors --


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")

    __repr__ = __str__


class _StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class _HugeMessage(Exception):
    def __str__(self) -> str:
        return "x" * 5_000_000


def odd_value(arguments: dict[str, Any], context: Any) -> Any:
    """What a careless tool returns, by ``arguments["kind"]``."""
    kind = arguments["kind"]
    if kind == "bytes":
        return b"\x00\xffbytes"
    if kind == "set":
        return {3, 1, 2}
    if kind == "tuple-key":
        return {(1, 2): "tuple key", None: "none"}
    if kind == "colliding-keys":
        return {1: "int", "1": "str"}
    if kind == "unprintable":
        return [_Unprintable()]
    if kind == "surrogate":
        return "a\ud800b"
    if kind == "long-int":
        return [10**5000 + 7]
    if kind == "self-reference":
        loop: list[Any] = []
        loop.append(loop)
        return loop
    if kind == "deep":
        deep: list[Any] = []
        node = deep
        for _ in range(100_000):
            child: list[Any] = []
            node.append(child)
            node = child
        return deep
    raise ValueError(kind)


def hostile_exception(arguments: dict[str, Any], context: Any) -> None:
    """Raise an exception whose text is hostile, by ``arguments["kind"]``."""
    kind = arguments["kind"]
    if kind == "str-raises":
        raise _StrRaises()
    if kind == "huge":
        raise _HugeMessage()
    raise ValueError(10**5000)


def generator_tool(arguments: dict[str, Any], context: Any) -> Any:
    yield 1


def hand_made_result(arguments: dict[str, Any], context: Any) -> Any:
    """A ToolResult built by hand, inconsistent: a failure without an error, odd metadata."""
    from tooldeck_hookspecs import ToolResult

    return ToolResult(success=False, metadata={"when": {1, 2}, "big": 10**5000})


def call_time(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    """What the tool is told of its time: ``context.limits`` and the seconds left."""
    return {"limits": dict(context.limits), "seconds_left": context.seconds_left()}
