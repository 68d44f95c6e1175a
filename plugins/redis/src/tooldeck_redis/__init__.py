"""tooldeck-redis: rate limits, result cache and pending approvals shared across processes.

Enabled by a Redis URL (``[tool.tooldeck.redis] url = "redis://127.0.0.1:6379/0"`` or the
``TOOLDECK_REDIS_URL`` environment variable); without one the plugin provides nothing and the
in-memory providers serve. See the README for every setting.
"""

from __future__ import annotations

from ._approvals import RedisApprovalStore
from ._cache import RedisCache, RedisCacheStatistics
from ._client import RedisConnection
from ._limiter import RedisRateLimiter
from ._settings import URL_ENV, RedisSettings, mask_url, redis_settings
from .exceptions import RedisPluginError, RedisUnavailable

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
