"""The stdio transport of ``tooldeck serve mcp``: lines in, lines out, JSON-RPC framing checked.

The SDK's own stdio reader validates each line against its message models and passes on what
it cannot read as an exception that nothing answers; worse, pydantic ignores unknown keys, so
a request whose ``id`` is null, a float, an object or a boolean reads as a *notification* and
is silently dropped, as is a JSON-RPC batch (a JSON array). A client waited forever for each.

This transport reads the raw lines itself (so the id a client actually sent is still there)
and answers, as JSON-RPC 2.0 asks:

* a line that is not JSON: ``-32700`` Parse error (id null, or the id found in the text);
* JSON that is not a valid request (a scalar, a bad ``jsonrpc``/``method``/``params``, an id
  that is not a string or an integer): ``-32600`` Invalid Request (with the id when it is a
  valid one, else null);
* a batch: on protocol versions that have batches (2024-11-05, 2025-03-26) each element is
  served and the answers go back as one array once every request in it is answered (nothing
  for a batch of notifications); on later versions (2025-06-18 removed batches) and before
  ``initialize``, ``-32600``;
* a malformed *response* from the client (to our sampling or elicitation request) fails that
  request at once instead of leaving it waiting, and is not answered (JSON-RPC never answers
  a response);
* a line longer than :data:`MAX_LINE_BYTES` is skipped unread (``-32600``): memory stays
  bounded whatever the client sends.

What one connection can hold is bounded too. At most :data:`MAX_IN_FLIGHT` of its requests
are served at once; later ones wait in order (at most :data:`MAX_WAITING` of them,
:data:`MAX_WAITING_BYTES` in all), and a request past both limits is answered at once with
:data:`SERVER_BUSY` ("retry once an answer came"). Responses and notifications of the client
never wait (an answer to the server's own elicitation must reach the call waiting for it), and
a request still waiting that the client cancels is dropped unanswered. Answers go out through
a queue of at most :data:`MAX_QUEUED_OUT_BYTES`: while a client does not read them, the server
takes no further answer and reads nothing more from the client (its writes block), so a client
that never reads holds bounded memory instead of every answer it asked for.

Everything else goes to the SDK's server as it would have. Like the SDK's transport, fd 0 and
fd 1 point at the null device and stderr while serving, so a tool's child process or a stray
``print`` can neither read nor corrupt the protocol.

Nothing here imports the SDK at module level: the server module imports this one at start-up.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import Any

import attrs
import trio

from tooldeck_hookspecs import json_values as _json_values

log = logging.getLogger("tooldeck.mcp")

#: ``mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS`` of the SDK (oldest to newest); a test keeps
#: them equal.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

#: Protocol versions on which a client may send JSON-RPC batches (2025-06-18 removed them).
BATCH_VERSIONS = frozenset({"2024-11-05", "2025-03-26"})

#: Longest line (one JSON-RPC message or batch) read; the HTTP transport's body cap.
MAX_LINE_BYTES = 32 * 1024 * 1024

#: Bytes of an oversized line kept to find its id in (the id comes early in real frames).
_HEAD_BYTES = 4096

#: Most JSON values (objects, arrays and their elements) one message may hold, counted in its
#: raw bytes before it is parsed: parsing multiplies a line's size in memory (a 30 MB line of
#: ``{},{},...`` became 2 GB of objects, and seconds of work on the loop), so a message of
#: ten million tiny values must be refused before it is parsed, whatever its byte size.
MAX_MESSAGE_VALUES = 100_000

#: Most elements of one JSON-RPC batch served.
MAX_BATCH = 1000

#: Lines longer than this have their JSON values counted in a worker thread.
_INLINE_COUNT_BYTES = 1 << 20

#: Requests of one connection served at once (handed to the server, not yet answered).
MAX_IN_FLIGHT = 32

#: Requests of one connection read past :data:`MAX_IN_FLIGHT` that wait for their turn...
MAX_WAITING = 256

#: ...and their bytes at most (one request of any size can always wait).
MAX_WAITING_BYTES = 16 * 1024 * 1024

#: Bytes written for the client that it has not read yet: past this the connection takes no
#: further answer from the server and reads nothing more from the client.
MAX_QUEUED_OUT_BYTES = 8 * 1024 * 1024

#: JSON-RPC error code of a request refused because its connection is at both limits (in the
#: range JSON-RPC 2.0 leaves to the implementation's server errors; the MCP SDK uses -32000
#: for a closed connection and -32001 for a timeout). The request did not run: send it again
#: once an answer came.
SERVER_BUSY = -32005

_ID_RE = re.compile(r'"id"\s*:\s*(-?[0-9]{1,18}(?![0-9.eE])|"(?:[^"\\]|\\.){0,200}")')


def valid_id(value: object) -> bool:
    """Whether ``value`` is a request id MCP accepts: a string (that UTF-8 can carry back: no
    lone surrogate) or an integer (not a bool)."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return False
        return True
    return isinstance(value, int) and not isinstance(value, bool)


