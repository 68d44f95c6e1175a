"""Exceptions of the contract.

Developers' mistakes (a bad tool definition, a missing stage) raise at start-up. Failures a model
causes at call time never raise to the caller: they become :class:`ToolResult` errors. A tool may
raise :class:`ToolFailure` to return a structured error of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import ErrorCode

__all__ = [
    "TooldeckError",
    "RegistrationError",
    "ConfigError",
    "StageMissingError",
    "PluginLoadError",
    "ToolFailure",
    "CallAbandoned",
]


class TooldeckError(Exception):
    """Base of every exception tooldeck raises."""


class RegistrationError(TooldeckError):
    """One or more tool definitions are invalid. ``problems`` holds one readable line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(
            f"{len(self.problems)} problem(s) in tool definitions:\n"
            + "\n".join(f"  - {p}" for p in self.problems)
        )


class ConfigError(TooldeckError):
    """The configuration file or an environment variable is malformed."""


class StageMissingError(TooldeckError):
    """No installed, enabled plugin provides a stage the deck needs."""

    def __init__(self, stage: str, hook: str, package: str) -> None:
        self.stage, self.hook, self.package = stage, hook, package
        super().__init__(
            f"no plugin provides the {stage} stage (hook {hook}); "
            f"install one, e.g. `pip install {package}`, or re-enable it if you disabled it"
        )


class PluginLoadError(TooldeckError):
    """An entry point failed to import, or implements a hook that does not exist."""


class ToolFailure(TooldeckError):
    """Raised by a tool (or a plugin acting for it) to return a structured error.

    The executor turns it into ``ToolResult(success=False, error=ToolError(...))`` with the same
    code, message, suggestion and details.
    """

    def __init__(
        self,
        code: ErrorCode | str,
        message: str,
        *,
        suggestion: str | None = None,
        retryable: bool = False,
        retry_after_s: float | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        self.code = ErrorCode(code)
        self.message = message
        self.suggestion = suggestion
        self.retryable = retryable
        #: The least time to wait before trying again (e.g. an HTTP Retry-After); executors that
        #: retry wait at least this long.
        self.retry_after_s = retry_after_s
        self.details = details or {}
        super().__init__(f"{self.code}: {message}")


class CallAbandoned(ToolFailure):
    """Raised by :meth:`ToolContext.commit() <tooldeck_hookspecs.ToolContext.commit>` when the
    executor already gave up on the call (it timed out or was cancelled, and the caller was told
    so): the tool must not make its change. Clean up (a temp file) and let it propagate; the
    executor reports the timeout or cancellation itself, so nobody reads this error.
    """

    def __init__(self, message: str = "") -> None:
        super().__init__(
            ErrorCode.CANCELLED,
            message
            or "the call was given up on (it timed out or was cancelled) before its change was "
            "committed; nothing was changed",
            suggestion="Call again only if the change is still wanted.",
        )
