"""The selection history in Redis: shared by a deployment's processes, bounded, private to the
deployment, tied to the model id, and never in the way of a selection when Redis stalls.

Real parts: redis-server on 127.0.0.1, the real MiniLM model and FAISS retriever built through
tooldeck-faiss's own hook (the path a deck takes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import trio
from tooldeck_redis.history import RedisHistoryStore, history_store
from tooldeck_redis.testing import RedisServer

from tooldeck_hookspecs import ConfigError, ToolDefinition

pytest.importorskip("tooldeck_faiss")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TASK = "crunch these numbers for me and tell me the total"
SIMILAR = "please crunch the numbers and give me the total"
WEATHER = "What's the weather going to be like in Paris tomorrow?"


def _tool(name: str, description: str) -> ToolDefinition:
    return ToolDefinition(
        name=name, description=description, category="api",
        parameters={"type": "object", "properties": {"x": {"type": "string"}}},
    )


TOOLS = [
    _tool("file_read", "Read the contents of a text file."),
    _tool("send_email", "Send an email message to a recipient."),
    _tool("get_weather", "Current weather conditions and forecast for a city."),
    _tool("convert_currency", "Convert an amount of money between currencies."),
    _tool("summarize_text", "Summarize a long text into a few sentences."),
    _tool("query_database", "Run a SQL query against the database."),
    _tool("python_exec", "Execute a Python snippet and return what it prints."),
    _tool("web_search", "Search the web and return result titles and links."),
]


@pytest.fixture(scope="module")
def st_model() -> Any:
    from sentence_transformers import SentenceTransformer
    from tooldeck_faiss import default_model_path

    return SentenceTransformer(default_model_path(), device="cpu")


@pytest.fixture
def make_retriever(st_model: Any, tmp_path: Path) -> Iterator[Any]:
    """Retrievers as tooldeck-faiss's hook builds them from a deck configuration."""
    from tooldeck_faiss import FaissRetriever, RetrieverSettings

    made: list[Any] = []

    def make(url: str, *, faiss: dict[str, Any] | None = None, **redis_table: Any) -> Any:
        faiss_table = {"cache_dir": str(tmp_path / "cache"), "history_store": "redis",
                       "history_sync_s": 0, **(faiss or {})}
        config = {"redis": {"url": url, **redis_table}, "faiss": faiss_table}
        retriever = FaissRetriever(
            RetrieverSettings.from_mapping(faiss_table), model=st_model, config=config
        )
        made.append(retriever)
        return retriever

    yield make
    for retriever in made:
        if retriever._history is not None and retriever._history.store is not None:
            retriever._history.store.close()


def rank(results: list[Any], name: str) -> int:
    names = [r.name for r in results]
    return names.index(name) if name in names else len(names)


def lift(results: list[Any], name: str) -> float:
    """The history signal of ``name`` in ``results`` (0 when absent or not lifted)."""
    return next((r.signals.get("history", 0.0) for r in results if r.name == name), 0.0)


async def _deck_process(make: Any, url: str, **kw: Any) -> Any:
    retriever = make(url, **kw)
    await retriever.index(TOOLS)
    return retriever


async def test_two_decks_share_history_and_another_deployment_sees_nothing(
    make_retriever: Any, redis_url: str
) -> None:
    a = await _deck_process(make_retriever, redis_url)
    b = await _deck_process(make_retriever, redis_url)
    other = await _deck_process(make_retriever, redis_url, history={"deployment": "other"})
    before = await b.search(SIMILAR, 8)
    assert rank(before, "python_exec") > 0, [r.name for r in before]

    await a.search(TASK, 8)
    a.record_use(TASK, "python_exec")
    await a.search(WEATHER, 3)  # the next search of process A sends the use

    # B's next search brings A's use: python_exec is lifted (how far is the lift's curve,
    # measured on the open sets, not this test's business).
    after = await b.search(SIMILAR, 8)
    assert lift(after, "python_exec") > 0
    assert rank(after, "python_exec") < rank(before, "python_exec")
    assert b.history.statistics().store is not None and b.history.statistics().syncs >= 2

    # same Redis, same namespace, another deployment: nothing of A's history
    theirs = await other.search(SIMILAR, 8)
    assert all("history" not in r.signals for r in theirs) and len(other.history) == 0
    # and another namespace neither
    elsewhere = await _deck_process(make_retriever, redis_url, namespace="acme")
    assert all("history" not in r.signals for r in await elsewhere.search(SIMILAR, 8))

    client = redis.Redis.from_url(redis_url)
    keys = sorted(k.decode() for k in client.keys("*"))
    client.close()
    assert keys and all(k.startswith("tooldeck:history:default:") for k in keys), keys


