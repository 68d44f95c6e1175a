"""The ``code_execute`` tool: run a Python (or JavaScript) snippet and return what it did.

Called as ``code_execute(arguments, context)`` (``call_style="mapping"``), importable by
reference (``tooldeck_tools_code.tools:code_execute``) so that the runner runs it inside a sandbox
worker (bubblewrap: no network, the session's workdir read-only, a private ``/tmp``). The snippet
runs as a child process of that worker, in a fresh private directory (its working directory; the
files it leaves there come back in the result), with its own address-space and CPU limits and a
deadline that kills its whole process group.
"""

from __future__ import annotations

import base64
import math
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from tooldeck_tools_process import (
    Completed,
    LineProgress,
    describe,
    requested_timeout,
    run_process,
    whose_limit,
    within_call,
)

from tooldeck_hookspecs import ErrorCode, ToolContext, ToolFailure

__all__ = [
    "LANGUAGES",
    "DEFAULT_TIMEOUT_S",
    "MAX_TIMEOUT_S",
    "MAX_CODE_CHARS",
    "MAX_STDIN_BYTES",
    "PYTHON_ADDRESS_SPACE_MB",
    "PYTHON_MEMORY_MB",
    "NODE_MEMORY_MB",
    "NODE_HEAP_MB",
    "NODE_RESERVED_MB",
    "STDOUT_CAP_BYTES",
    "STDERR_CAP_BYTES",
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "MAX_FILES_TOTAL_BYTES",
    "collect_files",
    "node_path",
    "code_execute",
]

LANGUAGES = ("python", "javascript")
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 120.0
#: The tool's own ``execution.timeout_s``: the call's ``timeout_s`` plus room to start and answer.
EXECUTION_TIMEOUT_S = MAX_TIMEOUT_S + 15.0
MAX_CODE_CHARS = 100 * 1024
MAX_STDIN_BYTES = 1024 * 1024
#: The default memory of a call (``execution.memory_mb``; a deployment may set another). Where
#: the runner has no memory cgroup it gives every process of the call, the snippet's included,
#: that much address space (RLIMIT_AS), and the snippet gets the same: a bigger allocation
#: raises MemoryError. The tool reads the limit it was given, never this default.
PYTHON_MEMORY_MB = 256
#: Address space of a Python snippet where the call's memory cgroup bounds its real memory (the
#: runner then sets no RLIMIT_AS): a backstop that turns an absurd allocation into MemoryError.
#: Address space is not memory: numpy alone reserves 100-140 MiB (OpenBLAS buffers), every
#: thread 8 MiB of stack; at 256 MiB a 3000x3000 matrix product (176 MB in use) failed and a
#: pool of 32 threads could not start. The sandbox does not show the cgroup's size, so this
#: backstop cannot follow a larger ``execution.memory_mb`` (see the README).
PYTHON_ADDRESS_SPACE_MB = 1024
#: V8 reserves about 1 GiB of address space before it runs a line, so node gets a larger
#: address space and its heap is capped by V8 itself (``--max-old-space-size``): this much
#: beside the heap, and a heap of at least NODE_HEAP_MB (more where the call's address space
#: limit leaves room for it).
NODE_RESERVED_MB = 1024
NODE_MEMORY_MB = NODE_RESERVED_MB + 256
NODE_HEAP_MB = 256
STDOUT_CAP_BYTES = 64 * 1024
STDERR_CAP_BYTES = 32 * 1024
DISCARD_LIMIT_BYTES = 32 * 1024 * 1024
#: Files the snippet wrote that come back: at most this many, each up to MAX_FILE_BYTES, all
#: together up to MAX_FILES_TOTAL_BYTES (bigger ones are listed with their size only).
MAX_FILES = 20
MAX_FILE_BYTES = 64 * 1024
MAX_FILES_TOTAL_BYTES = 256 * 1024
_MAX_SCANNED = 2000
_PATH = "/usr/local/bin:/usr/bin:/bin"
_MEMORY_MARKERS = (
    "MemoryError",
    "JavaScript heap out of memory",
    "Cannot allocate memory",
    "std::bad_alloc",
    "Out of memory",
)


def node_path() -> str | None:
    """Where ``node`` is (the sandbox mounts the host's ``/usr``), or None."""
    return shutil.which("node", path=_PATH) or shutil.which("nodejs", path=_PATH)


