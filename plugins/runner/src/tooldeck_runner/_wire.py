"""The sandbox wire format: length-prefixed JSON frames of cattrs-unstructured attrs values.

This module is also loaded by file path inside sandbox workers, so it imports nothing but the
standard library, cattrs and the contract (no trio, nothing of this package).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import json
import math
import struct
import uuid
from collections.abc import Mapping
from typing import Any, BinaryIO, Literal

import attrs
import cattrs

from tooldeck_hookspecs import ToolCall, ToolResult, printable_int
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
    #: RLIMIT_CPU: CPU seconds over all of the process's threads (``_sandbox.cpu_seconds``).
    cpu_s: int = 31
    fsize_bytes: int = 64 * 1024 * 1024
    nofile: int = 256
    max_output_bytes: int = 1_000_000
    #: Apply ``RLIMIT_AS = memory_mb`` (the fallback when no memory cgroup bounds the call).
    memory_rlimit: bool = True
    #: Install the seccomp filter (see ``_seccomp``); ``network`` selects its socket rules.
    seccomp: bool = True
    network: bool = False
    #: The tool's ``execution.timeout_s`` after configuration, for ``ToolContext.limits``
    #: (None when it is not finite: JSON has no infinity).
    timeout_s: float | None = None


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
    """Unstructure ``value`` and encode it as compact JSON (unknown leaf types via ``str``).

    A :class:`ToolResult`'s data and error details are a tool's: they are made plain JSON first
    (see :func:`plain`), the way the in-process path does, so that bytes, sets, tuple keys, an
    integer too long to print, a lone surrogate or a self-referencing list arrive as the same
    value they would have outside the sandbox instead of failing the call.
    """
    if isinstance(value, ToolResult):
        value = _plain_result(value)
    unstructured = converter.unstructure(value)
    text = json.dumps(unstructured, separators=(",", ":"), ensure_ascii=False, default=_leaf)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (a str may hold one): escaped, it travels as valid JSON and the
        # host reads back the same str.
        return json.dumps(
            unstructured, separators=(",", ":"), ensure_ascii=True, default=_leaf
        ).encode("ascii")


def _plain_result(result: ToolResult) -> ToolResult:
    data = plain(result.data)
    metadata = plain(result.metadata) if result.metadata else result.metadata
    error = result.error
    if error is not None and error.details:
        details = plain(error.details)
        if details is not error.details:
            error = attrs.evolve(error, details=details)
    if data is result.data and error is result.error and metadata is result.metadata:
        return result
    return attrs.evolve(result, data=data, error=error, metadata=metadata)


#: Beyond this depth a value is cut (with a marker), as the in-process path does.
_MAX_DEPTH = 200


def _text(value: object) -> str:
    try:
        text = str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
    return text if isinstance(text, str) else f"<unprintable {type(value).__name__}>"


def _plain_str(value: str) -> str:
    return value if type(value) is str else str.__str__(value)


def _plain_key(key: Any) -> str:
    if isinstance(key, str):
        return _plain_str(key)
    if isinstance(key, bool) or key is None:
        return json.dumps(key)
    if isinstance(key, int):
        return str(printable_int(int(key)))
    if isinstance(key, float):
        return json.dumps(key) if math.isfinite(key) else "null"
    return _text(key)


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as plain JSON data, as ``tooldeck``'s ``json_safe`` makes an in-process tool's
    result: bytes as ``{"$bytes_base64": ...}``, sets as sorted lists, non-string keys as text,
    NaN and infinities as None, dataclasses and attrs classes as dicts, dates in ISO form,
    enums as their value, other objects as their ``str()``. Never raises. Plain values (the
    common case) come back as the same object."""
    if depth > _MAX_DEPTH:
        return f"<cut: nested deeper than {_MAX_DEPTH} levels>"
    kind = type(value)
    if kind is str:
        return value
    if value is None or kind is bool:
        return value
    if kind is int:
        return printable_int(value)
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is list:
        # Copy on first change; plain leaves are checked inline (no call per item): this runs
        # on every sandboxed result.
        items: list[Any] | None = None
        for index, item in enumerate(value):
            if not _plain_leaf(item):
                new = plain(item, depth + 1)
                if new is not item and items is None:
                    items = value[:index]
                item = new
            if items is not None:
                items.append(item)
        return value if items is None else items
    if kind is dict:
        if not all(type(k) is str for k in value):
            return _plain_dict(value.items(), depth)
        out: dict[str, Any] | None = None
        for key, item in value.items():
            if not _plain_leaf(item):
                new = plain(item, depth + 1)
                if new is not item:
                    if out is None:
                        out = dict(value)
                    out[key] = new
        return value if out is None else out
    return _plain_other(value, depth)


#: 2**63: orjson and most JSON readers take integers within 64 bits; beyond, printable_int checks.
_SMALL_INT = 1 << 63


def _plain_leaf(value: Any) -> bool:
    """Whether ``value`` is a JSON leaf that needs no conversion (checked without a call of
    :func:`plain`)."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return -_SMALL_INT <= value < _SMALL_INT
    # A finite float: x - x is 0.0, but NaN for NaN and the infinities.
    return kind is float and value - value == 0.0


def _plain_dict(items: Any, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in items:
        key = _plain_key(k)
        if key in out:
            # Two keys that read the same as text (1 and "1"): neither value is dropped.
            base, number = f"{key} ({type(k).__name__}", 2
            key = base + ")"
            while key in out:
                key, number = f"{base} {number})", number + 1
        out[key] = plain(v, depth + 1)
    return out


def _plain_other(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return _plain_str(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, enum.Enum):
        return plain(value.value, depth + 1)
    if isinstance(value, int):
        return printable_int(int(value))
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes_base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Content):
        try:
            return value.to_json()
        except Exception:
            return _text(value)
    if isinstance(value, Mapping):
        try:
            items = list(value.items())
        except Exception:
            return _text(value)
        return _plain_dict(items, depth)
    if isinstance(value, set | frozenset):
        members = [plain(v, depth + 1) for v in value]
        try:
            return sorted(members)
        except TypeError:
            return sorted(members, key=lambda v: json.dumps(v, sort_keys=True, default=str))
    if isinstance(value, list | tuple):
        return [plain(v, depth + 1) for v in value]
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return _text(value)
    try:
        model_dump = getattr(value, "model_dump", None)
        if callable(model_dump) and not isinstance(value, type):
            return plain(model_dump(mode="json"), depth + 1)
        if attrs.has(type(value)):
            return plain(attrs.asdict(value, recurse=False), depth + 1)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = dataclasses.fields(value)
            return plain({f.name: getattr(value, f.name) for f in fields}, depth + 1)
    except Exception:
        pass
    return _text(value)


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
