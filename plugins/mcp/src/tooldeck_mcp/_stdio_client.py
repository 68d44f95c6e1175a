"""The bridge's stdio transport to a remote MCP server, with a bounded line reader.

The SDK's ``stdio_client`` joins the server's output as text, ``(buffer + chunk).split("\\n")``
per chunk: a line of n bytes costs O(n²) copying and all of it in memory, so a server that
writes one 60 MB answer ties the bridge up for half a minute, and one that writes without end
(no newline) grows the host's memory until it dies. This transport is the SDK's, with the
reader replaced: bytes are scanned once for newlines, and a line longer than
:data:`MAX_LINE_BYTES` is skipped as it streams (memory stays bounded). The request it
answered fails at once with a clear error when its id is found at the line's start (where
every real frame has it); otherwise the connection is closed, which fails every pending
request instead of leaving it to its timeout, and the bridge starts the server again at the
next call.

Spawning, shutting down and killing the server's process tree are the SDK's own helpers. Were
a future SDK to rename them, :func:`stdio_transport` falls back to the SDK's ``stdio_client``.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from typing import Any, TextIO

import anyio
import anyio.lowlevel
from mcp import types
from mcp.shared.message import SessionMessage

from ._stdio import _HEAD_BYTES, MAX_LINE_BYTES, MAX_MESSAGE_VALUES, _id_in_text, json_values

log = logging.getLogger("tooldeck.mcp")

__all__ = ["MAX_LINE_BYTES", "stdio_transport"]

#: Bytes read from the server's stdout at a time.
_CHUNK = 1 << 16
#: Lines longer than this are parsed in a worker thread, not on the bridge's loop.
_INLINE_PARSE_BYTES = 64 * 1024
#: Lines of a server's stdout that are not JSON-RPC logged one by one; beyond, one line per
#: :data:`_NOISE_EVERY` of them (a server printing garbage must not flood the deck's log).
_NOISE_LOGGED = 10
_NOISE_EVERY = 1000


class _Noise:
    """Counts what a server wrote to stdout that is not a JSON-RPC message, and rate-limits
    the warnings about it."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.count = 0

    def warn(self, what: str, *args: Any) -> None:
        self.count += 1
        if self.count <= _NOISE_LOGGED:
            log.warning(what, self.server, *args)
        elif self.count == _NOISE_LOGGED + 1 or self.count % _NOISE_EVERY == 0:
            log.warning("MCP server %r: %d lines of its stdout were not JSON-RPC messages so "
                        "far (not logged one by one)", self.server, self.count)


def stdio_transport(params: Any, errlog: TextIO = sys.stderr, *, server: str = "") -> Any:
    """An async context manager yielding ``(read_stream, write_stream)`` to the MCP server
    ``params`` (``mcp.StdioServerParameters``) describes, as ``mcp.stdio_client`` does.

    ``server`` names the server in the errors and logs.
    """
    try:
        from mcp.client import stdio as sdk
        from mcp.client.stdio import (  # noqa: F401  (checked here: the fallback's trigger)
            _aclose_all,
            _create_platform_compatible_process,
            _drain_stdout,
            _get_executable_command,
            _stop_server_process,
            get_default_environment,
        )
    except ImportError:  # pragma: no cover - a future SDK: its own reader, unbounded
        from mcp import stdio_client

        log.warning("tooldeck-mcp: this MCP SDK's stdio helpers moved; the bridge reads "
                    "server %r with the SDK's unbounded line reader", server)
        return stdio_client(params, errlog=errlog)
    return _bounded_stdio_client(sdk, params, errlog, server)


