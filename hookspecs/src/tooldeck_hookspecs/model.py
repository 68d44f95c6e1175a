"""The data model of the contract: attrs values, snake_case, seconds.

cattrs converts these at the boundaries only (CLI, provider messages, sandbox wire format, caches);
inside the deck they are plain frozen objects.
"""

from __future__ import annotations

import decimal
import enum
import functools
import hashlib
import importlib
import inspect
import json
import math
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs
import orjson

from ._coerce import _MISSING, coerce_arguments
from ._coerce import _cache as _coerce_cache
from ._control import CallControl
from .errors import DEFAULT_SUGGESTIONS, ErrorCode
from .protected import DEFAULT_PROTECTED_PATHS

if TYPE_CHECKING:
    import logging

__all__ = [
    "SecurityLevel",
    "LEVEL_ORDER",
    "RateLimit",
    "MAX_RATE_WINDOW_S",
    "SecurityConfig",
    "ExecutionConfig",
    "ToolDefinition",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "Decision",
    "ArgumentProblem",
    "SessionInfo",
    "ScoredTool",
    "Exclusion",
    "Preference",
    "Event",
    "RateLimitOutcome",
    "canonical_json",
    "canonical_json_bytes",
    "canonical_json_sha256",
    "cache_key",
    "call_tool_function",
    "resolve_entrypoint",
]


class SecurityLevel(enum.StrEnum):
    """How much harm a tool can do. ``moderate`` needs a grant, ``dangerous`` a confirmation."""

    SAFE = "safe"
    MODERATE = "moderate"
    DANGEROUS = "dangerous"


#: Ordering of levels, so that "may use up to moderate" is a comparison.
LEVEL_ORDER: dict[SecurityLevel, int] = {
    SecurityLevel.SAFE: 0,
    SecurityLevel.MODERATE: 1,
    SecurityLevel.DANGEROUS: 2,
}


def _frozen(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


def _tuple_of_str(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(value)


#: The longest rate-limit window registration and configuration accept (366 days). Longer
#: windows are no use, and Redis refuses a key lifetime past 64-bit milliseconds: a window of
#: 1e300 s failed every call of its tool there.
MAX_RATE_WINDOW_S = 366 * 24 * 3600.0


@attrs.frozen(kw_only=True)
class RateLimit:
    """At most ``max_calls`` calls in any moving window of ``window_s`` seconds
    (``0 < window_s <=`` :data:`MAX_RATE_WINDOW_S`)."""

    max_calls: int
    window_s: float = 60.0


@attrs.frozen(kw_only=True)
class SecurityConfig:
    """What a tool may do, and what the authorize stage checks before it runs.

    ``allowed_paths`` are templates: ``{workdir}`` is replaced by the session's working directory.
    ``path_params``, ``url_params`` and ``command_params`` name the arguments that the path, URL and
    shell guards inspect.
    """

    level: SecurityLevel = attrs.field(default=SecurityLevel.SAFE, converter=SecurityLevel)
    require_confirm: bool = False
    sandbox: bool = False
    allowed_paths: tuple[str, ...] = attrs.field(default=("{workdir}",), converter=_tuple_of_str)
    path_params: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    url_params: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    command_params: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    #: The shell guard lets ``|`` through for this tool (other chaining stays refused).
    allow_pipes: bool = False
    #: The sandbox gives the tool network access.
    network: bool = False
    #: The sandbox mounts the workdir writable (read-only otherwise).
    writes_workdir: bool = False
    rate_limit: RateLimit | None = None


@attrs.frozen(kw_only=True)
class ExecutionConfig:
    """How a tool is run: time limit, retries, caching and sandbox resources."""

    timeout_s: float = 30.0
    retryable: bool = False
    max_retries: int = 3
    cacheable: bool = False
    cache_ttl_s: float = 300.0
    #: Session fields the result depends on, added to the cache key (e.g. ``("workdir",)``).
    cache_context: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    #: After a successful call, cached results of these tools are dropped (a write invalidates
    #: the reads that could now be stale).
    invalidates: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    #: Address-space cap of a sandboxed call, in MiB.
    memory_mb: int = 256
    #: Cap on captured output (stdout, stderr, result) in bytes.
    max_output_bytes: int = 1_000_000


@attrs.frozen(kw_only=True)
class ToolDefinition:
    """A tool as the deck knows it.

    ``execute`` is called as ``execute(arguments, context)`` (``call_style="mapping"``) or, for
    decorated functions, as ``execute(**arguments)`` with the context passed as the keyword named by
    ``context_param`` (``call_style="kwargs"``). It may be sync or async. ``entrypoint``
    (``"module:qualname"``) lets a sandbox worker import it by reference. ``plugin`` is filled in by
    the core with the name of the plugin that registered the tool.

    Once registered, a definition is the catalog's, shared by every session and handed as is to
    every hook: its ``parameters`` are then read-only (``dict`` and ``list`` subclasses whose
    in-place changes raise :class:`TypeError`). A plugin that needs another schema edits a copy
    (``copy.deepcopy(tool.parameters)``).
    """

    name: str
    description: str
    category: str
    version: str = "1.0.0"
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )
    security: SecurityConfig = attrs.field(factory=SecurityConfig)
    execution: ExecutionConfig = attrs.field(factory=ExecutionConfig)
    execute: Callable[..., Any] | None = attrs.field(default=None, eq=False, repr=False)
    entrypoint: str | None = None
    call_style: Literal["mapping", "kwargs"] = "mapping"
    context_param: str | None = None
    tags: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    plugin: str | None = None

    @property
    def is_async(self) -> bool:
        """True when ``execute`` is a coroutine function."""
        return inspect.iscoroutinefunction(self.execute)


@attrs.frozen(kw_only=True)
class ToolCall:
    """A call the model asked for. ``id`` is the provider's call id (echoed in result messages)."""

    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict)
    id: str = ""


