"""The ``[tool.tooldeck.redis]`` table, parsed once at start-up."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import attrs

from tooldeck_hookspecs import ConfigError

__all__ = ["NAMESPACE_ENV", "RedisSettings", "mask_url", "redis_settings", "URL_ENV"]

#: The environment variable that supplies the URL when the table has none.
URL_ENV = "TOOLDECK_REDIS_URL"
#: The namespace when the table does not set one: one value per deployment (see the README).
NAMESPACE_ENV = "TOOLDECK_REDIS_NAMESPACE"

OnError = Literal["fail_closed", "local"]

_MIB = 1024 * 1024


def mask_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (safe for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable Redis URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal needs its brackets back
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@attrs.frozen(kw_only=True)
class RedisSettings:
    """Everything the Redis providers need; built by :func:`redis_settings`.

    Timeouts are in seconds. ``retry_interval_s`` is how long a provider stops calling Redis after
    a failure (answering at once with its ``on_error`` behaviour) before it tries again.
    """

    url: str
    namespace: str = "tooldeck"
    socket_timeout_s: float = 0.5
    connect_timeout_s: float = 0.5
    max_connections: int = 8
    retry_interval_s: float = 1.0
    cache_enabled: bool = True
    cache_on_error: OnError = "local"
    max_entry_bytes: int = _MIB
    local_max_entries: int = 1024
    local_max_bytes: int = 16 * _MIB
    ratelimit_enabled: bool = True
    ratelimit_on_error: OnError = "fail_closed"
    global_factor: float = 10.0
    global_overrides: Mapping[str, Any] = attrs.field(factory=dict)
    approvals_enabled: bool = True

    @property
    def masked_url(self) -> str:
        """The URL with its password masked."""
        return mask_url(self.url)


def _table(settings: Mapping[str, Any], *path: str) -> Mapping[str, Any]:
    table: Any = settings
    for key in path:
        table = table.get(key, {}) if isinstance(table, Mapping) else {}
        table = table or {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{'.'.join(path)} must be a table")
    return table


def _on_error(table: Mapping[str, Any], where: str, default: OnError) -> OnError:
    value = table.get("on_error", default)
    if value not in ("fail_closed", "local"):
        raise ConfigError(f"redis.{where}.on_error must be 'fail_closed' or 'local', not {value!r}")
    return value  # type: ignore[no-any-return]


def _number(value: Any) -> bool:
    # NaN and the infinities are floats TOML can spell; no setting here means anything by them
    # (a NaN timeout fails every call, an infinite one lets a hung server hold calls forever).
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive(table: Mapping[str, Any], key: str, default: float, where: str = "redis") -> float:
    value = table.get(key, default)
    if not _number(value) or value <= 0:
        raise ConfigError(f"{where}.{key} must be a positive number, not {value!r}")
    return float(value)


def _non_negative(table: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if not _number(value) or value < 0:
        raise ConfigError(f"{where}.{key} must be a number >= 0, not {value!r}")
    return float(value)


_warned: set[str] = set()


def _warn_shared_namespace(url: str) -> None:
    """Say once per Redis URL that the namespace was left at its shared default.

    Everything a deck keeps in Redis is keyed under the namespace: two deployments that share a
    Redis and both leave it unset share cached results (a tool of one tenant answering another's
    identical call from cache), rate-limit windows and approvals. The workers of one deployment
    should share one; different deployments must not.
    """
    if url in _warned:
        return
    _warned.add(url)
    logging.getLogger("tooldeck.redis").warning(
        "tooldeck-redis: redis.namespace is not set; the default 'tooldeck' is shared by every "
        "deck on %s that leaves it unset (cached results, rate limits, approvals). Set "
        "[tool.tooldeck.redis] namespace, or %s, to one name per deployment.",
        mask_url(url), NAMESPACE_ENV,
    )


def redis_settings(
    settings: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> RedisSettings | None:
    """Parse ``settings["redis"]``; None when no URL is configured (the plugin stays idle).

    The URL comes from ``url`` in the table, else from the ``TOOLDECK_REDIS_URL`` environment
    variable. The cross-session rate-limit factors are read from the ``[ratelimit]`` table so that
    one configuration means the same limits whichever limiter serves them.

    :raises ConfigError: a malformed value (named by its key).
    """
    environ = os.environ if environ is None else environ
    table = _table(settings, "redis")
    url = table.get("url") or environ.get(URL_ENV) or ""
    if not url:
        return None
    if not isinstance(url, str) or urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            f"redis.url must be a redis://, rediss:// or unix:// URL, not {mask_url(str(url))!r}"
        )
    cache = _table(settings, "redis", "cache")
    ratelimit = _table(settings, "redis", "ratelimit")
    approvals = _table(settings, "redis", "approvals")
    if approvals.get("on_error", "fail_closed") != "fail_closed":
        # A local approval store would let a worker honour an approval that another worker
        # already consumed or never saw: approvals only fail closed.
        raise ConfigError("redis.approvals.on_error can only be 'fail_closed'")
    shared_limits = _table(settings, "ratelimit")
    global_factor = _non_negative(shared_limits, "global_factor", 10.0, "ratelimit")
    namespace = str(table.get("namespace") or environ.get(NAMESPACE_ENV) or "tooldeck")
    if not namespace or any(c.isspace() for c in namespace):
        raise ConfigError(f"redis.namespace must be a non-empty word, not {namespace!r}")
    if "namespace" not in table and NAMESPACE_ENV not in environ:
        _warn_shared_namespace(url)
    return RedisSettings(
        url=url,
        namespace=namespace,
        socket_timeout_s=_positive(table, "socket_timeout_s", 0.5),
        connect_timeout_s=_positive(table, "connect_timeout_s", 0.5),
        max_connections=int(_positive(table, "max_connections", 8)),
        retry_interval_s=_non_negative(table, "retry_interval_s", 1.0, "redis"),
        cache_enabled=bool(cache.get("enabled", True))
        and bool(_table(settings, "cache").get("enabled", True)),
        cache_on_error=_on_error(cache, "cache", "local"),
        max_entry_bytes=int(_positive(cache, "max_entry_bytes", _MIB, "redis.cache")),
        local_max_entries=int(_positive(cache, "local_max_entries", 1024, "redis.cache")),
        local_max_bytes=int(_positive(cache, "local_max_bytes", 16 * _MIB, "redis.cache")),
        ratelimit_enabled=bool(ratelimit.get("enabled", True))
        and bool(shared_limits.get("enabled", True)),
        ratelimit_on_error=_on_error(ratelimit, "ratelimit", "fail_closed"),
        global_factor=global_factor,
        global_overrides=dict(_table(settings, "ratelimit", "global")),
        approvals_enabled=bool(approvals.get("enabled", True)),
    )
