"""State files an operator's machine can damage: the embedding cache and the use history.

Each is damaged on disk the way a crash, a full disk, another tooldeck or a planted file would
leave it, then read back through a real deck (real model, real FAISS, real files): the deck
keeps selecting, one warning names the file, the bad file is set aside, nothing valid is lost
and nothing is read whole when it is huge.
"""

from __future__ import annotations

import base64
import json
import logging
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from tooldeck_faiss._history import SelectionHistory
from tooldeck_faiss._store import EmbeddingStore
from tooldeck_faiss._text import tool_texts

from tooldeck.testing import make_deck
from tooldeck_hookspecs import ToolDefinition

TOOLS = [
    ToolDefinition(
        name=name,
        description=description,
        category="api",
        parameters={"type": "object", "properties": {"x": {"type": "string"}}},
        execute=lambda x="": x,
    )
    for name, description in [
        ("get_weather", "Current weather conditions and forecast for a city."),
        ("send_email", "Send an email message to a recipient."),
        ("convert_currency", "Convert an amount of money between currencies."),
        ("python_exec", "Execute a Python snippet and return what it prints."),
    ]
]
WEATHER = "what's the weather in Rome tomorrow"


def _deck(cache: Path, history: Path | None = None):
    return make_deck(
        load_entry_points=["schema", "runner", "faiss"],
        tools=TOOLS,
        config={"faiss": {
            "cache_dir": str(cache),
            "history_file": str(history) if history else None,
            "history_store": "file",
            "second_encoder": "none",  # the MiniLM store is the same code, and faster to test
        }},
    )


async def _select(deck, query=WEATHER):
    async with deck:
        hand = await deck.session().select(query, limit=3)
        stats = deck.retriever.statistics()
    return hand.names, stats


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """A cache folder holding the catalog's vectors, written by a real deck."""
    import trio

    cache = tmp_path_factory.mktemp("warm") / "cache"
    names, stats = trio.run(_select, _deck(cache))
    assert names[0] == "get_weather"
    assert stats.texts_embedded == len(tool_texts(TOOLS, summary=True)[0])
    (model_dir,) = cache.iterdir()
    return cache, model_dir.name


@pytest.fixture
def cache(warm_cache, tmp_path):
    """A private copy of the warm cache: (cache folder, the model's folder in it)."""
    import shutil

    src, model = warm_cache
    dst = tmp_path / "cache"
    shutil.copytree(src, dst)
    return dst, dst / model


def _warnings(caplog, word):
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and word in r.getMessage()]


# ---------------------------------------------------------------- the embedding cache


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "directory"])
async def test_a_damaged_chunk_is_set_aside_and_the_valid_ones_still_load(
    cache, damage, caplog
):
    """A truncated or empty chunk (a crash mid-write) raised EOFError/BadZipFile out of the
    index build: the filter stage failed and every hand was empty. A garbage one sorted first
    ended the load loop: the valid chunks after it were never read, and the whole catalog was
    embedded again at every start."""
    folder, model_dir = cache
    (valid,) = model_dir.glob("chunk-*.npz")
    bad = model_dir / "chunk-000.npz"  # sorted before the valid chunk
    if damage == "empty":
        bad.write_bytes(b"")
    elif damage == "truncated":
        bad.write_bytes(valid.read_bytes()[:1000])
    elif damage == "garbage":
        bad.write_bytes(bytes(range(256)) * 4)
    else:
        bad.mkdir()
    names, stats = await _select(_deck(folder))
    assert names and names[0] == "get_weather"
    # nothing valid lost
    assert stats.texts_embedded == 0
    assert stats.cache_hits == len(tool_texts(TOOLS, summary=True)[0])
    assert not bad.exists() and (model_dir / "chunk-000.npz.corrupt").exists()
    assert len(_warnings(caplog, str(bad))) == 1