def _invalid(message: str) -> ToolFailure:
    return ToolFailure(ErrorCode.INVALID_ARGUMENTS, message)


def _too_large(what: str, size: int, limit: int, unit: str) -> ToolFailure:
    return ToolFailure(
        ErrorCode.TOO_LARGE,
        f"{what} is {size} {unit}; code_execute accepts at most {limit} {unit}. Nothing was run.",
        suggestion="Send a shorter program; read large data from a file instead of embedding it.",
        details={"limit": limit, "size": size, "unit": unit},
    )


def _language(value: Any) -> str:
    if value is None:
        return "python"
    if value not in LANGUAGES:
        raise _invalid(f"language must be one of {', '.join(LANGUAGES)}, got {value!r}")
    return str(value)


def _code(value: Any) -> bytes:
    if not isinstance(value, str):
        raise _invalid(f"code must be a string, got {type(value).__name__}")
    if not value.strip():
        raise _invalid("code is empty")
    if len(value) > MAX_CODE_CHARS:
        raise _too_large("code", len(value), MAX_CODE_CHARS, "characters")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid("code contains characters that are not valid Unicode (lone "
                       "surrogates)") from None


def _stdin(value: Any) -> bytes | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _invalid(f"stdin must be a string, got {type(value).__name__}")
    if len(value) > MAX_STDIN_BYTES:
        raise _too_large("stdin", len(value), MAX_STDIN_BYTES, "characters")
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid("stdin contains characters that are not valid Unicode") from None
    if len(data) > MAX_STDIN_BYTES:
        raise _too_large("stdin", len(data), MAX_STDIN_BYTES, "bytes")
    return data


def _timeout(value: Any) -> float:
    if value is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid(f"timeout_s must be a number of seconds, got {value!r}")
    if not 0 < value <= MAX_TIMEOUT_S:
        raise _invalid(f"timeout_s must be more than 0 and at most {MAX_TIMEOUT_S:g}, "
                       f"got {value!r}")
    return float(value)


def _call_address_space_mb() -> int | None:
    """The address space the call gives each of its processes, in MiB: this process's hard
    RLIMIT_AS, which the runner sets to the call's ``execution.memory_mb`` where no memory
    cgroup bounds the call; None when there is no such limit (a cgroup, whose size the sandbox
    does not show, or no sandbox at all)."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard == resource.RLIM_INFINITY:
        return None
    return int(hard // (1024 * 1024))


@attrs.frozen
class _Memory:
    """What a snippet's process gets: its address space, V8's heap, and what to call them."""

    address_space_mb: int
    heap_mb: int | None
    #: True: the address space is the call's own memory limit (the runner's fallback); False:
    #: the snippet's backstop inside the call's memory cgroup (or without any limit).
    from_call: bool


def _cgroup_memory_mb(limits: Mapping[str, Any] | None) -> int | None:
    """The call's memory when a memory cgroup bounds the whole call (``context.limits``, from
    the runner), which the sandbox does not show otherwise; None when not said."""
    if not limits or limits.get("memory") != "cgroup":
        return None
    value = limits.get("memory_mb")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _memory(language: str, limits: Mapping[str, Any] | None = None) -> _Memory:
    """The snippet's memory limits, from what the call has (see :func:`_call_address_space_mb`).

    The call's own limit wins, larger or smaller than the backstops: a deployment that gives
    code_execute 2 GiB gets 2 GiB for a snippet, not the 1 GiB backstop. Under a memory cgroup
    (``limits``), the backstops grow with the call's memory: the cgroup is the real limit.
    """
    cgroup_mb = _cgroup_memory_mb(limits)
    if cgroup_mb is not None:
        if language == "python":
            return _Memory(max(PYTHON_ADDRESS_SPACE_MB, cgroup_mb + 512), None, from_call=False)
        return _Memory(
            max(NODE_MEMORY_MB, cgroup_mb + NODE_RESERVED_MB),
            max(NODE_HEAP_MB, cgroup_mb - NODE_RESERVED_MB),
            from_call=False,
        )
    call_mb = _call_address_space_mb()
    if language == "python":
        if call_mb is None:
            return _Memory(PYTHON_ADDRESS_SPACE_MB, None, from_call=False)
        return _Memory(call_mb, None, from_call=True)
    if call_mb is None:
        return _Memory(NODE_MEMORY_MB, NODE_HEAP_MB, from_call=False)
    return _Memory(call_mb, max(NODE_HEAP_MB, call_mb - NODE_RESERVED_MB), from_call=True)


def _limits(memory_mb: int, cpu_s: int) -> Callable[[], None]:
    """A preexec function lowering the child's limits below the sandbox worker's."""

    def apply() -> None:
        import resource

        for which, value in (
            (resource.RLIMIT_AS, memory_mb * 1024 * 1024),
            (resource.RLIMIT_CPU, cpu_s),
            (resource.RLIMIT_CORE, 0),
        ):
            soft, hard = resource.getrlimit(which)
            # CPU: the soft limit sends SIGXCPU, reported as running out of time; at a hard
            # limit equal to it the kernel sends SIGKILL instead.
            top = value + 1 if which == resource.RLIMIT_CPU else value
            if hard != resource.RLIM_INFINITY:
                value, top = min(value, hard), min(top, hard)
            try:
                resource.setrlimit(which, (value, top))
            except (ValueError, OSError):
                pass  # an admin's lower limit stays

    return apply


def _read_file(path: str, size: int) -> bytes | None:
    """The bytes of a regular file, opened without following links (None if it changed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, size + 1)[:size]
    finally:
        os.close(fd)


