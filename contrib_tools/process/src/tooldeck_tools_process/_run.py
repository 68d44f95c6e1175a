"""Run one child process with a deadline, capped output and a clean ending.

Shared by the packs that run programs (``tooldeck-tools-shell``, ``tooldeck-tools-code``).

What it guarantees, beyond :func:`subprocess.run`:

- the child starts in its own session (its own process group), with exactly the environment it is
  given and its stdin fed from memory (or ``/dev/null``);
- stdout and stderr are read concurrently; each keeps its first and last bytes up to a cap and
  counts the rest, so a chatty program cannot exhaust memory, and a program that writes far more
  than anyone will read (``yes``) is killed once ``discard_limit`` bytes were thrown away;
- at the deadline the whole process group is killed (SIGKILL); when the child exits, leftover
  members of its group that still hold the pipes get ``LINGER_S`` to finish, then are killed too;
- exit is observed through a pidfd (or ``waitid(WNOWAIT)``) without reaping, so the group id
  cannot be reused by an unrelated process before the group is killed.

Processes that left the group (``setsid`` daemons) are out of reach here: the sandbox that runs
the tool (bubblewrap's PID namespace and the call's cgroup, or the runner's subreaper in degraded
mode) ends them. Memory, process count and ``/tmp`` are bounded for the whole call by the runner
(its per-call cgroup); the ``preexec_fn`` limits a pack passes here are per process, on top.
"""

from __future__ import annotations

import codecs
import math
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

__all__ = [
    "Capture", "Completed", "LineProgress", "decode_output", "describe", "run_process", "LINGER_S",
    "ANSWER_MARGIN_S", "within_call",
]

#: How long pipes may stay open after the child exited (its group's leftovers), in seconds.
LINGER_S = 0.5
_CHUNK = 65536


