"""canonical_json, cache_key and ToolResult.with_metadata: the contract's small helpers."""

from __future__ import annotations

import json
import socket

import pytest

from tooldeck_hookspecs import (
    ExecutionConfig,
    SessionInfo,
    ToolDefinition,
    ToolError,
    ToolResult,
    cache_key,
    canonical_json,
    canonical_json_bytes,
)


def _tool(**execution: object) -> ToolDefinition:
    return ToolDefinition(
        name="read", description="reads", category="fs", execution=ExecutionConfig(**execution)
    )


def test_canonical_json_sorts_keys_at_every_level_and_has_no_spaces() -> None:
    value = {"b": [{"z": 1, "a": 2}], "a": {"y": None, "x": "é"}}
    text = canonical_json(value)
    assert text == '{"a":{"x":"é","y":null},"b":[{"a":2,"z":1}]}'
    assert json.loads(text) == value
    assert canonical_json_bytes(value) == text.encode("utf-8")


def test_canonical_json_never_raises_on_what_a_model_or_tool_may_send() -> None:
    # A lone surrogate and a 70-bit integer (orjson refuses both), non-string keys, a set.
    assert canonical_json("\ud800") == '"\\ud800"'
    assert canonical_json({"n": 2**70}) == f'{{"n":{2**70}}}'
    assert canonical_json({2: "b", 1: "a"}) == '{"1":"a","2":"b"}'
    assert canonical_json({"s": {3}}) == '{"s":"{3}"}'


def test_non_finite_numbers_never_share_bytes_with_null() -> None:
    # orjson writes NaN and Infinity as null, so {"x": NaN} and {"x": None} had one cache key.
    nulls = {canonical_json_bytes({"x": None, "y": [None]})}
    for odd in (float("nan"), float("inf"), float("-inf")):
        assert canonical_json_bytes({"x": odd, "y": [None]}) not in nulls
        assert canonical_json_bytes({"x": None, "y": [odd]}) not in nulls
        assert canonical_json_bytes({"x": None, "y": [{"z": (odd,)}]}) != canonical_json_bytes(
            {"x": None, "y": [{"z": (None,)}]})
    assert canonical_json({"x": None, "n": 1.5}) == '{"n":1.5,"x":null}'  # orjson's bytes kept


def test_host_context_keys_by_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    # file_read's results are the machine's files: a cache shared by several hosts (Redis) must
    # not answer one host's read with another's file under the same path.
    from tooldeck_hookspecs import model

    session = SessionInfo(session_id="s", workdir="/w")
    local = _tool(cache_context=("workdir", "host"))
    key = cache_key(local, {"path": "a"}, session)
    assert key == cache_key(local, {"path": "a"}, session)
    assert model.host_identity().startswith(socket.gethostname())
    monkeypatch.setitem(model.CONTEXT_EXTRAS, "host", lambda: "another-host/0123")  # type: ignore[index]
    assert cache_key(local, {"path": "a"}, session) != key
    assert cache_key(_tool(cache_context=("workdir",)), {"path": "a"}, session) == cache_key(
        _tool(cache_context=("workdir",)), {"path": "a"}, session)


def test_cache_key_ignores_key_order_and_tracks_name_version_arguments_and_context() -> None:
    session = SessionInfo(session_id="s", workdir="/w")
    other_dir = SessionInfo(session_id="s", workdir="/elsewhere")
    plain = _tool()
    key = cache_key(plain, {"path": "a", "lines": 3}, session)
    assert key.startswith("read@1.0.0:") and len(key.split(":")[1]) == 64
    assert key == cache_key(plain, {"lines": 3, "path": "a"}, session)
    assert key != cache_key(plain, {"lines": 4, "path": "a"}, session)
    # Context the result does not depend on is not part of the key...
    assert key == cache_key(plain, {"path": "a", "lines": 3}, other_dir)
    # ...and context it declares is.
    scoped = _tool(cache_context=("workdir",))
    assert cache_key(scoped, {"path": "a"}, session) != cache_key(scoped, {"path": "a"}, other_dir)
    newer = ToolDefinition(name="read", description="reads", category="fs", version="2.0.0")
    assert cache_key(newer, {"path": "a", "lines": 3}, session) != key


def test_with_metadata_merges_into_a_copy() -> None:
    error = ToolError.of("TIMEOUT", "slow")
    original = ToolResult(success=False, error=error, metadata={"a": 1})
    merged = original.with_metadata(b=2, a=3)
    assert merged.metadata == {"a": 3, "b": 2}
    assert original.metadata == {"a": 1}
    assert merged.error is error and merged.success is False


def test_canonical_json_writes_integers_too_long_to_print() -> None:
    # str() of an int past 4,300 digits raises ValueError, and json.dumps with it: a key of
    # such arguments must still be made, exact (two such numbers differ), and never raise.
    big = 10**5000
    one, other = canonical_json({"n": big}), canonical_json({"n": big + 1})
    assert one != other
    assert hex(big) in one
    assert canonical_json([big, "\ud800"]) != canonical_json([big + 1, "\ud800"])
    assert hex(big) in canonical_json({big: 1})  # as a key, too
    assert canonical_json({"n": 2**70}) == f'{{"n":{2**70}}}'  # printable ones stay numbers