@contextlib.asynccontextmanager
async def _bounded_stdio_client(
    sdk: Any, params: Any, errlog: TextIO, server: str
) -> AsyncIterator[tuple[Any, Any]]:
    # The SDK's stdio_client (mcp 2.3), line for line, but for stdout_reader.
    command = await sdk._get_executable_command(params.command)
    process = await sdk._create_platform_compatible_process(
        command=command,
        args=params.args,
        env=sdk.get_default_environment() | (params.env or {}),
        errlog=errlog,
        cwd=params.cwd,
    )
    # No awaits until the task group is entered: a cancellation in the gap would leak the
    # live process.
    read_stream_writer, read_stream = anyio.create_memory_object_stream[
        SessionMessage | Exception
    ](0)
    write_stream, write_stream_reader = anyio.create_memory_object_stream[SessionMessage](0)
    shutting_down = False
    writer_done = anyio.Event()
    noise = _Noise(server)

    async def stdout_reader() -> None:
        assert process.stdout is not None
        try:
            try:
                async with read_stream_writer:
                    async for item in _lines(process.stdout, server):
                        if isinstance(item, bytes) and len(item) > _INLINE_PARSE_BYTES:
                            # Parsing a long line takes long: off the loop every server and
                            # every call of the process shares (the calls keep their deadline).
                            message = await anyio.to_thread.run_sync(
                                _message, item, params, server, noise, abandon_on_cancel=True
                            )
                        else:
                            message = _message(item, params, server, noise)
                        try:
                            await read_stream_writer.send(message)
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            return  # the session is gone; only the drain below remains
                        if isinstance(item, _Unanswerable):
                            return  # the read side ends: every pending request fails now
            finally:
                # After the read side is closed (the SDK drains first: the session would not
                # see the end before the server's output does).
                await sdk._drain_stdout(process)
        except anyio.ClosedResourceError:
            pass  # our own shutdown closed the stdout stream under the read
        except (anyio.BrokenResourceError, ConnectionError):
            if not shutting_down:
                log.exception("Reading from MCP server %r's stdout failed mid-session", server)

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_stream_reader:
                async for session_message in write_stream_reader:
                    json = session_message.message.model_dump_json(
                        by_alias=True, exclude_unset=True
                    )
                    data = (json + "\n").encode(
                        encoding=params.encoding, errors=params.encoding_error_handler
                    )
                    await process.stdin.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server may still be alive: end the read side so that the session sees the
            # connection end instead of a request hanging forever.
            await read_stream_writer.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(sdk._WRITER_FLUSH_TIMEOUT) as flush_scope:
            await writer_done.wait()
        if flush_scope.cancelled_caught:
            await anyio.lowlevel.cancel_shielded_checkpoint()
        await sdk._stop_server_process(process)
        await sdk._aclose_all(read_stream, write_stream, read_stream_writer, write_stream_reader)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            # Every wait in shutdown is bounded; it must finish under the caller's
            # cancellation too, or the server process would leak.
            with anyio.CancelScope(shield=True):
                await shutdown()
            tg.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()


class _Oversized:
    """A line longer than :data:`MAX_LINE_BYTES` whose id was found: its request fails."""

    def __init__(self, request_id: str | int) -> None:
        self.request_id = request_id


class _Unanswerable:
    """A line longer than :data:`MAX_LINE_BYTES` with no id at its start: the connection
    closes after it (the request it answered cannot be told apart)."""


async def _lines(stdout: Any, server: str) -> AsyncIterator[bytes | _Oversized | _Unanswerable]:
    """Whole lines from ``stdout``; an oversized one as soon as it passes the limit (its id
    read from its start), then skipped to its newline without keeping it."""
    buffer = bytearray()
    scanned = 0  # no newline in buffer[:scanned]
    skipped = -1  # bytes of the oversized line skipped so far; -1: not skipping
    while True:
        try:
            chunk = await stdout.receive(_CHUNK)
        except anyio.EndOfStream:
            break
        if skipped >= 0:
            newline = chunk.find(b"\n")
            if newline < 0:
                skipped += len(chunk)
                continue
            log.warning("MCP server %r wrote a line of %d bytes (limit %d); it was not read",
                        server, skipped + newline, MAX_LINE_BYTES)
            skipped = -1
            chunk = chunk[newline + 1:]
        buffer += chunk
        while True:
            newline = buffer.find(b"\n", scanned)
            if newline < 0:
                scanned = len(buffer)
                if len(buffer) > MAX_LINE_BYTES:
                    yield _too_long(bytes(buffer[:_HEAD_BYTES]))
                    skipped = len(buffer)  # the rest of the line is read and dropped
                    buffer.clear()
                    scanned = 0
                break
            line = bytes(buffer[:newline])
            del buffer[: newline + 1]
            scanned = 0
            if len(line) > MAX_LINE_BYTES:  # a single chunk can hold a whole long line
                yield _too_long(line[:_HEAD_BYTES])
            elif line.strip():
                yield line
    # An unterminated last line is not a whole message: dropped, as the SDK drops it.


def _too_long(head: bytes) -> _Oversized | _Unanswerable:
    found = _id_in_text(head.decode("utf-8", "replace"))
    return _Unanswerable() if found is None else _Oversized(found)


