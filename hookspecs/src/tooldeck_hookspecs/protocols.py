"""The interfaces of the objects that provider hooks return.

Provider hooks (``firstresult``, called once at start-up) return one of these; the core resolves
them once and calls their async methods on the hot path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from .model import (
    ArgumentProblem,
    RateLimitOutcome,
    ScoredTool,
    SessionInfo,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolResult,
)

__all__ = [
    "Catalog",
    "RegisterFn",
    "ArgumentValidator",
    "Retriever",
    "Cache",
    "RateLimiter",
    "Executor",
    "ApprovalStore",
    "PendingApproval",
]


@runtime_checkable
class Catalog(Protocol):
    """Read-only view of the registered tools."""

    def get(self, name: str) -> ToolDefinition | None:
        """The tool called ``name``, or None."""

    def __contains__(self, name: object) -> bool: ...

    def __iter__(self) -> Iterator[ToolDefinition]: ...

    def __len__(self) -> int: ...

    def by_category(self, category: str) -> Sequence[ToolDefinition]:
        """Tools of one category, in registration order."""

    def categories(self) -> Sequence[str]:
        """Every category that has at least one tool."""


class RegisterFn(Protocol):
    """The ``register`` callable handed to ``tooldeck_register_tools``.

    Accepts a :class:`ToolDefinition`, or a function (sync or async) plus keyword options
    (``name``, ``description``, ``category``, ``version``, ``parameters`` as a JSON Schema,
    ``security``, ``execution``, ``tags``); without ``parameters`` they are derived from the type
    hints and the docstring. Returns the function unchanged, so it also works as a decorator via
    ``functools.partial``.
    """

    def __call__(self, tool: Any, /, **options: Any) -> Any: ...


class ArgumentValidator(Protocol):
    """A compiled validator: the problems in ``arguments`` (empty when they are valid)."""

    def __call__(self, arguments: Mapping[str, Any], /) -> list[ArgumentProblem]: ...


class Retriever(Protocol):
    """Top-k recall over the catalog for a task description (the filter stage).

    ``index``, ``add``, ``remove`` and ``search`` are required. ``record_use`` is optional:
    the core looks it up with ``getattr`` and skips it when absent, so a retriever written
    before it existed keeps working; a class that subclasses this protocol inherits the no-op
    default below.
    """

    async def index(self, tools: Sequence[ToolDefinition]) -> None:
        """(Re)build the index for exactly these tools. Called once the catalog is ready."""

    async def add(self, tools: Sequence[ToolDefinition]) -> None:
        """Add or replace tools at run time without a rebuild."""

    async def remove(self, names: Sequence[str]) -> None:
        """Remove tools at run time."""

    async def search(self, query: str, k: int) -> list[ScoredTool]:
        """The ``k`` best candidates for ``query``, best first."""

    def record_use(self, query: str, tool: str) -> None:
        """Learning from use (optional): the model called ``tool``, dealt for ``query``.

        Called by the core on the event loop, once per tool and turn, with the task of the
        hand the tool was dealt in. It must return at once (no I/O, no encoding: queue the
        work for the next ``search``, which runs in a worker thread) and should not raise; an
        exception is logged and ignored. A retriever may use the (task, tool) pairs to rank
        tools used for similar tasks higher, per deployment. The default does nothing.
        """
        return None


class Cache(Protocol):
    """Results of cacheable tools, keyed by :func:`~tooldeck_hookspecs.cache_key`."""

    async def get(self, key: str) -> ToolResult | None:
        """The cached result for ``key``, or None (a miss or an expired entry)."""

    async def put(self, key: str, result: ToolResult, ttl_s: float) -> None:
        """Store a successful result for ``ttl_s`` seconds."""

    async def invalidate(self, tools: Sequence[str]) -> int:
        """Drop every cached result of these tools (any arguments); return how many."""

    def statistics(self) -> Any:
        """A frozen object with at least ``hits``, ``misses`` and ``evictions``."""


class RateLimiter(Protocol):
    """Admission control consulted after the cache (a hit is never counted)."""

    async def hit(self, tool: ToolDefinition, session: SessionInfo) -> RateLimitOutcome:
        """Count one call of ``tool`` in ``session``; say whether it may proceed."""


class Executor(Protocol):
    """Runs one call: queue, timeout, cancellation, retries, sandbox.

    Optional methods the core uses when present: ``cancel_session(session_id) -> int`` (cancel a
    session's queued and running calls, which then return ``CANCELLED``; without it the core
    wraps each call in a cancel scope of its own) and ``statistics()`` (a frozen snapshot).
    Result metadata an executor adds: ``attempts``, ``duration_s``, ``isolation``; sandboxed
    calls may add ``warm`` and ``output``. ``ToolContext.emit`` reaches the caller from
    in-process tools only. Per attempt, an executor may hand the tool
    ``context.with_control(CallControl(deadline=...))`` and call ``control.abandon()`` when it
    gives up: the tool then sees its deadline, ``cancelled()``, and a ``commit()`` that is
    refused once the call was given up on (without it, those are no-ops for the tool).
    """

    async def run(self, tool: ToolDefinition, call: ToolCall, context: ToolContext) -> ToolResult:
        """Run ``call`` and return its result; never raises for a tool's failure."""

    async def aclose(self) -> None:
        """Release workers, threads and processes."""


class PendingApproval(Protocol):
    """A call waiting for the user's approval."""

    approval_id: str
    tool: str
    arguments_hash: str
    session_id: str
    expires_at: float


class ApprovalStore(Protocol):
    """Pending approvals of dangerous calls (in memory by default, shared via Redis).

    A store whose backend is unavailable should raise rather than answer False: the core then
    fails closed (the call gets a ``PLUGIN_ERROR`` result, or ``TIMEOUT`` past the call's
    deadline, and does not run) but, a failure not being a refusal, keeps a resumed call pending
    so that the user can resume it again. So does a store whose ``create`` answers anything but
    a non-empty ``str`` or whose ``consume`` answers anything but a ``bool``.

    ``arguments_hash`` is opaque to the store: the core binds it to the exact arguments, the
    session's working directory and the tool as the user saw it (version, plugin, description,
    parameters, security), so the same call against a re-registered tool or another directory
    needs a new approval. Compare it for equality only.
    """

    async def create(self, *, session_id: str, tool: str, arguments_hash: str, ttl_s: float) -> str:
        """Record a pending approval; return its id."""

    async def resolve(
        self, approval_id: str, approved: bool, *, session_id: str | None = None
    ) -> bool:
        """Approve or deny a pending approval; False when it is unknown, expired or decided.

        An approval that was approved but not yet consumed can still be denied (True): the user
        changed their mind, and a later ``consume`` of it answers False. A denial is final and
        a consumed approval is gone (False); a deny racing with a ``consume`` must let exactly
        one of them win. With ``session_id`` (the core always passes it), only an approval
        created for that session can be decided: one session must not approve or revoke
        another session's call.
        """

    async def consume(
        self, *, approval_id: str, session_id: str, tool: str, arguments_hash: str
    ) -> bool:
        """Use an approved approval once for exactly this call; True if it was valid.

        False is a refusal (not approved, denied, expired, used, another call); raise when the
        store cannot tell.
        """
