"""Exceptions of tooldeck-redis."""

from __future__ import annotations

from tooldeck_hookspecs import TooldeckError

__all__ = ["RedisPluginError", "RedisUnavailable"]


class RedisPluginError(TooldeckError):
    """Base of every exception tooldeck-redis raises."""


class RedisUnavailable(RedisPluginError):
    """Redis could not be reached, timed out, or failed a command.

    The message names the server by its URL with the password masked. The core turns it into a
    ``PLUGIN_ERROR`` result when it comes from the rate limiter (fail closed).
    """

    def __init__(self, url: str, what: str, cause: BaseException | str) -> None:
        self.url = url
        self.what = what
        detail = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
        self.detail = detail
        super().__init__(f"Redis at {url} is unavailable, {what}: {detail}")
