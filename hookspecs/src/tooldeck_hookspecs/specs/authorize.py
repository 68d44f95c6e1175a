"""Authorize stage: decide whether a validated call may run, and admission control."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._markers import hookspec
from ..model import Decision, SessionInfo, ToolCall, ToolDefinition
from ..protocols import ApprovalStore, RateLimiter

# -------------------------------------------------------------------------
# Decisions (policy)
# -------------------------------------------------------------------------


@hookspec
def tooldeck_authorize_call(
    call: ToolCall, tool: ToolDefinition, session: SessionInfo
) -> Decision | None:
    """Give an opinion on one call whose arguments already passed validation.

    Called for every implementation on every call; all results are collected and combined as
    deny > ask > allow (None means no opinion). Every deny or ask must carry a reason; the core
    records which plugin gave it. Should be pure and cheap. An implementation marked with
    :func:`~tooldeck_hookspecs.nonblocking` is called on the event loop (about 1 µs); one without
    the mark runs in a worker thread (tens of µs) under the call's deadline (``timeout_s``), so
    a hook that blocks or hangs fails its own calls closed (``PLUGIN_ERROR`` naming the plugin)
    and stalls nobody else. Mark a hook only when it never waits.

    :param call: the call, with its parsed arguments.
    :param tool: the tool's definition (after configuration overrides).
    :param session: a snapshot of the session (grants, always-allowed tools, attributes, ...).
    :return: :class:`Decision` or None.

    Example, no writes to ``.env`` files::

        @hookimpl
        @nonblocking
        def tooldeck_authorize_call(call, tool, session):
            if tool.name == "file_write" and call.arguments.get("path", "").endswith(".env"):
                return Decision.deny("writing .env files is not allowed")
    """


# -------------------------------------------------------------------------
# Providers
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def tooldeck_rate_limiter(settings: Mapping[str, Any]) -> RateLimiter | None:
    """Provide the rate limiter, consulted after the cache on every call.

    Called once at start-up; stops at the first non-None result. Without one, calls are not
    rate-limited.

    :param settings: the whole tooldeck configuration.
    """


@hookspec(firstresult=True)
def tooldeck_approval_store(settings: Mapping[str, Any]) -> ApprovalStore | None:
    """Provide the store of pending approvals for dangerous calls.

    Called once at start-up; stops at the first non-None result. The core falls back to an
    in-memory store of its own.

    :param settings: the whole tooldeck configuration.
    """
