"""Load: 10,000 concurrent calls of mixed categories through the full pipeline (every installed
stage plugin), each answered exactly once, with in-flight calls per category never above the
category's limit."""

from __future__ import annotations

import collections
import random

import trio

from tooldeck import tool
from tooldeck.testing import make_deck

LIMITS = {"browser": 3, "shell": 5, "code": 4}
in_flight: collections.Counter[str] = collections.Counter()
peak: collections.Counter[str] = collections.Counter()
executions: collections.Counter[str] = collections.Counter()


async def _work(category: str, token: str) -> str:
    in_flight[category] += 1
    peak[category] = max(peak[category], in_flight[category])
    executions[token] += 1
    try:
        await trio.sleep(random.random() / 1000)
    finally:
        in_flight[category] -= 1
    return token


@tool(category="browser")
async def load_browse(token: str) -> str:
    """Browse (load test)."""
    return await _work("browser", token)


@tool(category="shell")
async def load_shell(token: str) -> str:
    """Run a command (load test)."""
    return await _work("shell", token)


@tool(category="code")
async def load_code(token: str) -> str:
    """Run code (load test)."""
    return await _work("code", token)


@tool(category="api")
async def load_api(token: str) -> str:
    """Call an API (load test)."""
    return await _work("api", token)


async def test_ten_thousand_concurrent_calls_answered_once_within_category_limits():
    tools = [load_browse, load_shell, load_code, load_api]
    deck = make_deck(
        load_entry_points=["schema", "runner", "policy", "cache", "ratelimit"],
        tools=tools,
        config={"runner": {"concurrency": LIMITS}},
    )
    answers: dict[str, object] = {}
    duplicates = []
    rng = random.Random(7)
    plan = [(f"t{i}", rng.choice(tools).__name__) for i in range(10_000)]
    async with deck:
        sessions = [deck.session() for _ in range(8)]

        async def one(index: int, token: str, name: str) -> None:
            result = await sessions[index % len(sessions)].call(name, {"token": token})
            if token in answers:
                duplicates.append(token)
            answers[token] = result

        async with trio.open_nursery() as nursery:
            for index, (token, name) in enumerate(plan):
                nursery.start_soon(one, index, token, name)
        stats = deck.executor.statistics()
    assert duplicates == []
    assert len(answers) == 10_000
    failed = {t: r.error for t, r in answers.items() if not r.success}
    assert failed == {}
    assert all(answers[t].data == t for t, _ in plan)
    assert set(executions.values()) == {1} and len(executions) == 10_000
    for category, limit in LIMITS.items():
        assert 1 <= peak[category] <= limit, (category, peak[category])
        assert stats[category].max_in_flight <= limit
    assert sum(stats[c].completed for c in ("browser", "shell", "code", "api")) == 10_000