@attrs.define(eq=False)
class Capture:
    """One output stream: its first ``head_cap`` bytes, its last ``tail_cap`` bytes, a count."""

    head_cap: int
    tail_cap: int
    head: bytearray = attrs.field(factory=bytearray)
    tail: bytearray = attrs.field(factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_cap:
            self.tail += chunk
            # Trim in batches: deleting from the front of a bytearray is a copy.
            if len(self.tail) > 2 * self.tail_cap:
                del self.tail[: -self.tail_cap]

    @property
    def truncated(self) -> bool:
        """More bytes were written than kept."""
        return self.total > len(self.head) + min(len(self.tail), self.tail_cap)

    @property
    def discarded(self) -> int:
        """Bytes counted but not kept."""
        return self.total - len(self.head) - min(len(self.tail), self.tail_cap)

    def kept(self) -> tuple[bytes, bytes]:
        """(head, tail): contiguous when nothing was dropped, else with a gap between them."""
        return bytes(self.head), bytes(self.tail[-self.tail_cap :] if self.tail_cap else b"")


@attrs.frozen(kw_only=True)
class Completed:
    """How a child process ended."""

    #: Exit status; ``128 + N`` when killed by signal N (the shell's convention).
    exit_code: int
    #: The signal's name (``SIGKILL``) when the child was killed by one, else None.
    signal: str | None
    stdout: Capture
    stderr: Capture
    duration_s: float
    timed_out: bool = False
    #: Killed because it wrote more than ``discard_limit`` bytes nobody would read.
    output_overflow: bool = False


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _exited(pid: int) -> bool:
    """True once ``pid`` has exited; the zombie is left for ``wait`` (WNOWAIT)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


#: What a tool keeps of its call's time, at most, to kill its program and send its answer
#: before the executor gives up on the call (a fifth of what is left, at least 0.5 s).
ANSWER_MARGIN_S = 1.0


def default_timeout(default_s: float, own_s: float, limits: Any) -> tuple[float, bool]:
    """The time a run whose arguments name none may take, and whether the deployment chose it.

    ``default_s`` (the pack's default, e.g. shell_exec's 60 s), unless the deployment set the
    tool's ``execution.timeout_s`` to another value than the pack's own ``own_s``
    (``ToolContext.limits["timeout_s"]``): then that value, so that the run may use the
    call's whole time (:func:`within_call` keeps the margin to answer in). An operator who
    raised shell_exec's limit to 10 minutes for builds had every command killed at the
    60 s default all the same, unless the model happened to ask for more.
    """
    configured = limits.get("timeout_s") if isinstance(limits, Mapping) else None
    if (
        isinstance(configured, int | float)
        and not isinstance(configured, bool)
        and math.isfinite(configured)
        and configured > 0
        and configured != own_s
    ):
        return float(configured), True
    return default_s, False


def requested_timeout(
    given: Any, check: Callable[[Any], float], default_s: float, own_s: float, limits: Any
) -> tuple[float, bool]:
    """A run's timeout and whether the deployment chose it: ``check(given)`` (the tool's own
    validation of the model's ``timeout_s``) when the model gave one, else
    :func:`default_timeout`."""
    if given is None:
        return default_timeout(default_s, own_s, limits)
    return check(given), False


def whose_limit(tool: str, noun: str, timeout_s: float, deployed: bool) -> str:
    """Which time limit a call's deadline stood for, in a TIMEOUT message of ``tool``."""
    if deployed:
        return f"{tool}'s execution.timeout_s of {timeout_s:g} s, set by the deployment,"
    return (f"{tool}'s execution.timeout_s, which the deployment set below this {noun}'s "
            f"timeout_s of {timeout_s:g} s")


def within_call(timeout_s: float, seconds_left: float | None) -> tuple[float, bool]:
    """The deadline to run a program with: ``timeout_s`` (the tool's own, from its arguments),
    or less when the call's own deadline comes first (``ToolContext.seconds_left()``: the
    executor's ``execution.timeout_s``, which a deployment may set lower), minus a margin to
    answer in. Returns ``(seconds, True when the call's deadline decided)``: then a timeout is
    the tool's to report, with the output so far, instead of the executor's, with nothing.
    """
    if seconds_left is None:
        return timeout_s, False
    margin = min(ANSWER_MARGIN_S, max(0.5, seconds_left / 5))
    bounded = max(seconds_left - margin, 0.05)
    if bounded >= timeout_s:
        return timeout_s, False
    return bounded, True


def run_process(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    stdin: bytes | None,
    timeout_s: float,
    stdout_caps: tuple[int, int],
    stderr_caps: tuple[int, int],
    discard_limit: int,
    preexec_fn: Callable[[], None] | None = None,
    on_output: Callable[[str, bytes], None] | None = None,
) -> Completed:
    """Run ``argv`` (no shell) and collect what it did; see the module docstring.

    ``*_caps`` are ``(head_bytes, tail_bytes)`` kept per stream. Raises :class:`OSError` when the
    program cannot be started (not found, not executable) and :class:`ValueError` for arguments
    the OS cannot take (NUL bytes); everything after the start is reported in the result.
    ``on_output(stream, chunk)`` sees each chunk read (``"stdout"`` / ``"stderr"``) as it
    arrives, for progress; what it raises is ignored.
    """
    started = time.monotonic()
    proc = subprocess.Popen(  # an argv list, no shell: that is the point
        list(argv),
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=dict(env),
        close_fds=True,
        start_new_session=True,
        preexec_fn=preexec_fn,  # safe: the sandbox worker is single-threaded
    )
    out = Capture(*stdout_caps)
    err = Capture(*stderr_caps)
    deadline = started + timeout_s
    timed_out = overflow = False
    selector = selectors.DefaultSelector()
    pidfd: int | None = None
    try:
        try:
            pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            pidfd = None  # old kernel: poll with waitid(WNOWAIT) instead
        assert proc.stdout is not None and proc.stderr is not None
        streams = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        for fd in streams:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        pending = memoryview(stdin or b"")
        stdin_fd = -1
        if proc.stdin is not None:
            stdin_fd = proc.stdin.fileno()
            os.set_blocking(stdin_fd, False)
            selector.register(stdin_fd, selectors.EVENT_WRITE)
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ)
        exited_at: float | None = None
        while True:
            now = time.monotonic()
            if exited_at is None and pidfd is None and _exited(proc.pid):
                exited_at = now
            open_pipes = any(fd in streams for fd in _registered(selector))
            if exited_at is not None and (not open_pipes or now >= exited_at + LINGER_S):
                break
            if now >= deadline:
                timed_out = True
                break
            wait = deadline - now
            if exited_at is not None:
                wait = min(wait, exited_at + LINGER_S - now)
            elif pidfd is None:
                wait = min(wait, 0.05)
            for key, _ in selector.select(max(wait, 0.0)):
                fd = key.fd
                if fd == pidfd:
                    selector.unregister(fd)
                    exited_at = time.monotonic()
                elif fd == stdin_fd:
                    try:
                        written = os.write(fd, pending[:_CHUNK])
                        pending = pending[written:]
                    except (BrokenPipeError, BlockingIOError, OSError):
                        pending = pending[:0]  # the child stopped reading: that is its choice
                    if not pending:
                        selector.unregister(fd)
                        proc.stdin.close()  # type: ignore[union-attr]
                else:
                    try:
                        chunk = os.read(fd, _CHUNK)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        selector.unregister(fd)
                        continue
                    streams[fd].add(chunk)
                    if on_output is not None:
                        try:
                            on_output("stdout" if streams[fd] is out else "stderr", chunk)
                        except Exception:
                            pass  # progress is best effort
            if out.discarded + err.discarded > discard_limit:
                overflow = True
                break
        # The leader is a zombie at most (never reaped above), so its group id is still ours.
        _kill_group(proc.pid)
        if timed_out or overflow:
            # What the killed processes wrote before dying is still in the pipes.
            for fd, capture in streams.items():
                if fd in _registered(selector):
                    _drain_now(fd, capture)
        returncode = proc.wait()
    except BaseException:
        _kill_group(proc.pid)
        proc.kill()
        proc.wait()
        raise
    finally:
        selector.close()
        if pidfd is not None:
            os.close(pidfd)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
    signame = _signal_name(-returncode) if returncode < 0 else None
    return Completed(
        exit_code=128 - returncode if returncode < 0 else returncode,
        signal=signame,
        stdout=out,
        stderr=err,
        duration_s=round(time.monotonic() - started, 4),
        timed_out=timed_out,
        output_overflow=overflow,
    )