def negotiate(requested: object) -> str:
    """The protocol version the server answers ``initialize`` with (as the SDK does)."""
    return requested if isinstance(requested, str) and requested in HANDSHAKE_VERSIONS else (
        HANDSHAKE_VERSIONS[-1]
    )


def json_values(raw: bytes | bytearray, limit: int = MAX_MESSAGE_VALUES) -> int:
    """About how many JSON values the raw message ``raw`` holds, exact up to ``limit``
    (:func:`tooldeck_hookspecs.json_values`, which the core uses for a model's arguments too).
    Run it off the event loop for long messages."""
    return _json_values(raw, limit)


def _id_in_text(text: str) -> str | int | None:
    """The id of a message read from its raw text (a frame no JSON parser would take)."""
    match = _ID_RE.search(text[:_HEAD_BYTES])
    if not match:
        return None
    try:
        found = json.loads(match.group(1))
    except ValueError:
        return None
    return found if valid_id(found) else None


def request_id(error: Exception) -> tuple[bool, str | int | None]:
    """From the validation error of one line: (was the line JSON at all, the message's id or
    None). The id is read from the parsed message when pydantic kept it, else from the raw
    text (a 5,000-digit integer or deep nesting that json refuses)."""
    errors_of = getattr(error, "errors", None)
    if errors_of is None:
        return True, None
    try:
        errors = errors_of()
    except Exception:
        return True, None
    parsed, raw = True, None
    for item in errors:
        value = item.get("input")
        if item.get("type") == "json_invalid":
            parsed = False
            raw = value if isinstance(value, str | bytes) else raw
        elif isinstance(value, Mapping) and "id" in value:
            found = value["id"]
            return True, found if valid_id(found) else None
    if raw is not None:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        try:
            message = json.loads(text)
        except (ValueError, RecursionError):
            message = None
        if isinstance(message, Mapping):
            found = message.get("id")
            return parsed, found if valid_id(found) else None
        return parsed, _id_in_text(text)
    return parsed, None


