"""canonical_json, cache_key and ToolResult.with_metadata: the contract's small helpers."""

from __future__ import annotations

import json

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