@pytest.mark.parametrize("kind", ["dimension", "nan", "not_unit", "strings", "one_dim"])
async def test_a_chunk_of_wrong_vectors_is_never_trusted(cache, kind, caplog):
    """Vectors of another size or dtype for the catalog's keys crashed the index build
    (broadcast error); NaN, scalar or non-unit vectors were indexed as they were."""
    folder, model_dir = cache
    (valid,) = model_dir.glob("chunk-*.npz")
    with np.load(valid) as data:
        keys, good = data["keys"], data["vectors"]
    wrong = {
        "dimension": np.ones((len(keys), 100), np.float32) / 10,
        "nan": np.full(good.shape, np.nan, np.float32),
        "not_unit": np.ones(good.shape, np.float64),
        "strings": np.array([["a"] * good.shape[1]] * len(keys)),
        "one_dim": np.ones(len(keys), np.float32),
    }[kind]
    bad = model_dir / "chunk-zzz.npz"  # read last: its vectors would win
    np.savez(bad, keys=keys, vectors=wrong)
    async with _deck(folder) as deck:
        hand = await deck.session().select(WEATHER, limit=3)
        retriever = deck.retriever
        full = np.stack([retriever._index.reconstruct(i) for i in range(len(TOOLS))])
        stored = np.vstack([full, retriever._views])  # the summary view's vectors too
    assert hand.names[0] == "get_weather"
    assert np.isfinite(stored).all()
    np.testing.assert_allclose(np.linalg.norm(stored, axis=1), 1.0, atol=1e-4)
    assert set(map(tuple, stored.round(5))) == set(map(tuple, good.round(5)))
    assert (model_dir / "chunk-zzz.npz.corrupt").exists()
    assert len(_warnings(caplog, str(bad))) == 1


def _inflating_chunk(path: Path, nbytes: int) -> None:
    """A valid npz whose vectors member inflates to ``nbytes`` (a few MB on disk)."""
    keys = np.asarray([f"{i:064x}" for i in range(4)], dtype="U64")
    rows = nbytes // (384 * 4)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        with zf.open("keys.npy", "w") as fh:
            np.lib.format.write_array(fh, keys)
        with zf.open("vectors.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array_header_1_0(
                fh, {"descr": "<f4", "fortran_order": False, "shape": (rows, 384)}
            )
            block, left = bytes(1 << 24), rows * 384 * 4
            while left > 0:
                fh.write(block[: min(left, len(block))])
                left -= len(block)