async def test_the_bound_holds_across_processes_oldest_first(
    make_retriever: Any, redis_url: str
) -> None:
    faiss = {"history_max_records": 3}
    a = await _deck_process(make_retriever, redis_url, faiss=faiss)
    b = await _deck_process(make_retriever, redis_url, faiss=faiss)
    tasks = [f"task number {i}: crunch these numbers" for i in range(5)]
    for i, task in enumerate(tasks):
        (a if i % 2 else b).record_use(task, "python_exec")
        await trio.to_thread.run_sync(lambda: (a.history.sync(), b.history.sync()))
    client = redis.Redis.from_url(redis_url)
    prefix = "tooldeck:history:default:"
    assert client.zcard(prefix + "lru") == 3
    assert client.hlen(prefix + "rec") == 3 and client.hlen(prefix + "n") == 3
    stored = sorted(json.loads(v)["q"] for v in client.hvals(prefix + "rec"))
    assert stored == sorted(tasks[-3:])
    # the evicted records' vectors went with them
    assert client.hlen(prefix + "vec") <= 3
    client.close()
    await b.search("task number 9: crunch these numbers", 3)
    assert sorted(r["query"] for r in b.history.as_rows()) == sorted(tasks[-3:])


async def test_vectors_of_another_model_are_never_mixed(
    make_retriever: Any, redis_url: str, st_model: Any
) -> None:
    a = await _deck_process(make_retriever, redis_url)
    wrong = st_model.encode([WEATHER], normalize_embeddings=True)[0]
    foreign = RedisHistoryStore(
        redis_url, prefix="tooldeck:history:default:", model_id="another-model", max_records=10
    )
    from tooldeck_faiss import HistoryRow

    # Another model's process recorded the task with (what is to us) a meaningless vector.
    foreign.exchange([HistoryRow(query=TASK, tool="python_exec", count=1, vector=wrong)], 0)
    results = await a.search(SIMILAR, 8)
    # Had the foreign vector been taken, SIMILAR (far from WEATHER) would get no lift.
    assert lift(results, "python_exec") > 0
    rows, _ = foreign.exchange([], 0)
    assert rows[0].vector is not None
    assert float(rows[0].vector @ wrong) > 0.99  # its own vector, untouched
    await a.search(WEATHER, 3)  # A sends the vector it embedded, under its own model id
    client = redis.Redis.from_url(redis_url)
    fields = sorted(f.decode().split("|")[0] for f in client.hkeys("tooldeck:history:default:vec"))
    client.close()
    foreign.close()
    assert fields == sorted(["another-model", a.model_id])


async def test_a_stopped_redis_does_not_stall_selection(
    make_retriever: Any, own_redis: RedisServer
) -> None:
    a = await _deck_process(
        make_retriever, own_redis.url, history={"timeout_s": 0.2}, retry_interval_s=30
    )
    b = await _deck_process(make_retriever, own_redis.url)
    await a.search(TASK, 8)
    own_redis.pause()
    try:
        a.record_use(TASK, "python_exec")
        # A hang guard, not a timing assertion: the store's deadline is 0.2 s.
        with trio.fail_after(20):
            results = await a.search(SIMILAR, 8)
            for _ in range(5):
                await a.search(SIMILAR, 8)
        # selection went on with the records in memory
        assert lift(results, "python_exec") > 0
        stats = a.history.statistics()
        assert stats.store_down and stats.store_errors == 1  # skipped after the first failure
    finally:
        own_redis.resume()
    assert await trio.to_thread.run_sync(lambda: a.history.sync(force=True))
    assert not a.history.statistics().store_down
    # the use recorded during the outage reached the other process
    assert lift(await b.search(SIMILAR, 8), "python_exec") > 0


def test_settings_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "redis://127.0.0.1:1/0"
    monkeypatch.delenv("TOOLDECK_REDIS_URL", raising=False)
    assert history_store({}, model_id="m", max_records=5) is None
    assert history_store(
        {"redis": {"url": url, "history": {"enabled": False}}}, model_id="m", max_records=5
    ) is None
    for bad in ({"timeout_s": 0}, {"deployment": "a b"}, {"dep": "x"}):
        with pytest.raises(ConfigError):
            history_store({"redis": {"url": url, "history": bad}}, model_id="m", max_records=5)
    store = history_store(
        {"redis": {"url": "redis://u:secret@127.0.0.1:1/0", "namespace": "n"}},
        model_id="m", max_records=5,
    )
    assert store is not None and "secret" not in store.label
    assert store.prefix == "n:history:default:"
    store.close()


