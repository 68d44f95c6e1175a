"""Without a Redis URL the plugin loads only its settings: no client, cache, limiter or approvals.

Runs in a new process: a module any earlier test imported would hide an import here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json, sys
from tooldeck_redis import plugin
settings = {}
provided = [plugin.tooldeck_cache(settings), plugin.tooldeck_rate_limiter(settings),
            plugin.tooldeck_approval_store(settings)]
heavy = ("redis", "limits", "tooldeck_ratelimit", "tooldeck_redis._client",
         "tooldeck_redis._cache", "tooldeck_redis._limiter", "tooldeck_redis._approvals")
print("PROBE=" + json.dumps({"provided": [p is not None for p in provided],
                             "loaded": [m for m in heavy if m in sys.modules]}))
import tooldeck_redis
tooldeck_redis.RedisConnection  # the package's names still resolve (on first use)
print("LATER=" + json.dumps("tooldeck_redis._client" in sys.modules))
"""


def test_without_a_url_no_provider_module_is_imported() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TOOLDECK_REDIS_URL"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False,
        env=env,
    )
    lines = dict(x.split("=", 1) for x in done.stdout.splitlines() if "=" in x)
    assert "PROBE" in lines, done.stderr[-2000:]
    assert json.loads(lines["PROBE"]) == {"provided": [False, False, False], "loaded": []}
    assert json.loads(lines["LATER"]) is True