def _content(data: bytes) -> tuple[str, str]:
    if b"\x00" not in data:
        try:
            return data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(data).decode("ascii"), "base64"


def collect_files(root: str) -> dict[str, Any]:
    """The files under ``root`` (recursively, links not followed), with small contents.

    Returns ``{"files": [{name, size, encoding?, content?, omitted?}], "files_omitted": n,
    "files_truncated": bool}``: at most :data:`MAX_FILES` entries in name order; a file larger
    than :data:`MAX_FILE_BYTES`, or past the :data:`MAX_FILES_TOTAL_BYTES` budget, is listed with
    its size and ``omitted`` saying why; a symbolic link is listed as such, never read.
    """
    found: list[tuple[str, os.stat_result]] = []
    scanned = 0
    stack = [""]
    while stack and scanned < _MAX_SCANNED:
        rel = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel)) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            scanned += 1
            name = f"{rel}/{entry.name}" if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(name)
            else:
                found.append((name, st))
    found.sort(key=lambda item: item[0])
    files: list[dict[str, Any]] = []
    budget = MAX_FILES_TOTAL_BYTES
    for name, st in found[:MAX_FILES]:
        shown = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        item: dict[str, Any] = {"name": shown, "size": st.st_size}
        if stat.S_ISLNK(st.st_mode):
            item.update(type="symlink", omitted="symbolic links are not followed")
        elif not stat.S_ISREG(st.st_mode):
            item.update(type="other", omitted="not a regular file")
        elif st.st_size > MAX_FILE_BYTES:
            item["omitted"] = f"larger than {MAX_FILE_BYTES} bytes"
        elif st.st_size > budget:
            item["omitted"] = f"the {MAX_FILES_TOTAL_BYTES}-byte budget for contents is used up"
        else:
            data = _read_file(os.path.join(root, name), MAX_FILE_BYTES)
            if data is None:
                item["omitted"] = "could not be read"
            else:
                budget -= len(data)
                item["content"], item["encoding"] = _content(data)
        files.append(item)
    omitted = len(found) - len(files)
    return {
        "files": files,
        "files_omitted": omitted,
        "files_truncated": omitted > 0 or scanned >= _MAX_SCANNED
        or any("omitted" in f for f in files),
    }


def _out_of_memory(completed: Completed, stderr: str) -> bool:
    if completed.exit_code == 0:
        return False
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    # Python: the last line of the traceback. Node: V8's fatal error text; both only count when
    # the program died of it (a snippet that catches MemoryError and goes on is not flagged).
    # The exception's class, without its module: subclasses of MemoryError count too (numpy's
    # "numpy._core._exceptions._ArrayMemoryError: Unable to allocate ..." came back as a plain
    # exit 1, not as the sandbox's memory limit it is).
    exception = last.split(":", 1)[0].strip().rsplit(".", 1)[-1]
    return (" " not in exception and exception.endswith("MemoryError")) or any(
        marker in stderr[-4000:] for marker in _MEMORY_MARKERS[1:]
    )


def _describe(completed: Completed, language: str) -> dict[str, Any]:
    return {"language": language, **describe(completed)}


