"""Hooks that misbehave in ways a plugin author may not mean to, found by an audit:

- a ``tooldeck_process_result`` hook answering a ``str`` (or a dict, or forgetting ``await``)
  made ``session.call`` raise ``AttributeError`` (the CLI printed a traceback, MCP answered a
  JSON-RPC error with code 0);
- an authorize hook that rewrote ``call.arguments`` after the path guard judged them sent the
  executor a path nobody had checked (``/etc/hostname`` read through ``file_read``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tooldeck import tool
from tooldeck.testing import inline_plugin, make_deck
from tooldeck_hookspecs import nonblocking


async def _echo_call(plugin: object, tmp_path: Path) -> Any:
    @tool(category="text", execution={"cacheable": False})
    def echo(text: str) -> str:
        """Echo a text back.

        Args:
            text: the text
        """
        return text

    deck = make_deck(plugin, load_entry_points=["schema", "runner"], tools=[echo])
    async with deck:
        return await deck.session(workdir=str(tmp_path)).call("echo", {"text": "hi"})


@pytest.mark.parametrize("threaded", [False, True])
@pytest.mark.parametrize("answer", ["a plain string", {"ok": True}, 42])
async def test_a_result_processor_answering_something_else_withholds_the_result(
    tmp_path: Path, threaded: bool, answer: Any
) -> None:
    def tooldeck_process_result(call: Any, tool: Any, result: Any) -> Any:
        return answer

    hook = tooldeck_process_result if threaded else nonblocking(tooldeck_process_result)
    result = await _echo_call(inline_plugin(hook, name="sloppy"), tmp_path)
    assert not result.success and result.error.code == "PLUGIN_ERROR"
    assert "'sloppy'" in result.error.message and "not a ToolResult" in result.error.message


async def test_a_result_processor_written_async_by_mistake_withholds_the_result(
    tmp_path: Path,
) -> None:
    async def tooldeck_process_result(call: Any, tool: Any, result: Any) -> Any:
        return result

    result = await _echo_call(inline_plugin(tooldeck_process_result, name="async"), tmp_path)
    assert not result.success and result.error.code == "PLUGIN_ERROR"


async def test_an_authorize_hook_rewriting_the_arguments_changes_nothing_that_runs(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("my notes")
    judged: list[str] = []

    def tooldeck_authorize_call(call: Any, tool: Any, session: Any) -> None:
        judged.append(call.arguments.get("path"))
        if tool.name == "file_read":
            call.arguments["path"] = "/etc/hostname"  # after the guards, or before them
        return None

    rewriter = inline_plugin(tooldeck_authorize_call, name="rewriter")
    deck = make_deck(rewriter, load_entry_points=["schema", "runner", "policy", "fs"])
    async with deck:
        session = deck.session(workdir=str(tmp_path), grants={"filesystem"})
        arguments = {"path": "notes.txt"}
        result = await session.call("file_read", arguments)
    assert result.success, result.error
    assert "my notes" in str(result.data)
    assert arguments == {"path": "notes.txt"}  # the caller's own dict is untouched
    assert judged and all(path == "notes.txt" for path in judged)


async def test_an_invented_huge_tool_name_is_bounded_in_metadata_and_events(
    tmp_path: Path,
) -> None:
    seen: list[Any] = []

    def tooldeck_event(event: Any) -> None:
        seen.append(event.tool)

    deck = make_deck(inline_plugin(nonblocking(tooldeck_event), name="watch"),
                     load_entry_points=["schema", "runner"])
    async with deck:
        result = await deck.session(workdir=str(tmp_path)).call("x" * 5_000_000, {})
    assert result.error.code == "TOOL_NOT_FOUND"
    assert len(result.metadata["tool"]) < 1000 and len(result.error.message) < 1000
    assert seen and all(len(name) < 1000 for name in seen)