@attrs.frozen(kw_only=True)
class ToolError:
    """Why a call failed, and what the model should do about it."""

    code: ErrorCode = attrs.field(converter=ErrorCode)
    message: str
    retryable: bool = False
    suggestion: str | None = None
    retry_after_s: float | None = None
    #: Structured extras: ``errors`` (argument problems), ``approval_id``, ``candidates``, ...
    details: Mapping[str, Any] = attrs.field(factory=dict)
    #: The plugin that produced the error, when it was not the tool itself.
    plugin: str | None = None

    @classmethod
    def of(cls, code: ErrorCode | str, message: str, **kw: Any) -> ToolError:
        """Build an error, filling in the default suggestion for ``code`` when none is given."""
        code = ErrorCode(code)
        if kw.get("suggestion") is None:
            kw["suggestion"] = DEFAULT_SUGGESTIONS.get(code)
        return cls(code=code, message=message, **kw)


@attrs.frozen(kw_only=True)
class ToolResult:
    """The answer to one call. ``metadata`` keys in use: ``duration_s``, ``cached``, ``attempts``,
    ``fallback``, ``isolation``, ``call_id``, ``tool``."""

    success: bool
    data: Any = None
    error: ToolError | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict)

    @classmethod
    def ok(cls, data: Any = None, **metadata: Any) -> ToolResult:
        """A successful result."""
        return cls(success=True, data=data, metadata=metadata)

    @classmethod
    def fail(cls, code: ErrorCode | str, message: str, **kw: Any) -> ToolResult:
        """A failed result; keyword arguments go to :meth:`ToolError.of`."""
        return cls(success=False, error=ToolError.of(code, message, **kw))

    def with_metadata(self, **metadata: Any) -> ToolResult:
        """A copy with ``metadata`` merged in."""
        if type(self) is not ToolResult:  # a subclass may have fields of its own
            return attrs.evolve(self, metadata={**self.metadata, **metadata})
        # The constructor, not attrs.evolve: this runs on every call.
        return ToolResult(
            success=self.success,
            data=self.data,
            error=self.error,
            metadata={**self.metadata, **metadata},
        )


