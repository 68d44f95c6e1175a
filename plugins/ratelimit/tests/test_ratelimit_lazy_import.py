"""``limits`` loads at the first rate-limited call, or at start-up when a storage is configured.

Each check runs in a new process: a module any earlier test imported would hide an import here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tooldeck_hookspecs import ConfigError

PROBE = """
import json, sys
import trio
from tooldeck_hookspecs import RateLimit, SecurityConfig, SessionInfo, ToolDefinition
from tooldeck_ratelimit.plugin import tooldeck_rate_limiter

def tool(limit):
    return ToolDefinition(name="t", description="a tool", category="c",
                          security=SecurityConfig(rate_limit=limit))

seen = {}
limiter = tooldeck_rate_limiter({"ratelimit": {"global_factor": 2}})
seen["built"] = "limits" in sys.modules
session = SessionInfo(session_id="s", workdir="/tmp")
trio.run(limiter.hit, tool(None), session)
seen["unlimited_call"] = "limits" in sys.modules
outcomes = [trio.run(limiter.hit, tool(RateLimit(max_calls=1, window_s=60)), session).allowed
            for _ in range(2)]
seen["limited_call"] = "limits" in sys.modules
seen["outcomes"] = outcomes
trio.run(limiter.aclose)
print("PROBE=" + json.dumps(seen))
"""


def test_limits_is_imported_at_the_first_rate_limited_call() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("PROBE=")), None)
    assert line is not None, done.stderr[-2000:]
    assert json.loads(line.removeprefix("PROBE=")) == {
        "built": False,
        "unlimited_call": False,
        "limited_call": True,
        "outcomes": [True, False],
    }


def test_a_configured_storage_is_still_checked_at_start_up() -> None:
    from tooldeck_ratelimit import ToolRateLimiter

    with pytest.raises(ConfigError, match="storage_uri"):
        ToolRateLimiter(storage_uri="nosuchscheme://x")
    with pytest.raises(ConfigError, match="async"):
        ToolRateLimiter(storage_uri="async+memory://")
