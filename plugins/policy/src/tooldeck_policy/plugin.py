"""tooldeck's default policy plugin (entry point ``policy``).

Three hooks: authorization of each call (tiers, grants, path, shell and URL guards), rule filters
on the hand (excluded categories, maximum level, workdir and environment boosts) and redaction of
results, with its twin ``tooldeck_redact`` for everything else that leaves the deck. A fourth,
``tooldeck_register_tools``, registers no tool: it is the start-up hook that sees the
configuration, and reads the ``[policy]`` table's known secrets from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tooldeck_hookspecs import (
    ConfigError,
    Decision,
    Exclusion,
    Preference,
    SessionInfo,
    ToolCall,
    ToolDefinition,
    ToolResult,
    hookimpl,
    nonblocking,
)

from ._authorize import authorize
from ._filters import rule_filter
from .redact import (
    configure,
    install_log_redaction,
    needs_offload,
    redact_result,
    redact_value,
    settings_secrets,
)

__all__ = [
    "tooldeck_authorize_call",
    "tooldeck_filter_tools",
    "tooldeck_process_result",
    "tooldeck_redact",
    "tooldeck_register_tools",
]

# tooldeck's own log records (tracebacks included) are redacted as soon as the policy loads.
install_log_redaction()


@hookimpl
@nonblocking  # pure checks; the URL guard's DNS look-ups go to a thread (tool.security.url_params)
def tooldeck_authorize_call(
    call: ToolCall, tool: ToolDefinition, session: SessionInfo
) -> Decision | None:
    """Deny or ask for one call; None when the policy has nothing against it."""
    return authorize(call, tool, session)


@hookimpl
@nonblocking  # rules over the session, and one bounded, cached scan of the workdir's top level
def tooldeck_filter_tools(
    query: str, candidates: Sequence[ToolDefinition], session: SessionInfo
) -> list[Exclusion | Preference]:
    """Take tools the session rules out from the hand; prefer those its context suggests."""
    return rule_filter(query, candidates, session)


@hookimpl
def tooldeck_register_tools(register: Any, settings: Mapping[str, Any]) -> None:
    """Register no tool; read ``[policy] secrets`` / ``secret_env`` and the environment again,
    and the credentials other plugins' tables hold (``redact.settings_secrets``).

    Raises :class:`ConfigError` for a malformed table, which fails the deck's start-up.
    """
    table = settings.get("policy", {})
    if not isinstance(table, Mapping):
        raise ConfigError("'policy' must be a table")
    try:
        configure(table)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    # An MCP server's token, a search key, a Redis password: quoted by a failing plugin or a
    # child process's output, they are redacted like the environment's.
    found = settings_secrets(settings)
    if found:
        configure({"secrets": found})


@hookimpl
def tooldeck_process_result(
    call: ToolCall, tool: ToolDefinition, result: ToolResult
) -> ToolResult | None:
    """Redact secrets from the result (``tooldeck_policy.redact``).

    Linear in the result's size and thread-safe. Carries ``tooldeck_offload``: a predicate the
    core may use to run this hook in a worker thread for big results (see the README).
    """
    return redact_result(result)


# Read by the core: results for which this hook should run off the event loop.
tooldeck_process_result.tooldeck_offload = needs_offload  # type: ignore[attr-defined]


@hookimpl
# Pure and linear in the value; the deck hands long values to a worker thread itself. Unmarked,
# every short redaction would cost a thread hand-off (the deck runs blocking redactors there).
@nonblocking
def tooldeck_redact(value: Any) -> Any | None:
    """Redact secrets from what the deck sends out besides a tool's result (a name no tool
    has, a hand's task, events, a server's own answers): a :class:`ToolResult` as
    :func:`tooldeck_process_result` does, text and JSON-like values with ``redact_value``.

    None when nothing changed. Linear in the value's size and thread-safe.
    """
    if isinstance(value, ToolResult):
        return redact_result(value)
    redacted = redact_value(value)
    return None if redacted is value else redacted