@attrs.frozen(kw_only=True)
class Decision:
    """An authorization opinion. Combined across plugins as deny > ask > allow."""

    action: Literal["allow", "ask", "deny"]
    code: ErrorCode | None = None
    reason: str = ""
    suggestion: str | None = None
    plugin: str | None = None
    details: Mapping[str, Any] = attrs.field(factory=dict)

    @classmethod
    def allow(cls, reason: str = "") -> Decision:
        """Let the call through (as far as this plugin is concerned)."""
        return cls(action="allow", reason=reason)

    @classmethod
    def ask(cls, reason: str, **kw: Any) -> Decision:
        """The call needs the user's explicit confirmation."""
        return cls(action="ask", code=ErrorCode.CONFIRMATION_REQUIRED, reason=reason, **kw)

    @classmethod
    def deny(
        cls, reason: str, code: ErrorCode | str = ErrorCode.PERMISSION_DENIED, **kw: Any
    ) -> Decision:
        """Refuse the call with ``code`` and a reason the model can read."""
        return cls(action="deny", code=ErrorCode(code), reason=reason, **kw)


@attrs.frozen(kw_only=True)
class ArgumentProblem:
    """One bad field in a call's arguments. ``path`` is a JSON path such as ``$.items[2].name``."""

    path: str
    message: str
    expected: Any = None


@attrs.frozen(kw_only=True)
class SessionInfo:
    """What policy and filter hooks may know about a session. A snapshot; hooks never mutate it.

    ``grants`` are the categories where ``moderate`` tools may run; ``max_level`` is the highest
    security level the session may use at all; ``always_allow`` names tools the user approved for
    the whole session (the core leaves out a tool registered again with another definition since
    the user allowed it); ``recent_tools`` are tools used in earlier turns (most recent first);
    ``attributes`` is free for the application (a user name, a tenant, ...). In the snapshots
    the deck hands hooks, ``environment`` and ``attributes`` are read-only deep copies (their
    dicts and lists raise :class:`TypeError` on any in-place change): one hook cannot change
    what the hooks after it judge by, nor the session itself.
    """

    session_id: str
    workdir: str
    grants: frozenset[str] = attrs.field(factory=frozenset, converter=_frozen)
    excluded_categories: frozenset[str] = attrs.field(factory=frozenset, converter=_frozen)
    max_level: SecurityLevel = attrs.field(default=SecurityLevel.DANGEROUS, converter=SecurityLevel)
    always_allow: frozenset[str] = attrs.field(factory=frozenset, converter=_frozen)
    recent_tools: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    environment: Mapping[str, str] = attrs.field(factory=dict)
    attributes: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class ScoredTool:
    """A retrieval candidate with its score (higher is better) and, optionally, its parts.

    ``reason`` is a short phrase for people on why the retriever ranked the tool (which part of
    the request it matched, by words or by meaning, past use); the core lists it in the hand's
    ``reasons`` after "retrieved". Empty: no reason given.
    """

    name: str
    score: float
    signals: Mapping[str, float] = attrs.field(factory=dict)
    reason: str = attrs.field(default="", converter=str)


@attrs.frozen(kw_only=True)
class Exclusion:
    """A filter hook's verdict: take ``name`` out of the hand, because ``reason``."""

    name: str
    reason: str
    plugin: str | None = None


@attrs.frozen(kw_only=True)
class Preference:
    """A filter hook's nudge: add ``boost`` to ``name``'s score, because ``reason``."""

    name: str
    boost: float
    reason: str
    plugin: str | None = None


@attrs.frozen(kw_only=True)
class Event:
    """Something the deck did, for observers (logging, tracing, metrics)."""

    kind: str
    session_id: str | None = None
    call_id: str | None = None
    tool: str | None = None
    data: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class RateLimitOutcome:
    """A rate limiter's answer: ``allowed``, or the seconds to wait."""

    allowed: bool
    retry_after_s: float = 0.0
    limit: str = ""


