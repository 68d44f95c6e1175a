"""The authorize decision: tiers and grants, then the path, shell and URL guards.

Everything one call gets wrong is reported at once: a model that sees all its mistakes fixes them
in one retry. Refusals come before confirmations (deny > ask), as the core combines them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import attrs

from tooldeck_hookspecs import (
    LEVEL_ORDER,
    Decision,
    ErrorCode,
    SecurityLevel,
    SessionInfo,
    ToolCall,
    ToolDefinition,
)

from ._paths import check_path
from ._urls import ENV_ALLOW, check_url

__all__ = ["authorize", "url_allow_list"]

_SUGGEST = {
    ErrorCode.PERMISSION_DENIED: (
        "choose a tool this session may use, or ask the user to change the session"
    ),
    ErrorCode.PATH_NOT_ALLOWED: "use a relative path inside the working directory",
    ErrorCode.COMMAND_INJECTION: (
        "pass one plain command with its arguments: no chaining, substitution, redirection, "
        "nested shells or function definitions; run several commands as several calls"
    ),
    ErrorCode.URL_NOT_ALLOWED: "use a public http(s) URL without credentials",
}


@attrs.frozen
class _Problem:
    code: ErrorCode
    reason: str


@lru_cache(maxsize=64)
def _parsed_allow(env_value: str, session_value: tuple[str, ...]) -> tuple[str, ...]:
    # Entries are kept as written (lower case, deduplicated): a port in an entry matters.
    entries = (str(e).strip().lower() for e in (*env_value.split(","), *session_value))
    return tuple(dict.fromkeys(e for e in entries if e))


def url_allow_list(session: SessionInfo) -> tuple[str, ...]:
    """The hosts and networks URLs of this session may reach although internal.

    Read from the ``TOOLDECK_URL_ALLOW`` environment variable and from
    ``session.attributes["url_allow"]`` (a comma-separated string or a list), both comma-separated
    hosts, IPs or CIDRs (``127.0.0.1,::1,localhost,10.0.0.0/8``).
    """
    raw = session.attributes.get("url_allow") if session.attributes else None
    if raw is None:
        session_value: tuple[str, ...] = ()
    elif isinstance(raw, str):
        session_value = tuple(raw.split(","))
    else:
        session_value = tuple(str(x) for x in raw)
    return _parsed_allow(os.environ.get(ENV_ALLOW, ""), session_value)


def _values(value: Any) -> Iterable[Any]:
    """A parameter's values: a list is checked item by item, None (absent) not at all."""
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return value
    return (value,)


def _tier(tool: ToolDefinition, session: SessionInfo) -> tuple[list[_Problem], list[str]]:
    denies: list[_Problem] = []
    asks: list[str] = []
    level = tool.security.level
    if LEVEL_ORDER[level] > LEVEL_ORDER[session.max_level]:
        denies.append(
            _Problem(
                ErrorCode.PERMISSION_DENIED,
                f"tool {tool.name!r} is {level}, above this session's maximum level "
                f"{session.max_level}; use a {session.max_level} tool instead",
            )
        )
        return denies, asks
    if level is SecurityLevel.MODERATE and tool.category not in session.grants:
        denies.append(
            _Problem(
                ErrorCode.PERMISSION_DENIED,
                f"tool {tool.name!r} is moderate and needs the {tool.category!r} grant, which "
                f"this session lacks; ask the user to grant it (--grant {tool.category})",
            )
        )
    if (
        level is SecurityLevel.DANGEROUS or tool.security.require_confirm
    ) and tool.name not in session.always_allow:
        why = "is dangerous" if level is SecurityLevel.DANGEROUS else "requires confirmation"
        asks.append(f"tool {tool.name!r} {why}: the user must approve this call")
    return denies, asks


def _arguments(
    call: ToolCall, tool: ToolDefinition, session: SessionInfo
) -> tuple[list[_Problem], list[str]]:
    denies: list[_Problem] = []
    asks: list[str] = []
    security = tool.security
    arguments: Mapping[str, Any] = call.arguments or {}
    for param in security.path_params:
        for value in _values(arguments.get(param)):
            reason = check_path(value, session.workdir, security.allowed_paths)
            if reason:
                denies.append(_Problem(ErrorCode.PATH_NOT_ALLOWED, f"argument {param!r}: {reason}"))
    for param in security.command_params:
        value = arguments.get(param)
        if value is None:
            continue
        if not isinstance(value, str | list | tuple):
            denies.append(
                _Problem(
                    ErrorCode.COMMAND_INJECTION,
                    f"argument {param!r} must be a command line or a list of arguments",
                )
            )
            continue
        # Imported here: the analyzer's patterns cost several ms to compile, which only calls
        # with a command argument should pay (not every process that loads the policy).
        from ._shell import analyze_command

        # The workdir makes absolute paths into it read like the relative ones they name.
        verdict = analyze_command(
            value, allow_pipes=security.allow_pipes, workdir=session.workdir or None
        )
        if verdict.injection:
            denies.append(
                _Problem(
                    ErrorCode.COMMAND_INJECTION,
                    f"argument {param!r} refused: " + "; ".join(verdict.injection),
                )
            )
        for reason in verdict.destructive:
            asks.append(f"argument {param!r} looks destructive: {reason}")
    if security.url_params:
        allow = url_allow_list(session)
        for param in security.url_params:
            for value in _values(arguments.get(param)):
                reason = check_url(value, allow)
                if reason:
                    denies.append(
                        _Problem(ErrorCode.URL_NOT_ALLOWED, f"argument {param!r}: {reason}")
                    )
    return denies, asks


def authorize(call: ToolCall, tool: ToolDefinition, session: SessionInfo) -> Decision | None:
    """The policy's opinion of one call: deny, ask, or None (nothing to object to).

    Tiers: ``safe`` passes; ``moderate`` needs ``tool.category`` in ``session.grants``;
    ``dangerous`` (or ``require_confirm``) asks unless the tool is in ``session.always_allow``; a
    tool above ``session.max_level`` is refused. Then each argument named in
    ``tool.security.path_params``, ``command_params`` and ``url_params`` goes through its guard.
    A destructive command asks for confirmation even for an always-allowed tool: the approval
    covered the tool, not this command.
    """
    security = tool.security
    if (
        security.level is SecurityLevel.SAFE
        and not security.require_confirm
        and not (security.path_params or security.command_params or security.url_params)
    ):
        # Nothing to judge: safe is the lowest level, and no argument needs a guard.
        return None
    denies, asks = _tier(tool, session)
    more_denies, more_asks = _arguments(call, tool, session)
    denies += more_denies
    asks += more_asks
    if denies:
        first = denies[0]
        reason = first.reason if len(denies) == 1 else " | ".join(p.reason for p in denies)
        return Decision.deny(
            reason,
            code=first.code,
            suggestion=_SUGGEST.get(first.code),
            details={"problems": [{"code": str(p.code), "reason": p.reason} for p in denies]},
        )
    if asks:
        return Decision.ask(
            " | ".join(asks),
            suggestion="ask the user to approve this exact call, or do it another way",
            details={"reasons": asks},
        )
    return None
