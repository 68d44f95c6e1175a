"""The sandbox wire format: length-prefixed JSON frames of cattrs-unstructured attrs values.

This module is also loaded by file path inside sandbox workers, so it imports nothing but the
standard library, cattrs and the contract (no trio, nothing of this package).
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO, Literal

import attrs
import cattrs

from tooldeck_hookspecs import ToolCall, ToolResult
from tooldeck_hookspecs._progress import clean_progress
from tooldeck_hookspecs.content import Content

__all__ = [
    "HEADER",
    "WireContext",
    "Limits",
    "SandboxRequest",
    "converter",
    "encode_frame",
    "read_frame",
    "dumps",
    "PROGRESS_PREFIX",
    "progress_payload",
    "parse_progress",
]

#: A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON.
HEADER = struct.Struct(">I")

converter = cattrs.Converter()

#: A progress frame's payload starts with these bytes (a tool's ``ToolContext.emit`` inside the
#: sandbox); any other frame is the call's one result, and ends the exchange.
PROGRESS_PREFIX = b'{"$progress":'
#: Progress frames are small: a longer one is not progress (and not delivered).
PROGRESS_MAX_BYTES = 8192


@attrs.frozen(kw_only=True)
class WireContext:
    """The serializable part of a :class:`~tooldeck_hookspecs.ToolContext`."""

    session_id: str
    workdir: str
    call_id: str = ""
    tool_name: str = ""
    allowed_paths: tuple[str, ...] = ()
    #: The session's attributes and the tool plugin's settings; values that are not JSON arrive
    #: as their ``str()``.
    attributes: dict[str, Any] = attrs.field(factory=dict)
    settings: dict[str, Any] = attrs.field(factory=dict)
    #: The protected path rules (:mod:`tooldeck_hookspecs.protected`); the defaults when empty.
    protected_paths: tuple[str, ...] = ()
    #: The host's ``time.monotonic()`` instant at which the executor stops waiting for the call
    #: (None: no deadline). CLOCK_MONOTONIC is the same inside the sandbox (no time namespace,
    #: whose offsets would be zero anyway), so this stays exact however long the worker takes
    #: to start and read the request.
    deadline: float | None = None
    #: The same as seconds left when the request was made: a bound the worker applies too
    #: (``ToolContext.deadline`` is the earlier of the two), should the clocks ever differ.
    seconds_left: float | None = None


@attrs.frozen(kw_only=True)
class Limits:
    """Resource limits the worker applies to itself before importing the tool."""

    memory_mb: int = 256
    cpu_s: int = 31
    fsize_bytes: int = 64 * 1024 * 1024
    nofile: int = 256
    max_output_bytes: int = 1_000_000
    #: Apply ``RLIMIT_AS = memory_mb`` (the fallback when no memory cgroup bounds the call).
    memory_rlimit: bool = True
    #: Install the seccomp filter (see ``_seccomp``); ``network`` selects its socket rules.
    seccomp: bool = True
    network: bool = False


@attrs.frozen(kw_only=True)
class SandboxRequest:
    """One call for a single-use worker."""

    call: ToolCall
    context: WireContext
    entrypoint: str
    call_style: Literal["mapping", "kwargs"] = "mapping"
    context_param: str | None = None
    limits: Limits = attrs.field(factory=Limits)


def dumps(value: Any) -> bytes:
    """Unstructure ``value`` and encode it as compact JSON (unknown leaf types via ``str``)."""
    return json.dumps(
        converter.unstructure(value), separators=(",", ":"), ensure_ascii=False, default=_leaf
    ).encode("utf-8")


def _leaf(value: Any) -> Any:
    # Images, audio, resources a sandboxed tool returned travel in their tagged JSON form.
    if isinstance(value, Content):
        return value.to_json()
    return str(value)


def encode_frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its length."""
    return HEADER.pack(len(payload)) + payload


def read_frame(stream: BinaryIO, max_bytes: int) -> bytes | None:
    """Read one frame from a blocking stream; None on end of file or an oversized frame."""
    header = _read_exactly(stream, HEADER.size)
    if header is None:
        return None
    (length,) = HEADER.unpack(header)
    if length > max_bytes:
        return None
    return _read_exactly(stream, length)


def _read_exactly(stream: BinaryIO, n: int) -> bytes | None:
    chunks: list[bytes] = []
    remaining = n
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def structure_result(data: bytes) -> ToolResult:
    """Decode a response frame into a :class:`ToolResult`."""
    return converter.structure(json.loads(data), ToolResult)


def structure_request(data: bytes) -> SandboxRequest:
    """Decode a request frame."""
    return converter.structure(json.loads(data), SandboxRequest)


def progress_payload(event: Any) -> bytes:
    """The payload of a progress frame for ``event`` (see ``clean_progress``: its message is
    shortened, so the frame always fits :data:`PROGRESS_MAX_BYTES` and stays whole JSON)."""
    payload = b'{"$progress":' + json.dumps(
        clean_progress(event), ensure_ascii=False, default=str
    ).encode("utf-8", "surrogatepass") + b"}"
    if len(payload) > PROGRESS_MAX_BYTES:  # never cut JSON: a cut frame would read as the result
        payload = b'{"$progress":' + json.dumps(clean_progress({})).encode() + b"}"
    return payload


def parse_progress(payload: bytes) -> dict[str, Any] | None:
    """The event of a progress frame; None when ``payload`` is not a well-formed one."""
    if len(payload) > PROGRESS_MAX_BYTES or not payload.startswith(PROGRESS_PREFIX):
        return None
    try:
        event = json.loads(payload)["$progress"]
    except (ValueError, KeyError, TypeError):
        return None
    return event if isinstance(event, dict) else None