@attrs.define(kw_only=True)
class ToolContext:
    """What a running tool knows about its call.

    ``emit`` streams progress to the caller (a no-op when nobody listens). ``logger`` is a standard
    logger named after the tool. Cancellation arrives as trio cancellation for in-process
    ``async`` tools and as a killed process for sandboxed ones; a sync tool's thread cannot be
    stopped, so the executor answers without it and the thread runs on. ``attributes`` are the
    session's application attributes (e.g. ``url_allow``); ``settings`` is the table of the
    tool's own plugin in the configuration (``[tool.tooldeck.<plugin>]``). ``protected_paths``
    are the rules of paths no tool writes (see :mod:`tooldeck_hookspecs.protected`).

    The call's time and fate, from the executor (``control``, one per attempt; None outside an
    executor, e.g. a context a test builds, and then these are no-ops):

    - :attr:`deadline` / :meth:`seconds_left`: when the executor stops waiting for the call
      (``execution.timeout_s``, which a deployment may lower). A tool with a time limit of its own
      (a child process) uses the smaller one, keeping a moment to answer, so that it stops itself
      and reports what it has rather than being cut off with nothing.
    - :meth:`cancelled`: has the executor given up on the call (timed out, cancelled)? Its answer
      is then read by nobody; a long loop may stop early.
    - :meth:`commit`: called right before the irreversible step (the rename that publishes a
      file): raises :class:`~tooldeck_hookspecs.CallAbandoned` when the executor gave up (clean
      up and let it propagate), else from then on the executor, should the call time out or be
      cancelled, waits a short grace for the tool and reports what really happened. An ``async``
      tool that awaits after :meth:`commit` shields that part itself
      (``trio.CancelScope(shield=True)``).
    """

    session_id: str
    workdir: str
    call_id: str = ""
    tool_name: str = ""
    allowed_paths: tuple[str, ...] = ()
    attributes: Mapping[str, Any] = attrs.field(factory=dict)
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    #: Rules of :mod:`tooldeck_hookspecs.protected` (defaults plus the configured ones): paths a
    #: tool must never create or change on the model's behalf.
    protected_paths: tuple[str, ...] = DEFAULT_PROTECTED_PATHS
    logger: logging.Logger | None = attrs.field(default=None, repr=False)
    emit: Callable[[Mapping[str, Any]], None] = attrs.field(default=lambda _event: None, repr=False)
    #: The limits this call runs under, as the executor applies them: ``memory_mb``,
    #: ``max_output_bytes`` and ``timeout_s`` (the tool's ``execution`` after configuration:
    #: a tool can tell that the deployment changed its time), and in a sandbox
    #: ``memory`` (``"cgroup"``: the whole call's processes share ``memory_mb``; ``"rlimit"``:
    #: each process gets that much address space). A tool that starts programs sizes what it
    #: keeps of their output, or gives them, by these. Empty when nobody said.
    limits: Mapping[str, Any] = attrs.field(factory=dict)
    #: The executor's side of this attempt (see the class docstring); None: no executor's.
    control: CallControl | None = attrs.field(default=None, repr=False, eq=False)

    @property
    def deadline(self) -> float | None:
        """``time.monotonic()`` instant by which the executor stops waiting for this call, or
        None (no deadline, or no executor told)."""
        control = self.control
        return None if control is None else control.deadline

    def seconds_left(self) -> float | None:
        """Seconds until :attr:`deadline` (negative once passed), or None without one."""
        control = self.control
        return None if control is None else control.seconds_left()

    def cancelled(self) -> bool:
        """True once the executor gave up on this call (it timed out or was cancelled); always
        False outside an executor and in a sandbox (where giving up kills the process)."""
        control = self.control
        return control is not None and control.cancelled()

    def commit(self) -> None:
        """Call right before the irreversible step; raises
        :class:`~tooldeck_hookspecs.CallAbandoned` when the executor already gave up on the call
        (see the class docstring). A no-op outside an executor."""
        control = self.control
        if control is not None:
            control.commit()

    def with_control(self, control: CallControl | None) -> ToolContext:
        """A copy of this context bound to ``control`` (executors: one per attempt, so that a
        thread left running by an abandoned attempt never sees a later attempt's state)."""
        if type(self) is not ToolContext:  # a subclass may have fields of its own
            return attrs.evolve(self, control=control)
        # The constructor, not attrs.evolve (half the cost): this runs on every queued call.
        # A test checks that every field is copied.
        return ToolContext(
            session_id=self.session_id,
            workdir=self.workdir,
            call_id=self.call_id,
            tool_name=self.tool_name,
            allowed_paths=self.allowed_paths,
            attributes=self.attributes,
            settings=self.settings,
            protected_paths=self.protected_paths,
            logger=self.logger,
            emit=self.emit,
            limits=self.limits,
            control=control,
        )