def _message(
    item: bytes | _Oversized | _Unanswerable, params: Any, server: str,
    noise: _Noise | None = None,
) -> SessionMessage | Exception:
    if isinstance(item, _Oversized):
        text = (f"MCP server {server!r} answered with a message larger than {MAX_LINE_BYTES} "
                "bytes; it was not read")
        log.warning("%s (request id %r)", text, item.request_id)
        return SessionMessage(types.JSONRPCError(
            jsonrpc="2.0", id=item.request_id,
            error=types.ErrorData(code=types.INTERNAL_ERROR, message=text),
        ))
    if isinstance(item, _Unanswerable):
        text = (f"MCP server {server!r} wrote a message larger than {MAX_LINE_BYTES} bytes with "
                "no request id at its start; the connection is closed")
        log.error("%s", text)
        return ConnectionError(text)
    values = json_values(item)
    if values > MAX_MESSAGE_VALUES:
        # Parsed, a million empty content blocks are a million objects (and seconds of
        # validation, and of converting them): refused unread, as an over-long line is.
        text = (f"MCP server {server!r} answered with a message of more than "
                f"{MAX_MESSAGE_VALUES} JSON values (content blocks, structured items); it "
                "was not read")
        found = _id_in_text(item[:_HEAD_BYTES].decode("utf-8", "replace"))
        if found is None:
            log.warning("MCP server %r wrote a message of more than %d JSON values with no "
                        "request id at its start; it was dropped", server, MAX_MESSAGE_VALUES)
            return ValueError(text)
        log.warning("%s (request id %r)", text, found)
        return SessionMessage(types.JSONRPCError(
            jsonrpc="2.0", id=found,
            error=types.ErrorData(code=types.INTERNAL_ERROR, message=text),
        ))
    try:
        line = item.decode(params.encoding, params.encoding_error_handler)
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except (ValueError, RecursionError) as exc:
        salvaged = _salvaged(item, server, exc)
        if salvaged is not None:
            return salvaged
        text = "MCP server %r wrote a line that is not a JSON-RPC message: %s"
        if noise is not None:
            noise.warn(text, str(exc)[:300])
        else:
            log.warning(text, server, str(exc)[:300])
        return exc if isinstance(exc, ValueError) else ValueError(str(exc))


def _salvaged(line: bytes, server: str, problem: Exception) -> SessionMessage | None:
    """What can still be read from an answer the SDK refused (None when nothing).

    The SDK drops such a line, so the request it answered waited for its whole timeout (30 s
    by default), and a server with one bad tool in its list lost every tool at start-up. So:
    text that is not UTF-8 is read with replacement characters; entries of a list result
    (``tools``, ``resources``, ``prompts``) that do not validate are left out, each logged;
    anything else fails the request it answers at once, saying why.
    """
    import json

    text = line.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("result"), dict):
        result = data["result"]
        for key, model in (("tools", types.Tool), ("resources", types.Resource),
                           ("prompts", types.Prompt)):
            entries = result.get(key)
            if not isinstance(entries, list):
                continue
            kept = []
            for entry in entries:
                try:
                    model.model_validate(entry)
                except (ValueError, RecursionError) as exc:
                    name = entry.get("name") if isinstance(entry, dict) else None
                    log.warning("MCP server %r: %s entry %r left out: %s", server, key,
                                str(name)[:80], str(exc)[:200])
                    continue
                kept.append(entry)
            data = {**data, "result": {**result, key: kept}}
    if isinstance(data, dict):
        try:
            message = types.jsonrpc_message_adapter.validate_python(data, by_name=False)
        except (ValueError, RecursionError):
            pass
        else:
            if "\ufffd" in text and "\ufffd" not in line.decode("utf-8", "ignore"):
                log.warning("MCP server %r wrote text that is not UTF-8; read with "
                            "replacement characters", server)
            return SessionMessage(message)
    found = data.get("id") if isinstance(data, dict) else _id_in_text(text)
    if isinstance(found, bool) or not isinstance(found, str | int):
        return None
    reason = f"MCP server {server!r} answered with a message that is not valid MCP: " \
        f"{str(problem)[:300]}"
    log.warning("%s (request id %r)", reason, found)
    return SessionMessage(types.JSONRPCError(
        jsonrpc="2.0", id=found, error=types.ErrorData(code=types.INTERNAL_ERROR, message=reason),
    ))