def _registered(selector: selectors.BaseSelector) -> set[int]:
    return {key.fd for key in selector.get_map().values()}


def _drain_now(fd: int, capture: Capture) -> None:
    for _ in range(64):
        try:
            chunk = os.read(fd, _CHUNK)
        except OSError:
            return
        if not chunk:
            return
        capture.add(chunk)


def _utf8_head(data: bytes) -> bytes:
    """``data`` without an incomplete UTF-8 sequence at its end (a cut, not bad data)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    decoder.decode(data, final=False)
    pending, _ = decoder.getstate()
    return data[: len(data) - len(pending)] if pending else data


def _utf8_tail(data: bytes) -> bytes:
    """``data`` without continuation bytes at its start (the rest of a cut character)."""
    start = 0
    while start < min(3, len(data)) and 0x80 <= data[start] <= 0xBF:
        start += 1
    return data[start:]


def _text(data: bytes) -> tuple[str, bool]:
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace"), True


def decode_output(capture: Capture, encoding: str) -> tuple[str, str]:
    """(content, encoding label) of a stream, for a JSON result.

    ``encoding="text"``: UTF-8, bytes that are not UTF-8 replaced by U+FFFD and the label saying
    so (``"utf-8 (with replacements)"``); when bytes were dropped, the head and the tail are joined
    by a line saying how many. ``encoding="base64"``: the head's bytes, base64 (the tail is
    dropped: bytes on both sides of a gap are of little use to a decoder).
    """
    head, tail = capture.kept()
    if encoding == "base64":
        import base64

        return base64.b64encode(head).decode("ascii"), "base64"
    if not capture.truncated:
        text, replaced = _text(head + tail)
    else:
        first, bad_first = _text(_utf8_head(head))
        last, bad_last = _text(_utf8_tail(tail))
        gap = capture.total - len(head) - len(tail)
        text = f"{first}\n[... {gap} bytes omitted ...]\n{last}" if last else first
        replaced = bad_first or bad_last
    return text, "utf-8 (with replacements)" if replaced else "utf-8"


def describe(completed: Completed, encoding: str = "text") -> dict[str, Any]:
    """The JSON result of a finished program: exit code, both streams and what was cut.

    ``encoding`` applies to stdout (``text`` or ``base64``); stderr is always text.
    """
    stdout, stdout_encoding = decode_output(completed.stdout, encoding)
    stderr, stderr_encoding = decode_output(completed.stderr, "text")
    result: dict[str, Any] = {
        "exit_code": completed.exit_code,
        "stdout": stdout,
        "stderr": stderr,
        "stdout_encoding": stdout_encoding,
        "stderr_encoding": stderr_encoding,
        "truncated_stdout": completed.stdout.truncated,
        "truncated_stderr": completed.stderr.truncated,
        "stdout_bytes": completed.stdout.total,
        "stderr_bytes": completed.stderr.total,
        "duration_s": completed.duration_s,
    }
    if completed.signal:
        result["signal"] = completed.signal
    return result


#: The most of a progress message's line that is kept (its end: the newest output).
_PROGRESS_LINE_BYTES = 500


class LineProgress:
    """``on_output`` for :func:`run_process` reporting a long run's output lines as progress.

    Calls ``emit({"progress": lines, "message": last_line})`` at most every ``interval_s``
    (and never in the first ``interval_s``: quick commands report nothing), so a chatty
    command costs a few events a second, not one per line.
    """

    def __init__(self, emit: Callable[[Mapping[str, object]], None],
                 interval_s: float = 1.0) -> None:
        self._emit = emit
        self._interval = interval_s
        self._next = time.monotonic() + interval_s
        self._lines = 0
        self._partial = b""
        self._last = b""

    def __call__(self, stream: str, chunk: bytes) -> None:
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()[-4096:]
        complete = [line for line in lines if line.strip()]
        self._lines += len(lines)
        if complete:
            line = complete[-1]
            if len(line) > _PROGRESS_LINE_BYTES:
                # Said, not silent: and the cut word is dropped, since it may be the tail of
                # a secret whose name ("password=") fell before the cut, where no redaction
                # rule can recognise it any more.
                tail = line[-_PROGRESS_LINE_BYTES:]
                space = tail.find(b" ")
                line = b"[...] " + (tail[space + 1 :] if space != -1 else b"")
            self._last = line
        now = time.monotonic()
        if now >= self._next and self._last:
            self._next = now + self._interval
            text = self._last.decode("utf-8", "replace").strip()
            self._emit({"progress": self._lines, "message": f"[{stream}] {text}"})