def _whole_message(text: str, error: Exception) -> Any:
    """The parsed line a validation error is about (a list, a dict, a scalar), or None."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # a 5,000-digit integer: what pydantic parsed
        pass
    try:
        errors = error.errors()  # type: ignore[attr-defined]
    except Exception:
        return None
    for item in errors:
        depth = len(item.get("loc", ()))
        if depth <= 1 or (depth == 2 and item.get("type") == "missing"):
            return item.get("input")
    return None


@attrs.define
class _Batch:
    """One JSON-RPC batch: its answers (wire JSON), collected until no request in it waits."""

    answers: list[str] = attrs.Factory(list)
    #: Ids of the batch's requests still unanswered (a duplicated id is listed twice).
    waiting: list[Any] = attrs.Factory(list)
    #: Every element was read (no more answers can be expected than are waiting).
    sealed: bool = False
    written: bool = False

    @property
    def done(self) -> bool:
        return self.sealed and not self.waiting and not self.written


@attrs.frozen
class _Oversized:
    """A line longer than :data:`MAX_LINE_BYTES`, skipped: only its start is kept."""

    head: bytes


@attrs.frozen
class _Line:
    """A line the transport answers itself (not the server's answer to a request it got)."""

    text: str


@attrs.frozen
class _Waiting:
    """A request read while :data:`MAX_IN_FLIGHT` of its connection were being served."""

    message: Any
    request_id: Any
    size: int
    batch: _Batch | None


@attrs.frozen(kw_only=True)
class StdioStatistics:
    """What one stdio connection holds and has done (:meth:`StdioConnection.statistics`)."""

    #: Requests handed to the server and not answered yet (at most :data:`MAX_IN_FLIGHT`).
    in_flight: int
    #: Requests read that wait for their turn, and their bytes.
    waiting: int
    waiting_bytes: int
    #: Bytes written for the client that it has not read yet.
    queued_out_bytes: int
    #: Requests handed to the server so far.
    admitted: int
    #: Requests answered :data:`SERVER_BUSY` (past both limits) so far.
    refused: int


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


@contextmanager
def _claimed(fd: int, divert: Callable[[], int]) -> Iterator[int]:
    """A private duplicate of ``fd`` to serve the wire from, with ``fd`` itself pointed at
    ``divert()`` meanwhile (restored after). Where descriptors cannot be moved, ``fd`` itself.

    The duplicate is never closed: a worker thread may still block on it after the server
    stopped (as the SDK's transport does)."""
    try:
        import fcntl

        private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    except (ImportError, OSError):
        yield fd
        return
    try:
        target = divert()
        try:
            os.dup2(target, fd)
        finally:
            os.close(target)
    except OSError:
        yield private
        return
    try:
        yield private
    finally:
        try:
            os.dup2(private, fd)
        except OSError as exc:
            log.debug("stdio: fd %d not restored: %s", fd, exc)


@contextmanager
def stdout_kept_aside() -> Iterator[int]:
    """fd 1 and ``sys.stdout`` pointed at stderr meanwhile; yields a private duplicate of the
    real standard output for the protocol alone (fd 1 itself where descriptors cannot move).

    For a server started without the ``tooldeck`` command line, which does this before any
    plugin is imported (:func:`tooldeck.cli.protocol_stdout`): here it covers what plugins print
    from the deck's loading on (register hooks, tools), not their imports."""
    import sys

    saved = sys.stdout
    if saved is not None:
        saved.flush()
    with _claimed(1, lambda: os.dup(2)) as private:
        if private != 1:
            sys.stdout = sys.stderr
        try:
            yield private
        finally:
            sys.stdout = saved


class StdioConnection:
    """One client over a pair of file descriptors (see the module's docstring).

    :param read_fd: / :param write_fd: the connection; 0 and 1 are claimed while serving.
    :param replay: lines already read (by :class:`~tooldeck_mcp.server.StdioPreface`), served
        first; ``rest`` the bytes read after them (a partial line).
    :param answered_ids: requests in ``replay`` already answered: the SDK's answers are dropped.
    """

    def __init__(
        self,
        *,
        read_fd: int = 0,
        write_fd: int = 1,
        replay: Sequence[bytes] = (),
        rest: bytes = b"",
        answered_ids: Sequence[Any] = (),
    ) -> None:
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._replay = list(replay)
        self._rest = rest
        self._answered = list(answered_ids)
        #: The open batches waiting for an answer to each request id, oldest first.
        self._batches: dict[Any, list[_Batch]] = {}
        #: The protocol version negotiated by the last ``initialize`` (None before one).
        self.version: str | None = None
        self._to_sdk: Any = None
        self._out: Any = None
        #: Requests handed to the server and not yet answered, by id (an id sent twice counts
        #: twice), and how many in all.
        self._in_flight: dict[Any, int] = {}
        self._in_flight_count = 0
        self._waiting: deque[_Waiting] = deque()
        self._waiting_bytes = 0
        #: One task at a time hands requests to the server, so that they keep their order.
        self._submitting = trio.Lock()
        #: Woken when a request was answered or one more waits.
        self._turns = trio.lowlevel.ParkingLot()
        #: Encoded lines for the client, not written yet, and their bytes.
        self._out_lines: deque[bytes] = deque()
        self._out_bytes = 0
        self._out_done = False
        #: Woken when there is a line to write / when written lines left the queue.
        self._out_ready = trio.lowlevel.ParkingLot()
        self._drained = trio.lowlevel.ParkingLot()
        self._admitted = 0
        self._busy_refusals = 0

    def statistics(self) -> StdioStatistics:
        """What the connection holds now (see :class:`StdioStatistics`)."""
        return StdioStatistics(
            in_flight=self._in_flight_count,
            waiting=len(self._waiting),
            waiting_bytes=self._waiting_bytes,
            queued_out_bytes=self._out_bytes,
            admitted=self._admitted,
            refused=self._busy_refusals,
        )

    async def serve(self, run: Callable[[Any, Any], Awaitable[None]]) -> None:
        """Serve the connection: ``run(read_stream, write_stream)`` is the SDK's server loop.
        Returns when it does (the client closed its end)."""
        from mcp.shared._context_streams import create_context_streams

        with ExitStack() as claims:
            if self._read_fd == 0:
                self._read_fd = claims.enter_context(
                    _claimed(0, lambda: os.open(os.devnull, os.O_RDONLY))
                )
            if self._write_fd == 1:
                self._write_fd = claims.enter_context(_claimed(1, lambda: os.dup(2)))
            self._to_sdk, sdk_reads = create_context_streams[Any](0)
            self._out, from_sdk = create_context_streams[Any](0)
            async with trio.open_nursery() as writing:
                writing.start_soon(self._flusher)
                writing.start_soon(self._writer, from_sdk)
                async with trio.open_nursery() as reading:
                    reading.start_soon(self._reader)
                    reading.start_soon(self._feeder)
                    await run(sdk_reads, self._out)
                    reading.cancel_scope.cancel()  # the SDK stopped: so does reading
                self._out.close()  # the writer queues what the server sent, then ends

    # ------------------------------------------------------------------ reading

    async def _reader(self) -> None:
        import anyio

        try:
            async with self._to_sdk:
                for line in self._replay:
                    too_long = len(line) > MAX_LINE_BYTES
                    await self._take(_Oversized(line[:_HEAD_BYTES]) if too_long else line)
                self._replay.clear()
                async for item in self._lines(self._rest):
                    await self._take(item)
                await self._close_waiting()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the SDK stopped reading

    async def _lines(self, start: bytes) -> AsyncIterator[bytes | _Oversized]:
        buffer = bytearray(start)
        scanned = 0  # no newline in buffer[:scanned]
        skipping: bytes | None = None  # the head of an oversized line being skipped
        while True:
            while True:
                newline = buffer.find(b"\n", scanned)
                if newline < 0:
                    if skipping is not None:
                        buffer.clear()
                    elif len(buffer) > MAX_LINE_BYTES:
                        skipping = bytes(buffer[:_HEAD_BYTES])
                        buffer.clear()
                    scanned = len(buffer)
                    break
                line = bytes(buffer[:newline])
                del buffer[: newline + 1]
                scanned = 0
                if skipping is not None:
                    yield _Oversized(skipping)
                    skipping = None
                elif len(line) > MAX_LINE_BYTES:
                    yield _Oversized(line[:_HEAD_BYTES])
                elif line.strip():
                    yield line
            # Backpressure: while the client leaves what was written for it unread, nothing
            # more is read from it (its own writes block once the pipe is full).
            while self._out_bytes > MAX_QUEUED_OUT_BYTES:
                await self._drained.park()
            chunk = await trio.to_thread.run_sync(
                os.read, self._read_fd, 1 << 20, abandon_on_cancel=True
            )
            if not chunk:
                break
            buffer += chunk
        if skipping is not None:
            yield _Oversized(skipping)
        elif buffer.strip():
            yield bytes(buffer)

    async def _take(self, line: bytes | _Oversized, batch: _Batch | None = None) -> None:
        """Serve one message (``batch``: one element of that batch)."""
        import mcp_types
        from mcp.shared.message import ServerMessageMetadata, SessionMessage

        if isinstance(line, _Oversized):
            found = _id_in_text(line.head.decode("utf-8", "replace"))
            log.warning("stdio: skipped a message of more than %d bytes (id %r)",
                        MAX_LINE_BYTES, found)
            await self._answer(
                mcp_types.INVALID_REQUEST,
                f"the message is larger than {MAX_LINE_BYTES} bytes; it was not read", found,
            )
            return
        if batch is None:
            # Counted in the raw bytes, before anything parses them: parsed, a line of tiny
            # values takes tens of times its size in memory.
            if len(line) > _INLINE_COUNT_BYTES:
                values = await trio.to_thread.run_sync(json_values, line)
            else:
                values = json_values(line)
            if values > MAX_MESSAGE_VALUES:
                found = _id_in_text(line[:_HEAD_BYTES].decode("utf-8", "replace"))
                log.warning("stdio: skipped a message of more than %d JSON values (id %r)",
                            MAX_MESSAGE_VALUES, found)
                await self._answer(
                    mcp_types.INVALID_REQUEST,
                    f"the message holds more than {MAX_MESSAGE_VALUES} JSON values; it was "
                    "not read", found,
                )
                return
        text = line.decode("utf-8", "replace")  # as the SDK's reader decodes
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
        except Exception as exc:
            await self._refused(text, exc, batch)
            return
        if isinstance(message, mcp_types.JSONRPCNotification) and _may_have_id(text):
            # pydantic ignored an "id" that is not a string or an integer: not a notification
            # but a request nobody can answer by its id.
            try:
                raw = json.loads(text)
            except (ValueError, RecursionError):
                raw = None
            if isinstance(raw, dict) and "id" in raw:
                log.warning("stdio: answered a request whose id is %s", type(raw["id"]).__name__)
                await self._answer(
                    mcp_types.INVALID_REQUEST,
                    "the id of a request must be a string or an integer", None, batch,
                )
                return
        if isinstance(message, mcp_types.JSONRPCRequest):
            if message.method == "initialize":
                if batch is not None:
                    await self._answer(
                        mcp_types.INVALID_REQUEST, "initialize must not be part of a batch",
                        message.id, batch,
                    )
                    return
                self.version = negotiate((message.params or {}).get("protocolVersion"))
            if not self._admits(len(line)):
                self._busy_refusals += 1
                if self._busy_refusals == 1 or self._busy_refusals % 1000 == 0:
                    log.warning("stdio: %d request(s) refused: %d in flight, %d waiting",
                                self._busy_refusals, self._in_flight_count, len(self._waiting))
                await self._answer(
                    SERVER_BUSY,
                    f"the server is busy with {self._in_flight_count} requests of this "
                    f"connection and {len(self._waiting)} more wait; this request did not run: "
                    "send it again once an answer came", message.id, batch,
                )
                return
            if batch is not None:
                batch.waiting.append(message.id)
                self._batches.setdefault(message.id, []).append(batch)
            # Told when the request settles without an answer (cancelled): its turn ends.
            metadata = ServerMessageMetadata(
                on_request_unanswered=partial(self._unanswered, batch, message.id)
            )
            await self._submit(
                _Waiting(SessionMessage(message, metadata=metadata), message.id, len(line), batch)
            )
            return
        if (
            isinstance(message, mcp_types.JSONRPCNotification)
            and message.method == "notifications/cancelled"
        ):
            await self._cancel_waiting((message.params or {}).get("requestId"))
        await self._to_sdk.send(SessionMessage(message))

    # ------------------------------------------------------------------ turns

    def _admits(self, size: int) -> bool:
        """Whether a request of ``size`` bytes is served now or may wait for its turn."""
        if self._in_flight_count < MAX_IN_FLIGHT and not self._waiting:
            return True
        return len(self._waiting) < MAX_WAITING and (
            not self._waiting or self._waiting_bytes + size <= MAX_WAITING_BYTES
        )

    async def _submit(self, request: _Waiting) -> None:
        """Hand ``request`` to the server now, or queue it behind those already waiting."""
        async with self._submitting:
            if self._in_flight_count < MAX_IN_FLIGHT and not self._waiting:
                self._hold(request.request_id)
                await self._to_sdk.send(request.message)
                return
            self._waiting.append(request)
            self._waiting_bytes += request.size
            self._turns.unpark_all()

    async def _feeder(self) -> None:
        """Hand waiting requests to the server, in order, as answers free their turns."""
        import anyio

        while True:
            while not (self._waiting and self._in_flight_count < MAX_IN_FLIGHT):
                await self._turns.park()
            async with self._submitting:
                if not (self._waiting and self._in_flight_count < MAX_IN_FLIGHT):
                    continue
                request = self._waiting.popleft()
                self._waiting_bytes -= request.size
                self._hold(request.request_id)
                try:
                    await self._to_sdk.send(request.message)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return  # the SDK stopped reading

    def _hold(self, request_id: Any) -> None:
        self._in_flight[request_id] = self._in_flight.get(request_id, 0) + 1
        self._in_flight_count += 1
        self._admitted += 1

    def _release(self, request_id: Any) -> None:
        """A request handed to the server was answered (or settled unanswered)."""
        held = self._in_flight.get(request_id, 0)
        if not held:
            return
        if held == 1:
            del self._in_flight[request_id]
        else:
            self._in_flight[request_id] = held - 1
        self._in_flight_count -= 1
        self._turns.unpark_all()

    async def _cancel_waiting(self, request_id: Any) -> None:
        """The client cancelled ``request_id``: if it still waits, it never runs (and, as
        MCP asks of a cancelled request, is not answered)."""
        if not valid_id(request_id):
            return
        for request in self._waiting:
            if request.request_id == request_id:
                self._waiting.remove(request)
                self._waiting_bytes -= request.size
                if request.batch is not None:
                    await self._settle(request.batch, request_id)
                return

    async def _close_waiting(self) -> None:
        """The client closed its end: what still waits is answered as the server answers
        its requests in flight then (Connection closed), not run."""
        import mcp_types

        async with self._submitting:
            while self._waiting:
                request = self._waiting.popleft()
                self._waiting_bytes -= request.size
                if request.batch is not None:
                    batch = request.batch
                    if request.request_id in batch.waiting:
                        batch.waiting.remove(request.request_id)
                        self._unwait(request.request_id, batch)
                await self._answer(
                    mcp_types.CONNECTION_CLOSED, "Connection closed", request.request_id,
                    request.batch,
                )
                if request.batch is not None:
                    await self._out.send(request.batch)

    async def _refused(self, text: str, error: Exception, batch: _Batch | None) -> None:
        """A line the SDK's models refuse: answered here (see the module's docstring)."""
        import mcp_types
        from mcp.shared.message import SessionMessage

        parsed, found = request_id(error)
        if not parsed:
            log.warning("stdio: answered a message that was not readable JSON (id %r)", found)
            await self._answer(
                mcp_types.PARSE_ERROR, "the message was not readable JSON", found, batch
            )
            return
        whole = _whole_message(text, error)
        if isinstance(whole, list):
            await self._batch(whole, batch)
            return
        if (
            isinstance(whole, Mapping) and "method" not in whole
            and ("result" in whole or "error" in whole)
        ):
            # A malformed answer to one of our requests (sampling, elicitation): never answered
            # (JSON-RPC does not answer responses), but the request it answers fails now
            # rather than waiting for an answer that already came.
            log.warning("stdio: the client's response to request %r was malformed", found)
            if found is not None:
                failed = mcp_types.JSONRPCError(
                    jsonrpc="2.0", id=found,
                    error=mcp_types.ErrorData(
                        code=mcp_types.INVALID_REQUEST,
                        message="the client's response was not a valid JSON-RPC response",
                    ),
                )
                await self._to_sdk.send(SessionMessage(failed))
            return
        log.warning("stdio: answered a message that was not a valid JSON-RPC request (id %r)",
                    found)
        await self._answer(
            mcp_types.INVALID_REQUEST, "the message was not a valid JSON-RPC request", found,
            batch,
        )

    async def _batch(self, items: list[Any], outer: _Batch | None) -> None:
        import mcp_types

        if outer is not None:
            await self._answer(
                mcp_types.INVALID_REQUEST, "a batch must not contain a batch", None, outer
            )
            return
        if self.version not in BATCH_VERSIONS:
            when = f"by protocol version {self.version}" if self.version else "before initialize"
            log.warning("stdio: answered a JSON-RPC batch, not supported %s", when)
            await self._answer(
                mcp_types.INVALID_REQUEST,
                f"JSON-RPC batches are not supported {when}; send one message per line", None,
            )
            return
        if not items:
            await self._answer(mcp_types.INVALID_REQUEST, "the batch is empty", None)
            return
        if len(items) > MAX_BATCH:
            log.warning("stdio: answered a batch of %d messages (at most %d)", len(items),
                        MAX_BATCH)
            await self._answer(
                mcp_types.INVALID_REQUEST,
                f"the batch holds {len(items)} messages, more than {MAX_BATCH}; none was served",
                None,
            )
            return
        batch = _Batch()
        for item in items:
            if not isinstance(item, dict):
                await self._answer(
                    mcp_types.INVALID_REQUEST, "the message was not a valid JSON-RPC request",
                    None, batch,
                )
                continue
            await self._take(json.dumps(item).encode(), batch)
        batch.sealed = True
        await self._out.send(batch)  # the writer writes it once nothing in it waits

    async def _unanswered(self, batch: _Batch | None, answered: Any) -> None:
        """A request settled without an answer (the client cancelled it)."""
        self._release(answered)
        if batch is not None:
            await self._settle(batch, answered)

    async def _settle(self, batch: _Batch, answered: Any) -> None:
        """A request of ``batch`` will not be answered: the batch may be complete."""
        if answered in batch.waiting:
            batch.waiting.remove(answered)
            self._unwait(answered, batch)
        await self._out.send(batch)

    def _unwait(self, answered: Any, batch: _Batch) -> None:
        waiting = self._batches.get(answered, [])
        if batch in waiting:
            waiting.remove(batch)
        if not waiting:
            self._batches.pop(answered, None)

    async def _answer(
        self, code: int, message: str, answered: Any, batch: _Batch | None = None
    ) -> None:
        import anyio
        import mcp_types

        error = mcp_types.JSONRPCError(
            jsonrpc="2.0", id=answered, error=mcp_types.ErrorData(code=code, message=message)
        )
        if batch is not None:
            batch.answers.append(_dump(error))
            return
        try:
            # Marked as the transport's own: it must not end the turn of a request of the
            # same id that the server is serving.
            await self._out.send(_Line(_dump(error)))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    # ------------------------------------------------------------------ writing

    async def _writer(self, from_sdk: Any) -> None:
        """Take what the server sends and queue it for the client; while more than
        :data:`MAX_QUEUED_OUT_BYTES` wait to be written, take nothing more (the server's
        tasks wait to send, each holding its one answer)."""
        import mcp_types

        async with from_sdk:
            async for item in from_sdk:
                self._route(item, mcp_types)
                while self._out_bytes > MAX_QUEUED_OUT_BYTES:
                    await self._drained.park()
        self._out_done = True
        self._out_ready.unpark_all()

    def _route(self, item: Any, mcp_types: Any) -> None:
        if isinstance(item, _Line):
            self._queue_line(item.text)
            return
        if isinstance(item, _Batch):
            self._flush(item)
            return
        message = item.message
        answer_id = getattr(message, "id", None)
        is_answer = isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError)
        if is_answer and answer_id is not None:
            self._release(answer_id)
            if isinstance(message, mcp_types.JSONRPCResponse) and answer_id in self._answered:
                self._answered.remove(answer_id)  # the preface answered it already
                return
            waiting = self._batches.get(answer_id)
            if waiting:
                batch = waiting[0]
                batch.waiting.remove(answer_id)
                self._unwait(answer_id, batch)
                batch.answers.append(_dump(message))
                self._flush(batch)
                return
        self._queue_line(_dump(message))

    def _flush(self, batch: _Batch) -> None:
        if not batch.done:
            return
        batch.written = True
        if batch.answers:  # a batch of notifications is answered with nothing at all
            self._queue_line("[" + ",".join(batch.answers) + "]")

    def _queue_line(self, text: str) -> None:
        data = (text + "\n").encode("utf-8", "replace")
        self._out_lines.append(data)
        self._out_bytes += len(data)
        self._out_ready.unpark_all()

    async def _flusher(self) -> None:
        """Write the queued lines to the client, as many as are queued at a time."""
        while True:
            while not self._out_lines:
                if self._out_done:
                    return
                await self._out_ready.park()
            data = b"".join(self._out_lines)
            self._out_lines.clear()
            try:
                await trio.to_thread.run_sync(
                    _write_all, self._write_fd, data, abandon_on_cancel=True
                )
            finally:
                self._out_bytes -= len(data)
                self._drained.unpark_all()


def _may_have_id(text: str) -> bool:
    # A key may be written with escapes ("\u0069d"): then the text is parsed to be sure.
    return '"id"' in text or "\\u" in text


def _dump(message: Any) -> str:
    """A message as the SDK's stdio transport writes it; a message that does not serialize
    becomes an Internal error for its request (it must not end the connection)."""
    try:
        return str(message.model_dump_json(by_alias=True, exclude_unset=True))
    except Exception as exc:
        log.warning("stdio: a message could not be written: %s: %s", type(exc).__name__, exc)
        return json.dumps({
            "jsonrpc": "2.0", "id": getattr(message, "id", None),
            "error": {"code": -32603, "message": "the answer could not be serialized"},
        })
