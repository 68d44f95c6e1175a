"""Learning from use: recorded (task, tool) pairs lift the tool for similar tasks, persisted."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest
from tooldeck_faiss import RetrieverSettings
from tooldeck_faiss._history import SelectionHistory

from tooldeck_hookspecs import ConfigError


def rank(results, name):
    names = [r.name for r in results]
    return names.index(name) if name in names else len(names)


TASK = "crunch these numbers for me and tell me the total"
SIMILAR = "please crunch the numbers and give me the total"


async def test_history_lifts_the_used_tool_for_a_similar_task(make_retriever, handmade, tmp_path):
    retriever = make_retriever(history_file=str(tmp_path / "h.json"))
    await retriever.index(handmade)
    before = await retriever.search(SIMILAR, 20)
    assert rank(before, "python_exec") > 0, [r.name for r in before[:5]]
    await retriever.search(TASK, 15)  # the deck records against a task it searched
    retriever.record_use(TASK, "python_exec")
    after = await retriever.search(SIMILAR, 20)
    assert rank(after, "python_exec") == 0
    assert after[0].signals["history"] > 0
    # an unrelated task keeps its ranking
    weather = await retriever.search("What's the weather going to be like in Paris tomorrow?", 3)
    assert weather[0].name == "get_weather" and "history" not in weather[0].signals


async def test_history_file_is_private_bounded_and_reloaded(make_retriever, handmade, tmp_path):
    path = tmp_path / "state" / "history.json"
    retriever = make_retriever(history_file=str(path), history_max_records=3)
    await retriever.index(handmade)
    tasks = [f"task number {i}: crunch these numbers" for i in range(5)]
    for task in tasks:
        retriever.record_use(task, "python_exec")  # not searched: embedded on the next search
    retriever.record_use(TASK, "no_such_tool")  # unknown tools are not recorded
    await retriever.search(TASK, 5)
    await retriever.aclose()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    data = json.loads(path.read_text())
    assert [r["q"] for r in data["records"]] == tasks[-3:]  # the oldest went first
    assert all("v" in r for r in data["records"])

    again = make_retriever(history_file=str(path))
    await again.index(handmade)
    results = await again.search("task number 7: crunch these numbers", 5)
    assert results[0].name == "python_exec" and results[0].signals["history"] > 0


async def test_corrupt_or_foreign_history_file_is_ignored(make_retriever, handmade, tmp_path):
    path = tmp_path / "h.json"
    path.write_text("{not json")
    retriever = make_retriever(history_file=str(path))
    await retriever.index(handmade)
    assert len(retriever.history) == 0
    results = await retriever.search("What's the weather going to be like in Paris tomorrow?", 3)
    assert results[0].name == "get_weather"
    # records of another model keep their text and are embedded again before they count
    path.write_text(json.dumps({"format": 1, "model": "other", "records": [
        {"q": TASK, "tool": "python_exec", "n": 2, "t": 0, "v": "AAAA"}]}))
    other = make_retriever(history_file=str(path))
    await other.index(handmade)
    results = await other.search(SIMILAR, 3)
    assert results[0].name == "python_exec"


async def test_history_off(make_retriever, handmade):
    retriever = make_retriever(history=False)
    await retriever.index(handmade)
    retriever.record_use(TASK, "python_exec")
    assert retriever.history is None


def test_selection_history_counts_and_similarity(tmp_path):
    history = SelectionHistory(None, max_records=10)
    a = np.array([1.0, 0.0], dtype=np.float32)
    history.record("do a", "tool_a", a)
    history.record("do  a", "tool_a", a)  # same task after whitespace folding: counted
    history.record("do b", "tool_b", np.array([0.0, 1.0], dtype=np.float32))
    assert len(history) == 2
    assert history.as_rows()[0]["count"] == 2
    close = history.similar(np.array([[0.95, 0.31]], dtype=np.float32), threshold=0.6)
    assert set(close) == {"tool_a"} and 0 < close["tool_a"] <= 1.2
    history.forget(["tool_a"])
    assert history.similar(a[None, :], threshold=0.6) == {}


def test_history_curve_keeps_near_repeats_and_damps_similar_tasks():
    history = SelectionHistory(None, max_records=10)
    history.record("near", "near_tool", np.array([1.0, 0.0], dtype=np.float32))
    history.record("like", "like_tool", np.array([0.8, 0.6], dtype=np.float32))
    query = np.array([[0.995, 0.0998]], dtype=np.float32)  # cosine 0.995 and 0.856
    straight = history.similar(query, threshold=0.6)
    curved = history.similar(query, threshold=0.6, curve=1.5)
    assert straight["near_tool"] == pytest.approx(0.9875, abs=1e-3)
    assert straight["like_tool"] == pytest.approx(0.64, abs=1e-2)
    assert curved["near_tool"] == pytest.approx(0.9875 ** 1.5, abs=1e-3)  # most of its lift
    assert curved["like_tool"] == pytest.approx(0.64 ** 1.5, abs=1e-2)  # about 0.51
    # The setting is checked where it is read.
    for bad in (0, -1, float("nan"), "1.5", True):
        with pytest.raises(ConfigError, match="history_curve"):
            RetrieverSettings.from_mapping({"history_curve": bad})
    assert RetrieverSettings.from_mapping({"history_curve": 2}).history_curve == 2


def test_default_history_file(monkeypatch, tmp_path):
    from tooldeck_faiss._history import default_history_path

    monkeypatch.setenv("TOOLDECK_HISTORY_FILE", str(tmp_path / "h.json"))
    assert default_history_path() == str(tmp_path / "h.json")
    monkeypatch.setenv("TOOLDECK_HISTORY_FILE", "off")
    assert default_history_path() is None
    # a test run is not a deployment: no shared file unless one is named
    monkeypatch.delenv("TOOLDECK_HISTORY_FILE")
    assert default_history_path() is None
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_history_path() == str(tmp_path / "state" / "tooldeck" / "selection-history.json")


async def test_an_unknown_history_store_is_a_config_error(make_retriever, handmade):
    import pytest

    from tooldeck_hookspecs import ConfigError

    retriever = make_retriever(history_store="no_such_store")
    with pytest.raises(ConfigError, match="no_such_store"):
        await retriever.index(handmade)


async def test_memory_store_writes_no_file(make_retriever, handmade, tmp_path):
    path = tmp_path / "h.json"
    retriever = make_retriever(history_file=str(path), history_store="memory")
    await retriever.index(handmade)
    await retriever.search(TASK, 5)
    retriever.record_use(TASK, "python_exec")
    await retriever.aclose()
    assert not path.exists() and len(retriever.history) == 1
