"""tooldeck's contract: markers, hook specifications, data model, error codes and exceptions.

Plugin authors write ``from tooldeck_hookspecs import hookimpl`` and implement hooks named in
:mod:`tooldeck_hookspecs.specs`.
"""

from __future__ import annotations

from ._control import CallControl
from ._deadline import CALL_DEADLINE, call_deadline, seconds_left
from ._decorator import TOOL_OPTIONS_ATTR, tool
from ._dropped import dropped_but_ran
from ._futures import wait_future
from ._lazy import lazy_exports
from ._markers import EVENT_KINDS_ATTR, PROJECT_NAME, hookimpl, hookspec, observes
from ._pointer import local_ref_target
from ._suspends import NONBLOCKING_ATTR, is_nonblocking, never_suspends, nonblocking
from ._text import shorten
from .errors import DEFAULT_SUGGESTIONS, RETRYABLE_CODES, ErrorCode
from .exceptions import (
    CallAbandoned,
    ConfigError,
    PluginLoadError,
    RegistrationError,
    StageMissingError,
    TooldeckError,
    ToolFailure,
)
from .model import (
    LEVEL_ORDER,
    MAX_RATE_WINDOW_S,
    ArgumentProblem,
    Decision,
    Event,
    Exclusion,
    ExecutionConfig,
    Preference,
    RateLimit,
    RateLimitOutcome,
    ScoredTool,
    SecurityConfig,
    SecurityLevel,
    SessionInfo,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolError,
    ToolResult,
    cache_key,
    call_tool_function,
    canonical_json,
    canonical_json_bytes,
    printable_int,
    resolve_entrypoint,
)
from .protected import (
    DEFAULT_PROTECTED_PATHS,
    REPOSITORY_MARKER_FILES,
    ProtectedMatch,
    ProtectedScan,
    find_protected,
    fold_name,
    host_which,
    normalise_rules,
    protected_message,
    protected_rule,
)
from .protocols import (
    ApprovalStore,
    ArgumentValidator,
    Cache,
    Catalog,
    Executor,
    RateLimiter,
    RegisterFn,
    Retriever,
)

__all__ = [
    "CALL_DEADLINE",
    "call_deadline",
    "seconds_left",
    "shorten",
    "NONBLOCKING_ATTR",
    "is_nonblocking",
    "local_ref_target",
    "never_suspends",
    "nonblocking",
    "DEFAULT_PROTECTED_PATHS",
    "REPOSITORY_MARKER_FILES",
    "ProtectedMatch",
    "ProtectedScan",
    "find_protected",
    "fold_name",
    "host_which",
    "normalise_rules",
    "protected_message",
    "protected_rule",
    "PROJECT_NAME",
    "hookimpl",
    "hookspec",
    "observes",
    "wait_future",
    "dropped_but_ran",
    "lazy_exports",
    "EVENT_KINDS_ATTR",
    "tool",
    "TOOL_OPTIONS_ATTR",
    "ErrorCode",
    "DEFAULT_SUGGESTIONS",
    "RETRYABLE_CODES",
    "TooldeckError",
    "RegistrationError",
    "ConfigError",
    "StageMissingError",
    "PluginLoadError",
    "ToolFailure",
    "CallAbandoned",
    "CallControl",
    "LEVEL_ORDER",
    "ArgumentProblem",
    "Decision",
    "Event",
    "ExecutionConfig",
    "Exclusion",
    "Preference",
    "RateLimit",
    "MAX_RATE_WINDOW_S",
    "RateLimitOutcome",
    "ScoredTool",
    "SecurityConfig",
    "SecurityLevel",
    "SessionInfo",
    "ToolCall",
    "ToolContext",
    "ToolDefinition",
    "ToolError",
    "ToolResult",
    "cache_key",
    "call_tool_function",
    "canonical_json",
    "canonical_json_bytes",
    "printable_int",
    "resolve_entrypoint",
    "ApprovalStore",
    "ArgumentValidator",
    "Cache",
    "Catalog",
    "Executor",
    "RateLimiter",
    "RegisterFn",
    "Retriever",
]