_CANONICAL = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def canonical_json_bytes(value: Any) -> bytes:
    """UTF-8 JSON with sorted keys and no spaces: equal arguments give equal bytes.

    orjson does the work (this runs on every cacheable call). What orjson refuses, a lone
    surrogate a model sent or an integer over 64 bits, goes through ``json.dumps`` with ASCII
    escapes instead, and an integer too long to print as hex, so hashing arguments never
    raises. Values JSON cannot hold count as
    their ``str()``.
    """
    chunks = _canonical_chunks(value)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def canonical_json_sha256(value: Any) -> str:
    """The SHA-256 hex digest of :func:`canonical_json_bytes` of ``value`` (cache keys, approval
    hashes), without joining long output into one buffer: each piece is hashed as it comes, and
    hashing a piece lets go of the GIL."""
    digest = hashlib.sha256()
    for chunk in _canonical_chunks(value):
        digest.update(chunk)
    return digest.hexdigest()


def _canonical_chunks(value: Any) -> list[bytes]:
    """:func:`canonical_json_bytes` of ``value``, in one or more pieces."""
    try:
        out = orjson.dumps(value, option=_CANONICAL, default=str)
    except (orjson.JSONEncodeError, TypeError):
        out = None
    # orjson writes NaN and Infinity as null: a cache key must not equate them with None. Only
    # output holding a null pays for the look (the validator refuses such arguments anyway).
    if out is not None and (b"null" not in out or not _has_non_finite(value)):
        return [out]
    try:
        return _ascii_json(value)
    except ValueError:
        # An integer too long to print (str() stops at 4,300 digits): written exactly, in hex,
        # under a key no JSON number has, so it still differs from every other argument.
        value = _printable_ints(value)
    except TypeError:
        # Keys a Python caller gave that cannot be sorted together (1 and (1, 2)): written
        # as text, as orjson writes non-string keys.
        value = _text_keys(value)
    try:
        return _ascii_json(value)
    except (TypeError, ValueError):
        return _ascii_json(_text_keys(_printable_ints(value)))


#: Values within these budgets (characters of text, items of lists and dicts) are written by
#: ``json.dumps`` in one C call of at most a few milliseconds; bigger ones piece by piece
#: (:func:`_ascii_pieces`), so that the thread writing them lets go of the GIL between pieces.
_ONE_CALL_CHARS = 64 * 1024
_ONE_CALL_ITEMS = 4096
#: Characters of a string escaped in one C call by the piecewise writer (16 MB of lone
#: surrogates were one call of ~0.3 s: 96 MB of ``\\udXXX`` escapes, every session stalled).
_PIECE_CHARS = 16_384
#: Output characters gathered into one bytes chunk of the piecewise writer.
_CHUNK_CHARS = 256 * 1024
#: Below this nesting the piecewise writer hands a subtree to ``json.dumps`` whole: the same
#: output, and the same RecursionError for a structure nested past the interpreter's limit.
_PIECE_DEPTH = 200
_escape_ascii = json.encoder.encode_basestring_ascii  # what json.dumps(ensure_ascii=True) uses


def _dumps_ascii(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def _ascii_json(value: Any) -> list[bytes]:
    """``json.dumps`` of ``value`` with sorted keys, no spaces, ASCII escapes and ``str()`` of
    what JSON cannot hold, as ASCII bytes in one or more chunks: the same bytes and the same
    exceptions, piece by piece for big values."""
    if _fits_one_call(value):
        return [_dumps_ascii(value).encode("ascii")]
    chunks: list[bytes] = []
    pending: list[str] = []
    size = 0
    for piece in _ascii_pieces(value, 0, set()):
        pending.append(piece)
        size += len(piece)
        if size >= _CHUNK_CHARS:
            chunks.append("".join(pending).encode("ascii"))
            pending.clear()
            size = 0
    if pending or not chunks:
        chunks.append("".join(pending).encode("ascii"))
    return chunks


def _fits_one_call(value: Any) -> bool:
    """Whether ``value`` is within :data:`_ONE_CALL_CHARS` and :data:`_ONE_CALL_ITEMS` (a
    bounded look: it stops at the first budget passed)."""
    chars = items = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, dict):
            items += len(item)
            for key in item:
                if isinstance(key, str):
                    chars += len(key)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            items += len(item)
            stack.extend(item)
        elif not isinstance(item, int | float) and item is not None:
            chars += 64  # its str(): usually short; a long one is found when written
        if chars > _ONE_CALL_CHARS or items > _ONE_CALL_ITEMS:
            return False
    return True


