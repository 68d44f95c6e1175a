"""The core against a second audit round: stale verdicts on dealt tools, names with a final
newline, schemas edited after registration, blank tasks, hand sizes, Gemini's schema subset,
an alias that outlived its reason, and text the CLI showed as markup. Real Deck (schema,
runner, policy) with the test keyword retriever, unless a test says otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from tooldeck import ToolDefinition
from tooldeck.adapters import export_tool, gemini_schema
from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck
from tooldeck_hookspecs import Exclusion

RAN: list[str] = []


def _tool(name: str, category: str, description: str, **extra: Any) -> ToolDefinition:
    def execute(arguments: dict[str, Any], context: Any) -> str:
        RAN.append(name)
        return f"ran {name}"

    return ToolDefinition(name=name, description=description, category=category,
                          execute=execute, parameters={"type": "object", "properties": {}},
                          **extra)


def _retriever() -> object:
    return inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever(), name="kw")


TOOLS = [_tool("wipe_billing", "billing", "wipe billing records"),
         _tool("read_notes", "notes", "read notes records")]


def _deck(*plugins: object, tools: list[ToolDefinition] | None = None) -> Any:
    return make_deck(_retriever(), *plugins, load_entry_points=["schema", "runner", "policy"],
                     tools=tools if tools is not None else list(TOOLS))


# -- 1. a dealt tool is judged again when the session changes ---------------------------------


@pytest.mark.parametrize("how", ["add", "assign", "update"])
async def test_excluding_a_category_after_select_stops_a_dealt_tool(how: str) -> None:
    async with _deck() as deck:
        session = deck.session(grants={"billing", "notes"})
        hand = await session.select("wipe billing records")
        assert "wipe_billing" in hand.names
        if how == "add":
            session.excluded_categories.add("billing")
        elif how == "assign":
            session.excluded_categories = {"billing"}
        else:
            session.excluded_categories.update({"billing", "x"})
        RAN.clear()
        result = await session.call("wipe_billing", {})
        assert result.error is not None and result.error.code == "PERMISSION_DENIED", result
        assert RAN == []
        # Another dealt tool, still allowed, still runs.
        assert (await session.call("read_notes", {})).success


async def test_a_filter_reading_session_attributes_is_obeyed_after_they_change() -> None:
    seen: list[str] = []

    def tooldeck_filter_tools(query: str, candidates: Any, session: Any) -> list[Exclusion]:
        seen.append(query)
        if session.attributes.get("tenant") == "guest":
            return [Exclusion(name=t.name, reason="guests cannot wipe")
                    for t in candidates if t.category == "billing"]
        return []

    guard = inline_plugin(tooldeck_filter_tools, name="tenant-filter")
    async with _deck(guard) as deck:
        session = deck.session(grants={"billing", "notes"}, attributes={"tenant": "staff"})
        assert "wipe_billing" in (await session.select("wipe billing records")).names
        assert (await session.call("wipe_billing", {})).success
        before = len(seen)
        assert (await session.call("wipe_billing", {})).success
        assert len(seen) == before  # an unchanged session is not judged again
        session.attributes["tenant"] = "guest"
        result = await session.call("wipe_billing", {})
        assert result.error is not None and "guests cannot wipe" in result.error.message


async def test_a_tool_registered_again_differently_after_select_is_judged_again() -> None:
    async with _deck() as deck:
        session = deck.session(grants={"billing", "notes"}, excluded_categories={"secret"})
        assert "read_notes" in (await session.select("read notes records")).names
        await deck.remove_tools(["read_notes"])
        await deck.add_tools([_tool("read_notes", "secret", "read notes records")])
        result = await session.call("read_notes", {})
        assert result.error is not None and result.error.code == "PERMISSION_DENIED"


# -- 2. names with a final newline -------------------------------------------------


@pytest.mark.parametrize("name", ["web_fetch\n", "a\n", "read_notes\n"])
async def test_a_name_with_a_final_newline_is_refused_strictly(name: str) -> None:
    async with _deck() as deck:
        with pytest.raises(Exception) as raised:
            await deck.add_tools([_tool(name, "web", "fetch a page")])
        assert "snake_case" in str(raised.value)
        assert name not in deck.catalog


async def test_a_name_with_a_final_newline_is_repaired_leniently() -> None:
    async with _deck() as deck:
        await deck.add_tools([_tool("web_fetch\n", "web", "fetch a page")], lenient=True)
        assert "web_fetch" in deck.catalog and "web_fetch\n" not in deck.catalog.names()
        exported = export_tool(deck.catalog.get("web_fetch"), "openai")
        assert exported["function"]["name"] == "web_fetch"


# -- 4. the deck keeps its own copy of a schema ---------------------------------------------------


async def test_a_schema_edited_after_registration_changes_nothing() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"q": {"type": "string"}},
                              "required": ["q"]}
    tool = ToolDefinition(name="lookup", description="look a word up", category="notes",
                          parameters=schema, execute=lambda arguments, context: "ok")
    async with _deck(tools=[tool]) as deck:
        schema["properties"]["Bad Name!"] = {"type": "wat"}
        schema["required"].append("Bad Name!")
        kept = deck.catalog.get("lookup").parameters
        assert kept is not schema and "Bad Name!" not in kept["properties"]
        exported = export_tool(deck.catalog.get("lookup"), "openai")
        assert exported["function"]["parameters"]["required"] == ["q"]
        session = deck.session(grants={"notes"})
        assert (await session.call("lookup", {"q": "x"})).success


# -- 5. a blank task has no ranking to refuse by --------------------------------------------------


@pytest.mark.parametrize("task", ["", "   ", "\x00", "\n\t"])
async def test_a_blank_task_does_not_refuse_every_tool(task: str) -> None:
    async with _deck() as deck:
        session = deck.session(grants={"billing", "notes"}, excluded_categories={"billing"})
        hand = await session.select(task)
        assert hand.names == []
        assert (await session.call("read_notes", {})).success
        refused = await session.call("wipe_billing", {})  # the rules still judge
        assert refused.error is not None and refused.error.code == "PERMISSION_DENIED"


async def test_an_unrelated_tool_is_still_refused_for_a_real_task() -> None:
    async with _deck(tools=[*TOOLS, *(_tool(f"tool_{i}", "notes", f"do thing {i}")
                                      for i in range(60))]) as deck:
        deck.session().fallback_recall = 40
        session = deck.session(grants={"billing", "notes"})
        session.fallback_recall = 5
        await session.select("read notes records")
        result = await session.call("tool_59", {})
        assert result.error is not None and "not among" in result.error.message
        assert "Use one of the offered tools: read_notes" in (result.error.suggestion or "")


# -- 8. hand sizes -----------------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "error"), [(0, ValueError), (-3, ValueError),
                                              (float("inf"), ValueError),
                                              (float("nan"), ValueError), (2.5, ValueError),
                                              ("5", TypeError), (True, TypeError)])
async def test_select_refuses_a_limit_that_is_no_hand_size(limit: Any, error: type) -> None:
    async with _deck() as deck:
        with pytest.raises(error, match="limit"):
            await deck.session().select("read notes", limit=limit)


async def test_select_takes_whole_number_limits() -> None:
    async with _deck() as deck:
        assert len((await deck.session().select("notes records", limit=1.0)).names) == 1
        with pytest.raises(ValueError, match="max_tokens"):
            await deck.session().select("notes", max_tokens=-1)


# -- 6. Gemini's schema subset ---------------------------------------------------------------


def test_gemini_properties_only_on_objects_and_never_empty() -> None:
    out = gemini_schema({
        "type": "object",
        "properties": {
            "text": {"type": "string", "properties": {"x": {"type": "string"}},
                     "required": ["x"]},
            "untyped": {"properties": {"y": {"type": "integer"}}, "required": ["y", "z"]},
            "empty": {"type": "object", "properties": {}},
            "nullable": {"type": ["object", "null"], "properties": {"q": {"type": "string"}}},
        },
    })
    props = out["properties"]
    assert props["text"] == {"type": "string"}
    assert props["untyped"] == {"type": "object", "properties": {"y": {"type": "integer"}},
                                "required": ["y"]}
    assert props["empty"] == {"type": "object"}
    assert props["nullable"]["type"] == "object" and props["nullable"]["nullable"] is True

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node:
                assert node.get("type") == "object" and node["properties"], node
            for value in node.values():
                walk(value)

    walk(out)


# -- 7. an alias dies with the name it stood in for ----------------------------------------------


async def test_a_renamed_duplicate_does_not_take_over_the_removed_original() -> None:
    wiki = _tool("search", "notes", "search the wiki")
    web = _tool("search", "web", "search the web")
    async with _deck(tools=[wiki]) as deck:
        await deck.add_tools([web], lenient=True)
        assert "search_2" in deck.catalog
        await deck.remove_tools(["search"])
        session = deck.session(grants={"notes", "web"})
        RAN.clear()
        result = await session.call("search", {})
        assert result.error is not None and result.error.code == "TOOL_NOT_FOUND"
        assert RAN == []
        assert (await session.call("search_2", {})).success


# -- 3. the CLI shows text as text ---------------------------------------------------------------


def test_the_cli_shows_a_task_with_brackets_as_text(tmp_path: Any) -> None:
    env = {**os.environ, "TOOLDECK_HISTORY_FILE": "off", "HF_HUB_OFFLINE": "1"}
    ran = subprocess.run(
        [sys.executable, "-m", "tooldeck", "select", "read the [/bold] file [link=x]y[/link]",
         "--limit", "3"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "[/bold]" in ran.stdout and "MarkupError" not in ran.stderr


def test_plain_escapes_markup_and_control_characters() -> None:
    from tooldeck.cli import _plain

    shown = _plain("a [/link] b \x1b[2J c \u202e d")
    assert "\x1b" not in shown and "\u202e" not in shown
    assert "\\[/link]" in shown


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5"])
def test_the_cli_refuses_a_limit_that_is_no_hand_size(value: str) -> None:
    from tooldeck.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["select", "task", "--limit", value])
