"""Values in Redis this deck did not write (another version, another deployment, garbage)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import redis
from tooldeck_redis import redis_settings

from tooldeck_hookspecs import (
    ConfigError,
    ExecutionConfig,
    RateLimit,
    SecurityConfig,
    ToolDefinition,
    cache_key,
)

tooldeck_testing = pytest.importorskip("tooldeck.testing")

runs: list[str] = []


def _echo(arguments: Any, context: Any) -> dict[str, Any]:
    runs.append(arguments["text"])
    return {"text": arguments["text"]}


OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
CACHED = ExecutionConfig(cacheable=True, cache_ttl_s=60)
LOOKUP = ToolDefinition(name="lookup", description="Cached echo.", category="api",
                        parameters=OBJECT, execution=CACHED, execute=_echo)
# Cacheable and rate limited: probed with the cache-and-window script instead of the plain get.
LIMITED = ToolDefinition(name="limited_lookup", description="Cached, limited echo.",
                         category="api", parameters=OBJECT, execution=CACHED, execute=_echo,
                         security=SecurityConfig(rate_limit=RateLimit(max_calls=100)))

FOREIGN = {
    # Far over max_entry_bytes (and over the tool's max_output_bytes): before, it was read
    # through the shared connection, decoded on the event loop and served to the model.
    "huge": json.dumps({"success": True, "data": "x" * 3_000_000, "error": None,
                        "metadata": {}}),
    # put only stores successful results: before, this failure was served as a cached answer.
    "failure": json.dumps({"success": False, "data": None, "metadata": {},
                           "error": {"code": "PERMISSION_DENIED", "message": "planted"}}),
    "garbage": "\xff not json",
}


@pytest.mark.parametrize("tool", [LOOKUP, LIMITED], ids=["get", "get_and_hit"])
@pytest.mark.parametrize("planted", list(FOREIGN))
async def test_a_foreign_entry_is_a_miss_and_the_tool_runs(
    redis_url: str, tmp_path: Path, tool: ToolDefinition, planted: str
) -> None:
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "cache", "ratelimit", "redis"],
        tools=[tool],
        config={"redis": {"url": redis_url}},
    )
    client = redis.Redis.from_url(redis_url)
    async with deck:
        session = deck.session(workdir=tmp_path)
        key = "tooldeck:cache:" + cache_key(tool, {"text": planted}, session.info())
        client.set(key, FOREIGN[planted])
        runs.clear()
        result = await session.call(tool.name, {"text": planted})
        assert result.success, result.error
        assert result.data == {"text": planted} and result.metadata["cached"] is False
        assert runs == [planted]
        # The deck's own result replaced the foreign one.
        again = await session.call(tool.name, {"text": planted})
        assert again.metadata["cached"] is True and again.data == {"text": planted}
    client.close()


@pytest.mark.parametrize(("table", "message"), [
    ({"socket_timeout_s": math.inf}, "redis.socket_timeout_s"),
    ({"socket_timeout_s": math.nan}, "redis.socket_timeout_s"),
    ({"connect_timeout_s": math.nan}, "redis.connect_timeout_s"),
    ({"retry_interval_s": "soon"}, "redis.retry_interval_s"),
    ({"retry_interval_s": -1}, "redis.retry_interval_s"),
    ({"cache": {"max_entry_bytes": math.inf}}, "redis.cache.max_entry_bytes"),
])
def test_non_finite_and_non_numeric_settings_fail_at_start_up(
    table: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        redis_settings({"redis": {"url": "redis://127.0.0.1:1", **table}})


@pytest.mark.parametrize("factor", [math.inf, math.nan, -2.0, "many"])
def test_the_shared_global_factor_is_checked_like_tooldeck_ratelimit(factor: Any) -> None:
    # inf failed every rate-limited call with OverflowError; NaN turned the bound off.
    with pytest.raises(ConfigError, match="ratelimit.global_factor"):
        redis_settings({"redis": {"url": "redis://127.0.0.1:1"},
                        "ratelimit": {"global_factor": factor}})


def test_a_malformed_shared_global_override_fails_at_start_up() -> None:
    from tooldeck_redis import RedisConnection, RedisRateLimiter

    parsed = redis_settings({"redis": {"url": "redis://127.0.0.1:1"},
                             "ratelimit": {"global": {"lookup": -1}}})
    assert parsed is not None
    with pytest.raises(ConfigError, match=r"ratelimit\.global\.lookup"):
        RedisRateLimiter(RedisConnection(parsed), parsed)
