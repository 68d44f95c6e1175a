"""tooldeck's default policy plugin (entry point ``policy``).

Three hooks: authorization of each call (tiers, grants, path, shell and URL guards), rule filters
on the hand (excluded categories, maximum level, workdir and environment boosts) and redaction of
results.
"""

from __future__ import annotations

from collections.abc import Sequence

from tooldeck_hookspecs import (
    Decision,
    Exclusion,
    Preference,
    SessionInfo,
    ToolCall,
    ToolDefinition,
    ToolResult,
    hookimpl,
)

from ._authorize import authorize
from ._filters import rule_filter
from .redact import redact_result

__all__ = ["tooldeck_authorize_call", "tooldeck_filter_tools", "tooldeck_process_result"]


@hookimpl
def tooldeck_authorize_call(
    call: ToolCall, tool: ToolDefinition, session: SessionInfo
) -> Decision | None:
    """Deny or ask for one call; None when the policy has nothing against it."""
    return authorize(call, tool, session)


@hookimpl
def tooldeck_filter_tools(
    query: str, candidates: Sequence[ToolDefinition], session: SessionInfo
) -> list[Exclusion | Preference]:
    """Take tools the session rules out from the hand; prefer those its context suggests."""
    return rule_filter(query, candidates, session)


@hookimpl
def tooldeck_process_result(
    call: ToolCall, tool: ToolDefinition, result: ToolResult
) -> ToolResult | None:
    """Redact secrets from the result (``tooldeck_policy.redact``)."""
    return redact_result(result)
