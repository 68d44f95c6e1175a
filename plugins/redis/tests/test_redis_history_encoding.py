"""Tasks the shared selection history must carry whatever their text: a lone surrogate (valid in
a JSON request, "\\ud800") failed every exchange of the process with UnicodeEncodeError, and the
history then shared nothing for the rest of its life."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import redis
from tooldeck_redis.history import RedisHistoryStore

pytest.importorskip("tooldeck_faiss")
from tooldeck_faiss import SelectionHistory

PREFIX = "enc:history:default:"
ODD = "read the file \ud800 please"


def _history(url: str) -> tuple[SelectionHistory, RedisHistoryStore]:
    store = RedisHistoryStore(url, prefix=PREFIX, model_id="m", max_records=100,
                              retry_interval_s=0.0)
    return SelectionHistory(store=store, model_id="m", retry_interval_s=0.0), store


def _tasks(history: SelectionHistory) -> set[tuple[str, str]]:
    return {(row["query"], row["tool"]) for row in history.as_rows()}


def test_a_task_with_a_lone_surrogate_is_shared_and_breaks_nothing(redis_url: str) -> None:
    writer, store = _history(redis_url)
    vector = np.ones(4, np.float32) / 2
    writer.record("read my notes", "file_read", vector)
    assert writer.sync(force=True)
    writer.record(ODD, "file_read", vector)
    for i in range(3):
        writer.record(f"other user task {i}", "web_search")
        assert writer.sync(force=True)
    stats = writer.statistics()
    assert not stats.store_down and stats.store_errors == 0
    # Another process sees every record, the odd task exactly as it was written.
    reader, other = _history(redis_url)
    assert reader.sync(force=True)
    assert (ODD, "file_read") in _tasks(reader)
    assert len(_tasks(reader)) == 5
    # Forgetting its tool drops it too (the server-side script reads the escaped record).
    store.forget(["file_read"])
    client = redis.Redis.from_url(redis_url)
    assert client.hlen(PREFIX + "rec") == 3
    client.close()
    for made in (store, other):
        made.close()


def test_a_use_the_store_cannot_encode_is_dropped_alone(redis_url: str) -> None:
    from tooldeck_faiss import HistoryRow

    _, store = _history(redis_url)
    bad: Any = HistoryRow(query="fine task", tool="file_read", count=1,
                          vector=np.array(["not", "numbers"]))
    good = HistoryRow(query="another task", tool="web_search", count=1)
    rows, _ = store.exchange([bad, good], 0.0)
    assert {(r.query, r.tool) for r in rows} == {("another task", "web_search")}
    store.close()