def test_tooldeck_call_imports_no_redis(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    drop = ("TOOLDECK_REDIS_URL", "TOOLDECK_CONFIG")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    argv = ["call", "file_read", '{"path": "notes.txt"}', "--workdir", str(tmp_path)]
    script = (
        "import contextlib, io, sys\n"
        "from tooldeck.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main({argv!r})\n"
        "print('PROBE', code, 'redis' in sys.modules, 'tooldeck_redis' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    probe = [line for line in done.stdout.splitlines() if line.startswith("PROBE")]
    assert probe, done.stderr[-2000:]
    # the redis plugin is loaded (tooldeck_redis imported), redis-py is not
    assert probe[0] == "PROBE 0 False True", probe


def _exec(arguments: Any, context: Any) -> Any:
    return "42"


async def test_a_call_in_one_deck_lifts_the_tool_in_another(redis_url: str, tmp_path: Path) -> None:
    """End to end through the core: select, call (the core's record_use), select elsewhere."""
    import attrs

    from tooldeck.testing import make_deck

    tools = [attrs.evolve(t, execute=_exec) for t in TOOLS]
    config = {
        "redis": {"url": redis_url},
        "faiss": {"cache_dir": str(tmp_path / "cache"), "history_store": "redis",
                  "history_sync_s": 0},
    }
    points = ["schema", "runner", "cache", "ratelimit", "faiss", "redis"]
    first = make_deck(load_entry_points=points, tools=tools, config=config)
    second = make_deck(load_entry_points=points, tools=tools, config=config)
    async with first, second:
        other = second.session(workdir=tmp_path)
        before = await other.select(SIMILAR, limit=8)
        session = first.session(workdir=tmp_path)
        hand = await session.select(TASK, limit=8)
        assert "python_exec" in [t.name for t in hand.tools]
        assert (await session.call("python_exec", {"x": "1 + 41"})).success
        await first.session(workdir=tmp_path).select(WEATHER, limit=3)  # sends the use
        after = await second.session(workdir=tmp_path).select(SIMILAR, limit=8)
        names = [t.name for t in after.tools]
        # Only the other deck's call can have moved it: same catalog, same query, new session.
        assert names.index("python_exec") < [t.name for t in before.tools].index("python_exec")
        assert after.scores["python_exec"] > before.scores["python_exec"] + 0.2


async def test_auto_picks_redis_when_a_url_is_configured(
    make_retriever: Any, redis_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "history.json"
    auto = await _deck_process(
        make_retriever, redis_url, faiss={"history_store": "auto", "history_file": str(path)}
    )
    await auto.search(TASK, 3)
    auto.record_use(TASK, "python_exec")
    await auto.aclose()
    assert auto.history.statistics().store is not None
    assert not path.exists()  # the store replaces the file
    client = redis.Redis.from_url(redis_url)
    assert client.zcard("tooldeck:history:default:lru") == 1
    client.close()
    # the file switched off means memory only, even with a URL (evaluation decks rely on it)
    off = await _deck_process(
        make_retriever, redis_url, faiss={"history_store": "auto", "history_file": None}
    )
    await off.search(SIMILAR, 3)
    assert off.history.statistics().store is None and len(off.history) == 0


def test_a_planted_row_with_an_infinite_vector_or_count_lifts_nothing(redis_url: str) -> None:
    """Whoever can write the shared Redis planted one row: an infinite vector component and a
    count of 10^15 made the tool rank first for half of all queries. The file loader already
    refused the same row."""
    import numpy as np
    from tooldeck_faiss._history import SelectionHistory
    from tooldeck_redis.history import _record_id

    prefix = "tooldeck:history:planted:"
    client = redis.Redis.from_url(redis_url)
    store = RedisHistoryStore(redis_url, prefix=prefix, model_id="m", max_records=100)
    rid = _record_id("anything", "shell_exec")
    bad = np.zeros(8, np.float16)
    bad[0] = np.inf
    client.hset(prefix + "rec", rid, json.dumps({"q": "anything", "tool": "shell_exec"}))
    client.hset(prefix + "n", rid, "999999999999999")
    client.zadd(prefix + "lru", {rid: 1})
    client.hset(prefix + "vec", "m|" + rid, bad.tobytes())
    history = SelectionHistory(None, model_id="m", store=store)
    history.sync(force=True)
    rows = history.as_rows()
    assert [r["tool"] for r in rows] == ["shell_exec"]
    assert rows[0]["count"] <= 1 << 31
    rng = np.random.default_rng(0)
    for _ in range(8):
        query = rng.normal(size=8).astype(np.float32)
        query /= np.linalg.norm(query)
        lifts = history.similar(query[None, :], threshold=0.6, curve=1.5)
        assert all(np.isfinite(v) for v in lifts.values()), lifts
