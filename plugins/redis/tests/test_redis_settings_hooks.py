"""Settings parsing and the provider hooks' on/off switch (no server needed)."""

from __future__ import annotations

import pytest
from tooldeck_redis import URL_ENV, RedisApprovalStore, RedisCache, mask_url, redis_settings
from tooldeck_redis import plugin as redis_plugin

from tooldeck_hookspecs import ConfigError


def test_without_a_url_every_provider_returns_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    settings = {"redis": {"cache": {"on_error": "local"}}}
    assert redis_settings(settings) is None
    assert redis_plugin.tooldeck_cache(settings) is None
    assert redis_plugin.tooldeck_rate_limiter(settings) is None
    assert redis_plugin.tooldeck_approval_store(settings) is None


def test_the_url_comes_from_the_environment_when_the_table_has_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(URL_ENV, "redis://127.0.0.1:1/0")
    parsed = redis_settings({})
    assert parsed is not None and parsed.url == "redis://127.0.0.1:1/0"
    assert isinstance(redis_plugin.tooldeck_cache({}), RedisCache)
    assert isinstance(redis_plugin.tooldeck_approval_store({}), RedisApprovalStore)
    # The table wins over the environment.
    table = redis_settings({"redis": {"url": "redis://127.0.0.1:2/0"}})
    assert table is not None and table.url == "redis://127.0.0.1:2/0"


def test_defaults_and_per_stage_switches() -> None:
    parsed = redis_settings(
        {
            "redis": {"url": "redis://127.0.0.1:1/0", "ratelimit": {"enabled": False}},
            "cache": {"enabled": False},
            "ratelimit": {"global_factor": 3, "global": {"web_search": 7}},
        }
    )
    assert parsed is not None
    assert (parsed.cache_on_error, parsed.ratelimit_on_error) == ("local", "fail_closed")
    assert parsed.socket_timeout_s == 0.5
    assert not parsed.cache_enabled and not parsed.ratelimit_enabled and parsed.approvals_enabled
    assert parsed.global_factor == 3 and parsed.global_overrides == {"web_search": 7}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"url": "http://127.0.0.1:6379"}, "redis.url"),
        ({"url": "redis://x", "cache": {"on_error": "ignore"}}, "redis.cache.on_error"),
        ({"url": "redis://x", "approvals": {"on_error": "local"}}, "redis.approvals.on_error"),
        ({"url": "redis://x", "socket_timeout_s": 0}, "redis.socket_timeout_s"),
        ({"url": "redis://x", "cache": {"max_entry_bytes": -1}}, "redis.cache.max_entry_bytes"),
    ],
)
def test_malformed_settings_fail_at_start_up_naming_the_key(
    table: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        redis_settings({"redis": table})


def test_passwords_never_appear_in_urls_shown() -> None:
    assert mask_url("redis://user:s3cret@127.0.0.1:6379/0") == "redis://user:***@127.0.0.1:6379/0"
    assert mask_url("rediss://:s3cret@[::1]:6380/2") == "rediss://:***@[::1]:6380/2"
    assert mask_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    with pytest.raises(ConfigError) as info:
        redis_settings({"redis": {"url": "http://user:s3cret@host"}})
    assert "s3cret" not in str(info.value)
