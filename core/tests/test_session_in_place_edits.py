"""A session's fields changed in place (``session.grants.discard("shell")``) take effect at the
next call, as the API methods and assignment do. Policy judges calls by a cached snapshot of the
session: an in-place edit used to be seen only when the snapshot happened to be rebuilt (after
some tool's first use in a turn), so a revoke written this way was obeyed by chance."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from tooldeck import ErrorCode, SecurityConfig, ToolDefinition
from tooldeck.testing import inline_plugin, make_deck

STAGES = ["schema", "runner", "policy"]


def _tools(runs: list[str]) -> list[ToolDefinition]:
    def touch(target: str) -> str:
        runs.append(target)
        return target

    def probe(target: str) -> str:
        return target

    def tool(name: str, category: str, execute: Any) -> ToolDefinition:
        return ToolDefinition(
            name=name,
            description=f"{name} a target.",
            category=category,
            parameters={
                "type": "object",
                "properties": {"target": {"type": "string"}},
                "required": ["target"],
            },
            security=SecurityConfig(level="moderate"),
            execute=execute,
            call_style="kwargs",
        )

    return [tool("touch", "filesystem", touch), tool("probe", "network", probe)]


def _deck(runs: list[str], hook: Any = None) -> Any:
    def tooldeck_register_tools(register: Any) -> None:
        for definition in _tools(runs):
            register(definition)

    plugins = [inline_plugin(tooldeck_register_tools, name="in-place-tools")]
    if hook is not None:
        plugins.append(hook)
    return make_deck(*plugins, load_entry_points=STAGES)


def _code(result: Any) -> Any:
    return result.error.code if result.error is not None else None


@pytest.mark.parametrize(
    "revoke",
    [
        lambda s: s.grants.discard("filesystem"),
        lambda s: s.grants.remove("filesystem"),
        lambda s: s.grants.clear(),
        lambda s: s.grants.difference_update({"filesystem"}),
        lambda s: s.grants.intersection_update({"network"}),
        lambda s: s.excluded_categories.add("filesystem"),
        lambda s: s.excluded_categories.update({"filesystem"}),
    ],
)
async def test_a_grant_taken_back_in_place_is_obeyed_at_the_next_call(revoke: Any) -> None:
    runs: list[str] = []
    async with _deck(runs) as deck:
        session = deck.session(grants=["filesystem", "network"])
        assert (await session.call("touch", {"target": "a"})).success
        # The same tool again in this turn: its snapshot is not rebuilt after this call (only a
        # tool's first use in a turn did that), so only the edit itself can make it so.
        assert (await session.call("touch", {"target": "b"})).success
        revoke(session)
        result = await session.call("touch", {"target": "c"})
        assert not result.success
        assert _code(result) in (ErrorCode.PERMISSION_DENIED, ErrorCode.CONFIRMATION_REQUIRED)
        assert runs == ["a", "b"]


async def test_a_grant_given_in_place_is_obeyed_at_the_next_call() -> None:
    runs: list[str] = []
    async with _deck(runs) as deck:
        session = deck.session(grants=[])
        refused = await session.call("touch", {"target": "a"})
        assert not refused.success
        session.grants.add("filesystem")
        assert (await session.call("touch", {"target": "b"})).success
        session.grants |= {"network"}  # augmented assignment: watched again afterwards
        assert (await session.call("probe", {"target": "c"})).success
        session.grants.discard("network")
        assert not (await session.call("probe", {"target": "d"})).success
        assert runs == ["b"]


async def test_attributes_changed_in_place_reach_policy_and_plugins_get_a_snapshot() -> None:
    seen: list[Any] = []

    def tooldeck_authorize_call(call: Any, tool: Any, session: Any) -> None:
        seen.append(session.attributes.get("tenant"))
        # A plugin writing into its snapshot: refused (the snapshot is shared with the hooks
        # after it; see test_audit_s39_frozen_definitions.py).
        with pytest.raises(TypeError, match="read-only"):
            session.attributes["scribbled"] = True

    hook = inline_plugin(tooldeck_authorize_call, name="attribute-reader")
    async with _deck([], hook) as deck:
        session = deck.session(grants=["filesystem"], attributes={"tenant": "a"})
        assert (await session.call("touch", {"target": "x"})).success
        session.attributes["tenant"] = "b"
        assert (await session.call("touch", {"target": "y"})).success
        assert seen == ["a", "b"]
        # The plugin's write reached neither its snapshot nor the session's attributes.
        assert "scribbled" not in session.attributes


async def test_watched_fields_copy_and_pickle_as_plain_containers() -> None:
    async with _deck([]) as deck:
        session = deck.session(grants=["filesystem"], attributes={"k": 1})
        for value, kind in ((session.grants, set), (session.attributes, dict)):
            assert type(copy.copy(value)) is kind
            assert type(pickle.loads(pickle.dumps(value))) is kind
            assert copy.deepcopy(value) == value
