"""Hook implementations of tooldeck-redis (entry point ``redis``).

Each provider returns None unless a Redis URL is configured (``[tool.tooldeck.redis] url`` or
``TOOLDECK_REDIS_URL``), so that installing the plugin alone changes nothing. Each provider gets
its own connection pool and circuit breaker: the deck closes the cache and the limiter
separately, and one stage's outage handling must not decide another's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tooldeck_hookspecs import hookimpl

# `tooldeck bench`'s figures of this plugin live in their own module.
from ._bench_figures import tooldeck_bench_descriptions, tooldeck_bench_figures  # noqa: F401
from ._settings import redis_settings

if TYPE_CHECKING:
    # The client, cache, limiter and approval modules (and tooldeck-ratelimit, which the limiter
    # imports) load only when a Redis URL is configured: a deck without Redis pays for none.
    from ._approvals import RedisApprovalStore
    from ._cache import RedisCache
    from ._limiter import RedisRateLimiter


# tryfirst: with a URL configured, the shared Redis providers must win over the in-memory ones
# of tooldeck-cache and tooldeck-ratelimit (also installed), or limits would hold per process.
@hookimpl(tryfirst=True)
def tooldeck_cache(settings: Mapping[str, Any]) -> RedisCache | None:
    """Provide the Redis result cache when a Redis URL is configured."""
    parsed = redis_settings(settings)
    if parsed is None or not parsed.cache_enabled:
        return None
    from ._cache import RedisCache
    from ._client import RedisConnection

    return RedisCache(RedisConnection(parsed), parsed)


# tryfirst: see tooldeck_cache above; a per-process limiter would multiply every limit.
@hookimpl(tryfirst=True)
def tooldeck_rate_limiter(settings: Mapping[str, Any]) -> RedisRateLimiter | None:
    """Provide the Redis rate limiter when a Redis URL is configured."""
    parsed = redis_settings(settings)
    if parsed is None or not parsed.ratelimit_enabled:
        return None
    from ._client import RedisConnection
    from ._limiter import RedisRateLimiter

    return RedisRateLimiter(RedisConnection(parsed), parsed)


# tryfirst: the core's own in-memory store is only a fallback, but another plugin's store must
# not shadow the shared one when Redis is configured.
@hookimpl(tryfirst=True)
def tooldeck_approval_store(settings: Mapping[str, Any]) -> RedisApprovalStore | None:
    """Provide the Redis approval store when a Redis URL is configured."""
    parsed = redis_settings(settings)
    if parsed is None or not parsed.approvals_enabled:
        return None
    from ._approvals import RedisApprovalStore
    from ._client import RedisConnection

    return RedisApprovalStore(RedisConnection(parsed), parsed)
