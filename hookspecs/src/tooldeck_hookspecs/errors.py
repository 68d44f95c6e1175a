"""Stable error codes: every failure a model can cause comes back as one of these."""

from __future__ import annotations

import enum

__all__ = ["ErrorCode", "DEFAULT_SUGGESTIONS", "RETRYABLE_CODES"]


class ErrorCode(enum.StrEnum):
    """Codes carried by :class:`~tooldeck_hookspecs.ToolError`; the values are stable API."""

    TOOL_NOT_FOUND = "TOOL_NOT_FOUND"
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    CONFIRMATION_REQUIRED = "CONFIRMATION_REQUIRED"
    PATH_NOT_ALLOWED = "PATH_NOT_ALLOWED"
    COMMAND_INJECTION = "COMMAND_INJECTION"
    URL_NOT_ALLOWED = "URL_NOT_ALLOWED"
    RATE_LIMIT_EXCEEDED = "RATE_LIMIT_EXCEEDED"
    TIMEOUT = "TIMEOUT"
    CANCELLED = "CANCELLED"
    SANDBOX_MEMORY_LIMIT = "SANDBOX_MEMORY_LIMIT"
    SANDBOX_CRASHED = "SANDBOX_CRASHED"
    OUTPUT_TRUNCATED = "OUTPUT_TRUNCATED"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    #: The input or output of a tool is larger than the tool accepts.
    TOO_LARGE = "TOO_LARGE"
    #: A plugin (not the tool) raised; the deck reports it and keeps serving.
    PLUGIN_ERROR = "PLUGIN_ERROR"


#: Codes whose failure may go away by trying again (used by executors' retry logic).
RETRYABLE_CODES: frozenset[ErrorCode] = frozenset({ErrorCode.TIMEOUT})

#: What the model is told to do next when a plugin gives no suggestion of its own.
DEFAULT_SUGGESTIONS: dict[ErrorCode, str] = {
    ErrorCode.TOOL_NOT_FOUND: "Use one of the tools offered to you; check the spelling of the name.",
    ErrorCode.INVALID_ARGUMENTS: "Fix the listed fields to match the tool's parameter schema and call again.",
    ErrorCode.PERMISSION_DENIED: "This action is not permitted in this session; choose another approach or ask the user.",
    ErrorCode.CONFIRMATION_REQUIRED: "Ask the user to approve this exact call, then retry with the approval.",
    ErrorCode.PATH_NOT_ALLOWED: "Use a relative path inside the working directory.",
    ErrorCode.COMMAND_INJECTION: "Pass one plain command with its arguments; no chaining, pipes, substitution or redirection.",
    ErrorCode.URL_NOT_ALLOWED: "Use a public http(s) URL.",
    ErrorCode.RATE_LIMIT_EXCEEDED: "Wait retry_after_s seconds before calling this tool again.",
    ErrorCode.TIMEOUT: "The call took too long; try a smaller request.",
    ErrorCode.CANCELLED: "The call was cancelled; call again only if it is still needed.",
    ErrorCode.SANDBOX_MEMORY_LIMIT: "The code used too much memory; process less data at once.",
    ErrorCode.SANDBOX_CRASHED: "The tool's process crashed; check the input and try a simpler request.",
    ErrorCode.OUTPUT_TRUNCATED: "The output was too large; ask for less (filter, paginate or summarize).",
    ErrorCode.EXECUTION_ERROR: "The tool failed; read the message, adjust the arguments, and try again.",
    ErrorCode.TOO_LARGE: "The input or output is too large for this tool; work on a smaller piece.",
    ErrorCode.PLUGIN_ERROR: "An internal error occurred; try a different tool or report it to the user.",
}
