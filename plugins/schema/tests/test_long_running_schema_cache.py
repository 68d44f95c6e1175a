"""A long-lived deck that keeps registering tools with new schemas keeps a bounded cache.

``Deck.add_tools`` (or an MCP server reloaded with changed schemas) compiles every new parameter
schema; the compiled validators were cached by schema text for the life of the process.
"""

from __future__ import annotations

import pytest
from tooldeck_schema import _compile, compile_schema

from tooldeck_hookspecs import ToolDefinition

tooldeck_testing = pytest.importorskip("tooldeck.testing")

#: A small bound for the test (the real one is ~1,000 entries): the behaviour, not the size.
_BOUND = 8


def echo(arguments, context):
    """Return the arguments."""
    return dict(arguments)


def _tool(round_: int) -> ToolDefinition:
    return ToolDefinition(
        name="reloaded", description=f"A tool registered again (round {round_}).",
        category="test", execute=echo,
        parameters={"type": "object", "additionalProperties": False,
                    "properties": {"mode": {"type": "string", "enum": [f"m{round_}", "same"]}}},
    )


async def test_schemas_registered_at_run_time_do_not_accumulate(tmp_path, monkeypatch):
    monkeypatch.setattr(_compile, "_CACHE_MAX", _BOUND, raising=False)
    deck = tooldeck_testing.make_deck(load_entry_points=["schema", "runner"])
    async with deck:
        session = deck.session(workdir=str(tmp_path))
        for round_ in range(60):
            await deck.remove_tools(["reloaded"])
            await deck.add_tools([_tool(round_)])
            assert len(_compile._cache) <= _BOUND
        # The newest definition's validator is the one in force, evicted entries or not.
        ok = await session.call("reloaded", {"mode": "m59"})
        assert ok.success, ok.error
        stale = await session.call("reloaded", {"mode": "m0"})
        assert stale.error is not None and stale.error.code == "INVALID_ARGUMENTS"


def test_recently_used_schemas_stay_compiled(monkeypatch):
    monkeypatch.setattr(_compile, "_CACHE_MAX", _BOUND, raising=False)
    monkeypatch.setattr(_compile, "_cache", type(_compile._cache)())
    hot = {"type": "object", "properties": {"hot": {"type": "integer"}}}
    first = compile_schema(hot)
    for n in range(3 * _BOUND):
        compile_schema({"type": "object", "properties": {f"p{n}": {"type": "integer"}}})
        assert compile_schema(hot) is first  # used all along: never the one pushed out
    assert len(_compile._cache) == _BOUND