def _float_text(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _string_pieces(value: str) -> Iterable[str]:
    n = str.__len__(value)
    if n <= _PIECE_CHARS:
        yield _escape_ascii(value)
        return
    yield '"'
    for at in range(0, n, _PIECE_CHARS):
        # Escapes are per character: the pieces of a string escape as the whole string does.
        yield _escape_ascii(value[at:at + _PIECE_CHARS])[1:-1]
    yield '"'


def _mark(value: Any, markers: set[int]) -> int:
    """Add ``value`` to the containers being written (its id, returned for the caller to
    discard when done); ValueError when it is already one of them, as the C encoder says."""
    ident = id(value)
    if ident in markers:
        raise ValueError("Circular reference detected")
    markers.add(ident)
    return ident


def _ascii_pieces(value: Any, depth: int, markers: set[int]) -> Iterable[str]:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
    default=str)`` piece by piece: the C encoder's cases in its order (``_json.c``
    ``encoder_listencode_obj``), strings escaped in slices."""
    if value is None:
        yield "null"
    elif value is True:
        yield "true"
    elif value is False:
        yield "false"
    elif isinstance(value, str):
        yield from _string_pieces(value)
    elif isinstance(value, int):
        yield int.__repr__(value)  # ValueError past 4,300 digits, as json.dumps
    elif isinstance(value, float):
        yield _float_text(value)
    elif isinstance(value, list | tuple):
        # As the C encoder's PySequence_Fast: a subclass is read through its own __iter__.
        items = value if type(value) is list or type(value) is tuple else list(value)
        if not items:
            yield "[]"
        elif depth >= _PIECE_DEPTH:
            yield _dumps_ascii(value)
        else:
            ident = _mark(value, markers)
            yield "["
            for n, item in enumerate(items):
                if n:
                    yield ","
                yield from _ascii_pieces(item, depth + 1, markers)
            yield "]"
            markers.discard(ident)
    elif isinstance(value, dict):
        if not dict.__len__(value):
            yield "{}"
        elif depth >= _PIECE_DEPTH:
            yield _dumps_ascii(value)
        else:
            ident = _mark(value, markers)
            yield "{"
            for n, (key, item) in enumerate(sorted(value.items())):
                if isinstance(key, str):
                    pass
                elif isinstance(key, float):
                    key = _float_text(key)
                elif key is True or key is False or key is None:
                    key = "true" if key is True else "false" if key is False else "null"
                elif isinstance(key, int):
                    key = int.__repr__(key)
                else:
                    raise TypeError(
                        f"keys must be str, int, float, bool or None, not {type(key).__name__}"
                    )
                if n:
                    yield ","
                yield from _string_pieces(key)
                yield ":"
                yield from _ascii_pieces(item, depth + 1, markers)
            yield "}"
            markers.discard(ident)
    else:
        ident = _mark(value, markers)
        yield from _ascii_pieces(str(value), depth + 1, markers)
        markers.discard(ident)


def _printable_ints(value: Any, depth: int = 0) -> Any:
    """``value`` with each integer ``str()`` refuses replaced by ``{"\\u0000int": hex}``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if printable_int(value) is value else {"\x00int": hex(value)}
    if depth > 1_000:
        return value  # deeper than json.dumps goes: it raises RecursionError there anyway
    if isinstance(value, Mapping):
        return {
            (hex(k) if type(k) is int and printable_int(k) is not k else k): _printable_ints(
                v, depth + 1
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_printable_ints(v, depth + 1) for v in value]
    return value


def _text_keys(value: Any, depth: int = 0) -> Any:
    """``value`` with every mapping's keys as text (``str()``; ``repr()`` if that fails)."""
    if depth > 1_000:
        return value  # deeper than json.dumps goes: it raises RecursionError there anyway
    if isinstance(value, Mapping):
        return {
            (k if type(k) is str else _key_text(k)): _text_keys(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_text_keys(v, depth + 1) for v in value]
    return value


def _key_text(key: Any) -> str:
    try:
        return str(key)
    except Exception:
        return f"<{type(key).__name__}>"


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if item != item or item in (math.inf, -math.inf):
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def canonical_json(value: Any) -> str:
    """:func:`canonical_json_bytes` as text."""
    return canonical_json_bytes(value).decode("utf-8")


#: An integer Python refuses to print with more decimal digits than this is written in hex.
_MAX_DECIMAL_DIGITS = 50_000


def printable_int(value: int) -> int | str:
    """``value`` itself, or its exact text when Python refuses to print it as a number.

    ``str()`` of an integer with more digits than ``sys.get_int_max_str_digits()`` (4,300 by
    default) raises ``ValueError``, and so do ``json.dumps`` and every message built from it.
    A tool's result must still reach the model: such a number becomes its decimal digits
    (``decimal`` has no such limit), or ``0x…`` hexadecimal beyond 50,000 digits.
    """
    limit = sys.get_int_max_str_digits()
    # 3 bits per digit: below this, the number has fewer than `limit` digits (3.32 per digit).
    if not limit or value.bit_length() < limit * 3:
        return value
    try:
        str(value)
        return value
    except ValueError:
        pass
    if value.bit_length() * 0.30103 <= _MAX_DECIMAL_DIGITS:
        return format(decimal.Decimal(value), "f")
    return hex(value)


@functools.cache
def host_identity() -> str:
    """This machine, as far as its files go: the host name and ``/etc/machine-id``.

    The ``host`` entry of ``cache_context``: a tool whose result depends on local files
    (``file_read``) keys its cache entries by it, so that a shared cache (Redis) never answers
    a read on one host with a file another host read under the same path.
    """
    try:
        with open("/etc/machine-id", encoding="ascii", errors="replace") as handle:
            machine = handle.read(64).strip()
    except OSError:
        machine = ""
    return f"{socket.gethostname()}/{machine}"


#: ``cache_context`` entries that are not :class:`SessionInfo` fields, and what they stand for.
CONTEXT_EXTRAS: Mapping[str, Callable[[], str]] = {"host": host_identity}


def cache_key(tool: ToolDefinition, arguments: Mapping[str, Any], session: SessionInfo) -> str:
    """The cache key of a call: name, version, hash of canonical arguments, declared context.

    A context entry names a :class:`SessionInfo` field (``workdir``) or one of
    :data:`CONTEXT_EXTRAS` (``host``: the machine whose files the tool reads).
    """
    fields = tool.execution.cache_context
    context = {
        field: CONTEXT_EXTRAS[field]() if field in CONTEXT_EXTRAS else getattr(session, field, None)
        for field in fields
    } if fields else {}
    digest = canonical_json_sha256({"a": arguments, "c": context})
    return f"{tool.name}@{tool.version}:{digest}"


def call_tool_function(
    tool: ToolDefinition, arguments: Mapping[str, Any], context: ToolContext
) -> Any | Awaitable[Any]:
    """Call ``tool.execute`` with its calling convention; returns its value or awaitable.

    The one place that knows the two conventions, shared by in-process executors and sandbox
    workers.
    """
    function = tool.execute
    if function is None and tool.entrypoint:
        function = resolve_entrypoint(tool.entrypoint)
    if function is None:
        from .exceptions import ToolFailure

        raise ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            f"tool {tool.name!r} is declared without an implementation in this process",
            suggestion="This tool cannot run here; choose another tool.",
        )
    if tool.call_style == "kwargs":
        # Rich parameter types (models, dataclasses, enums, dates): JSON → the declared types.
        # The cached "plain function" answer is looked up here, without a call (hot path).
        try:
            plain = _coerce_cache.get(function, _MISSING) is None
        except TypeError:  # an unhashable callable object
            plain = False
        if not plain:
            arguments = coerce_arguments(function, arguments, tool.context_param)
        if not tool.context_param:
            return function(**arguments)
        kwargs = dict(arguments)
        kwargs[tool.context_param] = context
        return function(**kwargs)
    # A copy, as ``**arguments`` gives the kwargs style: a tool that edits its arguments dict
    # must not change the call the deck validated, authorized, audits (``call.end``) and
    # retries, nor the caller's own dict.
    return function(dict(arguments), context)


def resolve_entrypoint(reference: str) -> Callable[..., Any]:
    """Import ``"package.module:qualified.name"`` and return the object it names."""
    module_name, _, qualname = reference.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{reference!r} does not name a callable")
    return target  # type: ignore[no-any-return]