def _command(
    language: str, script: str, timeout_s: float, memory: _Memory
) -> tuple[list[str], Callable[[], None]]:
    # RLIMIT_CPU counts every thread: a limit of timeout_s killed a snippet running two busy
    # threads at half its time, with SIGKILL and no word of why. The wall clock (timeout_s)
    # is the limit; CPU seconds are a backstop, so they allow every CPU for the whole time.
    cpu_s = math.ceil(timeout_s * (os.cpu_count() or 1)) + 1
    if language == "python":
        # -I: no PYTHON* variables, no user site, no script directory on sys.path; -u: output
        # is not lost in a buffer when the snippet dies; -B: no .pyc files in the results.
        argv = [sys.executable, "-I", "-u", "-B", "-X", "utf8", script]
        return argv, _limits(memory.address_space_mb, cpu_s)
    node = node_path()
    if node is None:
        raise ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            "javascript is not available here: Node.js (node) is not installed on this system",
            suggestion="Write the program in Python (language 'python') instead.",
            details={"language": "javascript", "available": ["python"]},
        )
    argv = [node, f"--max-old-space-size={memory.heap_mb or NODE_HEAP_MB}", script]
    return argv, _limits(memory.address_space_mb, cpu_s)


def _out_of_memory_failure(
    completed: Completed, result: dict[str, Any], language: str, memory: _Memory
) -> ToolFailure:
    """``SANDBOX_MEMORY_LIMIT`` naming the limit the snippet really had, never a default."""
    if language == "python":
        limit, what = memory.address_space_mb, "address space"
    else:
        limit, what = memory.heap_mb or NODE_HEAP_MB, "JavaScript heap"
    if memory.from_call and language == "python":
        whose = ("this call's memory limit (execution.memory_mb), applied as address space to "
                 "each of its processes")
    elif memory.from_call:
        whose = (f"what this call's memory limit of {memory.address_space_mb} MiB of address "
                 "space per process (execution.memory_mb) leaves beside the 1 GiB V8 reserves")
    else:
        whose = (f"this program's own {what} cap, inside the call's memory limit (stated in "
                 "the result's metadata['limits'])")
    return ToolFailure(
        ErrorCode.SANDBOX_MEMORY_LIMIT,
        f"the program ran out of memory ({limit} MiB of {what}: {whose}) and exited with "
        f"code {completed.exit_code}; its output is in details",
        suggestion="Use less memory: process the data in chunks or use smaller data "
        "structures.",
        details={"memory_mb": limit, "limit": what,
                 "scope": "call" if memory.from_call else "program", "result": result},
    )


