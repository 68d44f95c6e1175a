"""Pending approvals of calls that need the user's confirmation (in memory)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import attrs

__all__ = ["InMemoryApprovalStore", "Approval"]


@attrs.define(kw_only=True)
class Approval:
    """One pending approval, bound to a session, a tool and a hash of the exact call.

    The core's hash covers the arguments, the tool's definition as the user saw it (version,
    plugin, description, parameters, security) and the session's working directory.
    """

    approval_id: str
    session_id: str
    tool: str
    arguments_hash: str
    expires_at: float
    state: str = "pending"  # pending | approved | denied | used


class InMemoryApprovalStore:
    """The default approval store: single-use approvals that expire, bound to one exact call.

    Used by the core when no plugin provides ``tooldeck_approval_store``. State is per process;
    the Redis plugin shares it across processes.

    At most ``max_pending`` approvals are kept. When full, the oldest *undecided* request of
    the session holding the most undecided ones goes (the requesting session's own, when it is
    among them): a model that floods its own session with requests pushes out its own, never
    an approval a user already gave. Given approvals only leave when used, denied or expired.
    """

    def __init__(self, *, timer: Callable[[], float] = time.monotonic, max_pending: int = 10_000):
        self._timer = timer
        self._max_pending = max_pending
        self._items: dict[str, Approval] = {}
        # Session id -> its undecided approval ids, oldest first (dicts keep insertion order).
        self._by_session: dict[str, dict[str, None]] = {}

    def _undecided(self, approval: Approval) -> None:
        """Forget ``approval`` as a request that may be pushed out (it was decided or went)."""
        ids = self._by_session.get(approval.session_id)
        if ids is not None:
            ids.pop(approval.approval_id, None)
            if not ids:
                del self._by_session[approval.session_id]

    def _drop(self, approval_id: str) -> None:
        approval = self._items.pop(approval_id, None)
        if approval is not None:
            self._undecided(approval)

    def _evict_for(self, session_id: str) -> bool:
        """Push out one undecided request to make room; False when none is left."""
        if not self._by_session:
            return False
        most = max(len(ids) for ids in self._by_session.values())
        own = self._by_session.get(session_id)
        victims = own if own is not None and len(own) == most else next(
            ids for ids in self._by_session.values() if len(ids) == most
        )
        self._drop(next(iter(victims)))
        return True

    def _sweep(self) -> None:
        now = self._timer()
        for key in [k for k, a in self._items.items() if a.expires_at <= now]:
            self._drop(key)

    async def create(self, *, session_id: str, tool: str, arguments_hash: str, ttl_s: float) -> str:
        """Record a pending approval; return its unguessable id."""
        self._sweep()
        while self._items and len(self._items) >= self._max_pending:
            # Memory stays bounded, and the flooding session pays: its oldest request goes
            # first. With only given approvals left, the oldest of them goes: memory first.
            if not self._evict_for(session_id):
                self._drop(next(iter(self._items)))
        approval_id = "apr_" + secrets.token_urlsafe(16)
        self._by_session.setdefault(session_id, {})[approval_id] = None
        self._items[approval_id] = Approval(
            approval_id=approval_id,
            session_id=session_id,
            tool=tool,
            arguments_hash=arguments_hash,
            expires_at=self._timer() + ttl_s,
        )
        return approval_id

    def get(self, approval_id: str) -> Approval | None:
        """The approval if it exists and has not expired."""
        self._sweep()
        return self._items.get(approval_id)

    async def resolve(
        self, approval_id: str, approved: bool, *, session_id: str | None = None
    ) -> bool:
        """Approve or deny; False when unknown, expired, already decided or another session's.

        An approval given but not yet used can still be denied (the user changed their mind):
        its call is then refused. A denial is final, and a used approval is gone.
        """
        approval = self.get(approval_id)
        if approval is None:
            return False
        if approval.state != "pending" and not (approval.state == "approved" and not approved):
            return False
        if session_id is not None and approval.session_id != session_id:
            return False
        approval.state = "approved" if approved else "denied"
        self._undecided(approval)  # decided: never pushed out by others' requests
        return True

    async def consume(
        self, *, approval_id: str, session_id: str, tool: str, arguments_hash: str
    ) -> bool:
        """Use an approved approval once, for exactly this session, tool and arguments."""
        approval = self.get(approval_id)
        if (
            approval is None
            or approval.state != "approved"
            or approval.session_id != session_id
            or approval.tool != tool
            or approval.arguments_hash != arguments_hash
        ):
            return False
        approval.state = "used"
        self._drop(approval_id)
        return True
