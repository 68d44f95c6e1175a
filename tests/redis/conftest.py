"""A real redis-server per test module (and a private one for outage tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from tooldeck_redis.testing import RedisServer, redis_server_binary

_MISSING = "redis-server not installed (apt-get install -y redis-server, or set REDIS_SERVER)"


@pytest.fixture(scope="module")
def shared_redis() -> Iterator[RedisServer]:
    """One server for a module's tests; each test flushes it through ``redis_url``."""
    if redis_server_binary() is None:
        pytest.skip(_MISSING)
    with RedisServer.start_new() as server:
        yield server


@pytest.fixture
def redis_url(shared_redis: RedisServer) -> str:
    """The shared server's URL, emptied before the test."""
    client = redis.Redis.from_url(shared_redis.url)
    client.flushall()
    client.close()
    return shared_redis.url


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A server this test alone uses: it may stop, restart, pause it."""
    if redis_server_binary() is None:
        pytest.skip(_MISSING)
    with RedisServer.start_new() as server:
        yield server