def _file_size_limit() -> int | None:
    """The largest file the snippet may write, in bytes (RLIMIT_FSIZE, which the runner sets
    and the snippet inherits), or None without a limit."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else int(soft)


def code_execute(arguments: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
    """Run a snippet in a private directory and return its exit code, output and files.

    An exception in the snippet is a successful call: ``exit_code`` 1 and the traceback in
    ``stderr``. Running out of memory fails with ``SANDBOX_MEMORY_LIMIT``, running past
    ``timeout_s`` with ``TIMEOUT`` (both carry what was printed in ``details``); so does one
    still running when its call's deadline (``context.seconds_left()``: the tool's
    ``execution.timeout_s``, which a deployment may set lower) is about to pass.
    """
    if not isinstance(arguments, Mapping):
        raise _invalid("arguments must be a JSON object")
    language = _language(arguments.get("language"))
    code = _code(arguments.get("code"))
    stdin = _stdin(arguments.get("stdin"))
    # No timeout_s from the model: the pack's default, or the deployment's own time for the
    # tool where it configured one (a limit raised for long builds must not end at 60 s).
    timeout_s, deployed = requested_timeout(
        arguments.get("timeout_s"), _timeout, DEFAULT_TIMEOUT_S, EXECUTION_TIMEOUT_S,
        getattr(context, "limits", None),
    )
    call_left = context.seconds_left()
    limit_s, by_call = within_call(timeout_s, call_left)
    base = tempfile.mkdtemp(prefix="tooldeck-code-")
    try:
        # The snippet lives outside its working directory, so it is not returned as a file.
        script = os.path.join(base, "snippet.py" if language == "python" else "snippet.js")
        with open(script, "wb") as fh:
            fh.write(code)
        work = os.path.join(base, "work")
        os.mkdir(work)
        memory = _memory(language, getattr(context, "limits", None))
        argv, preexec = _command(language, script, limit_s, memory)
        env = {
            "PATH": _PATH,
            "HOME": work,
            "TMPDIR": work,
            "LANG": "C.UTF-8",
            "NO_COLOR": "1",
            "MPLBACKEND": "Agg",
            # RLIMIT_AS counts address space: each thread's first malloc reserved a 64 MiB
            # arena, so under 256 MiB a snippet could start only 6 threads (ThreadPoolExecutor's
            # default is the CPUs + 4). Two arenas take that to 22, at no cost in memory.
            "MALLOC_ARENA_MAX": "2",
            # Where the session's files are (read-only), for snippets that analyse them.
            "WORKDIR": context.workdir,
        }
        try:
            completed = run_process(
                argv,
                cwd=work,
                env=env,
                stdin=stdin,
                timeout_s=limit_s,
                stdout_caps=(STDOUT_CAP_BYTES // 2, STDOUT_CAP_BYTES - STDOUT_CAP_BYTES // 2),
                stderr_caps=(STDERR_CAP_BYTES // 4, STDERR_CAP_BYTES - STDERR_CAP_BYTES // 4),
                discard_limit=DISCARD_LIMIT_BYTES,
                preexec_fn=preexec,
                # Long runs report their latest output line about once a second.
                on_output=LineProgress(context.emit),
            )
        except OSError as exc:
            raise ToolFailure(
                ErrorCode.EXECUTION_ERROR,
                f"the {language} interpreter could not be started: {exc.strerror or exc}",
                details={"language": language, "interpreter": argv[0]},
            ) from None
        result = _describe(completed, language)
        if completed.timed_out and by_call:
            raise ToolFailure(
                ErrorCode.TIMEOUT,
                # The call's limit also counts its time in the queue and the sandbox's start:
                # blaming "the deployment" alone misled a snippet that had waited behind others.
                f"the program was stopped after {limit_s:.3g} s, when this call's time limit was "
                f"about to run out ({whose_limit('code_execute', 'snippet', timeout_s, deployed)} "
                "or which the call had partly spent waiting in its queue behind other calls and "
                "for its sandbox: "
                f"{max(call_left or 0.0, 0.0):.3g} s of it were left when the program started), "
                "and was killed",
                suggestion=(
                    "A larger timeout_s does not help here: do less work per call (process less "
                    "data, split the task); what it printed so far is in details.partial. If "
                    "other snippets were running at the same time, this one waited for them: try "
                    "it again alone."
                ),
                details={"timeout_s": timeout_s, "effective_timeout_s": round(limit_s, 3),
                         "seconds_left_at_start": round(max(call_left or 0.0, 0.0), 3),
                         "limited_by": "call deadline", "deployment_timeout": deployed,
                     "partial": result},
            )
        if completed.timed_out:
            raise ToolFailure(
                ErrorCode.TIMEOUT,
                f"the program did not finish within {timeout_s:g} s and was killed",
                suggestion=(
                    f"Look for an endless loop or a wait for input; process less data, or pass "
                    f"a larger timeout_s (at most {MAX_TIMEOUT_S:g})."
                ),
                details={"timeout_s": timeout_s, "partial": result},
            )
        if _out_of_memory(completed, result["stderr"]):
            raise _out_of_memory_failure(completed, result, language, memory)
        result.update(collect_files(work))
        notes = []
        if completed.signal == "SIGXFSZ":
            fsize = _file_size_limit()
            notes.append("the program was killed for writing a file larger than "
                         + (f"{fsize} bytes, the sandbox's limit per file" if fsize is not None
                            else "allowed"))
        if completed.output_overflow:
            result["output_limit_exceeded"] = True
            notes.append(f"the program printed more than {DISCARD_LIMIT_BYTES} bytes beyond "
                         "what is kept and was killed")
        if result["truncated_stdout"] or result["truncated_stderr"]:
            notes.append("output was cut: only its beginning and end are shown; print less, "
                         "or write results to a file")
        if result["files_truncated"]:
            notes.append("some files are listed without content (too many or too large); "
                         "print a summary of them instead")
        if notes:
            result["note"] = "; ".join(notes)
        return result
    finally:
        shutil.rmtree(base, ignore_errors=True)