def test_a_2gb_chunk_is_not_read_whole(tmp_path, caplog):
    """A chunk inflating to 2 GB was read whole into memory (4.2 GB peak, 16 s), then the
    load loop stopped and the valid chunk after it was lost."""
    store_dir = tmp_path / "m"
    store_dir.mkdir()
    _inflating_chunk(store_dir / "chunk-000.npz", 2 << 30)
    key = "a" * 64
    vector = np.full((1, 384), 1 / np.sqrt(384), np.float32)
    EmbeddingStore(tmp_path, "m").put_many([key], vector)
    tracemalloc.start()
    try:
        found = EmbeddingStore(tmp_path, "m").get_many([key], dim=384, unit=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"peak {peak:,} bytes"
    assert list(found) == [key]
    assert (store_dir / "chunk-000.npz.corrupt").exists()
    assert len(_warnings(caplog, "chunk-000.npz")) == 1


# ---------------------------------------------------------------- the use history


TASK = "crunch these numbers for me and tell me the total"
SIMILAR = "please crunch the numbers and give me the total"


async def _learn(folder: Path, history: Path) -> None:
    async with _deck(folder, history) as deck:
        await deck.session().select(TASK, limit=3)
        deck.retriever.record_use(TASK, "python_exec")


@pytest.mark.parametrize("damage", ["truncated", "directory", "foreign", "huge"])
async def test_a_damaged_history_file_is_set_aside_not_overwritten(
    cache, tmp_path, damage, caplog
):
    """A damaged history file was dropped silently, then replaced at the next save; a huge
    one was read whole first (2 GB: 4.2 GB peak and 19 s at every start)."""
    folder, _ = cache
    path = tmp_path / "state" / "history.json"
    path.parent.mkdir()
    if damage == "truncated":
        path.write_text('{"format": 1, "model": "x", "records": [{"q": "a", "to')
    elif damage == "directory":
        path.mkdir()
    elif damage == "foreign":
        path.write_text('["not", "a", "history"]')
    else:
        with path.open("wb") as fh:
            fh.truncate(2 << 30)  # sparse: costs no disk
    before = None if damage in ("directory", "huge") else path.read_bytes()
    tracemalloc.start()
    try:
        await _learn(folder, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 512 << 20, f"peak {peak:,} bytes"
    (aside,) = path.parent.glob("history.json.corrupt-*")
    if before is not None:
        assert aside.read_bytes() == before  # kept for the operator, byte for byte
    assert len(_warnings(caplog, str(path))) == 1
    assert [r["q"] for r in json.loads(path.read_text())["records"]] == [TASK]


async def test_a_newer_tooldecks_history_file_is_left_alone(cache, tmp_path, caplog):
    folder, _ = cache
    path = tmp_path / "history.json"
    text = json.dumps({"format": 2, "records": {"a": 1}})
    path.write_text(text)
    await _learn(folder, path)
    assert path.read_text() == text
    assert len(_warnings(caplog, str(path))) == 1


async def test_one_damaged_vector_does_not_silence_the_valid_records(cache, tmp_path):
    """The matrix took its size from the newest record: one damaged row of another size
    loaded last left every valid record out, and the history lifted nothing."""
    folder, _ = cache
    path = tmp_path / "history.json"
    await _learn(folder, path)
    data = json.loads(path.read_text())
    damaged = base64.b64encode(np.ones(7, np.float16).tobytes()).decode()
    data["records"].append({"q": "zzz unrelated", "tool": "send_email", "n": 1, "t": 0,
                            "v": damaged})
    path.write_text(json.dumps(data))
    async with _deck(folder, path) as deck:
        hand = await deck.session().select(SIMILAR, limit=3)
        hits = await deck.retriever.search(SIMILAR, 3)
    assert hand.names[0] == "python_exec" and len(hits) == 3
    assert hits[0].name == "python_exec" and hits[0].signals.get("history", 0) > 0


@pytest.mark.parametrize("field", ["infinite_vector", "huge_count"])
async def test_damaged_numbers_never_give_a_tool_an_infinite_lift(cache, tmp_path, field):
    """An infinite component in a stored vector, or a count of 10**40, gave the recorded tool
    an infinite history lift: first in every hand that came near the record."""
    folder, _ = cache
    path = tmp_path / "history.json"
    await _learn(folder, path)
    data = json.loads(path.read_text())
    (row,) = data["records"]
    row["tool"] = "send_email"  # a tool that has nothing to do with the task
    if field == "infinite_vector":
        vector = np.frombuffer(base64.b64decode(row["v"]), np.float16).copy()
        vector[np.argmax(np.abs(vector))] *= np.float16(np.inf)
        row["v"] = base64.b64encode(vector.tobytes()).decode()
    else:
        row["n"] = 10**40
    path.write_text(json.dumps(data))
    async with _deck(folder, path) as deck:
        await deck.session().select(SIMILAR, limit=4)  # indexes the catalog
        hits = await deck.retriever.search(SIMILAR, 4)
    lifts = [h.signals.get("history", 0.0) for h in hits]
    assert len(hits) == 4 and all(np.isfinite(h.score) for h in hits)
    assert all(np.isfinite(lift) and lift < 10 for lift in lifts), lifts


def test_history_save_is_whole_under_two_writers(tmp_path):
    """Two histories (two processes' worth) saving in turn leave one whole, parseable file."""
    path = tmp_path / "h.json"
    a, b = SelectionHistory(path, model_id="m"), SelectionHistory(path, model_id="m")
    for i in range(20):
        a.record(f"task a {i}", "python_exec", np.ones(4, np.float32) / 2)
        b.record(f"task b {i}", "send_email", np.ones(4, np.float32) / 2)
        a.save()
        b.save()
        data = json.loads(path.read_text())
        assert data["format"] == 1 and len(data["records"]) == i + 1
    assert not list(tmp_path.glob(".history-*"))
