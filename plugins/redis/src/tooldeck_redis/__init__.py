"""tooldeck-redis: rate limits, result cache and pending approvals shared across processes.

Enabled by a Redis URL (``[tool.tooldeck.redis] url = "redis://127.0.0.1:6379/0"`` or the
``TOOLDECK_REDIS_URL`` environment variable); without one the plugin provides nothing and the
in-memory providers serve. See the README for every setting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tooldeck_hookspecs import lazy_exports

from ._settings import URL_ENV, RedisSettings, mask_url, redis_settings
from .exceptions import RedisPluginError, RedisUnavailable

if TYPE_CHECKING:
    from ._approvals import RedisApprovalStore
    from ._cache import RedisCache, RedisCacheStatistics
    from ._client import RedisConnection
    from ._limiter import RedisRateLimiter

# The entry point ``tooldeck_redis.plugin`` imports this package: the providers load on first
# use (PEP 562), so that a deck without a Redis URL imports only the settings.
_LAZY = {
    "RedisApprovalStore": "._approvals",
    "RedisCache": "._cache",
    "RedisCacheStatistics": "._cache",
    "RedisConnection": "._client",
    "RedisRateLimiter": "._limiter",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "URL_ENV",
    "RedisApprovalStore",
    "RedisCache",
    "RedisCacheStatistics",
    "RedisConnection",
    "RedisPluginError",
    "RedisRateLimiter",
    "RedisSettings",
    "RedisUnavailable",
    "mask_url",
    "redis_settings",
]
