"""``tooldeck serve mcp`` over stdio, driven by the official MCP client as a subprocess."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp import types

DANGEROUS_WRITE = """
[session]
grants = ["filesystem"]

[tools.file_write.security]
level = "dangerous"
"""


async def test_stdio_lists_annotated_tools_and_runs_the_pipeline(
    workdir: Path, open_stdio: Any, mcp_payload: Any
) -> None:
    async with open_stdio(workdir) as session:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        assert {"file_read", "file_write", "list_dir"} <= set(listed)
        # faiss is disabled: no retriever, so no search tool; approvals are off by default.
        assert "search_tools" not in listed and "approve_call" not in listed
        read = listed["file_read"]
        assert read.annotations is not None
        assert read.annotations.read_only_hint is True
        assert read.annotations.destructive_hint is False
        assert read.input_schema["required"] == ["path"]
        write = listed["file_write"]
        assert write.annotations is not None and write.annotations.read_only_hint is False

        ok = await session.call_tool("file_read", {"path": "notes.txt"})
        assert not ok.is_error
        assert mcp_payload(ok)["data"]["content"] == "hello from the workdir\n"

        escape = await session.call_tool("file_read", {"path": "../secret.txt"})
        assert escape.is_error
        error = mcp_payload(escape)["error"]
        assert error["code"] == "PATH_NOT_ALLOWED"
        assert "outside" not in str(mcp_payload(escape).get("data"))

        invalid = await session.call_tool("file_read", {"path": 7, "colour": "red"})
        assert invalid.is_error
        error = mcp_payload(invalid)["error"]
        assert error["code"] == "INVALID_ARGUMENTS"
        assert {e["path"] for e in error["details"]["errors"]} == {"$.path", "$.colour"}

        # moderate and no grant in this session: refused by policy, not run.
        denied = await session.call_tool("file_write", {"path": "x.txt", "content": "x"})
        assert mcp_payload(denied)["error"]["code"] == "PERMISSION_DENIED"
        assert not (workdir / "x.txt").exists()

        missing = await session.call_tool("file_raed", {"path": "notes.txt"})
        assert missing.is_error
        error = mcp_payload(missing)["error"]
        assert error["code"] == "TOOL_NOT_FOUND"
        assert "file_read" in error["details"]["candidates"]


async def test_stdio_confirmation_required_without_approvals(
    workdir: Path, open_stdio: Any, mcp_payload: Any
) -> None:
    async with open_stdio(workdir, config=DANGEROUS_WRITE) as session:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        assert listed["file_write"].annotations.destructive_hint is True  # type: ignore[union-attr]
        assert "approve_call" not in listed
        asked = await session.call_tool("file_write", {"path": "out.txt", "content": "hi"})
        assert asked.is_error
        error = mcp_payload(asked)["error"]
        assert error["code"] == "CONFIRMATION_REQUIRED"
        assert error["details"]["approval_id"]
        assert "does not take approvals" in error["suggestion"]
        assert not (workdir / "out.txt").exists()
        # The model cannot approve its own call: there is no such tool.
        sneaky = await session.call_tool(
            "approve_call", {"approval_id": error["details"]["approval_id"]}
        )
        assert mcp_payload(sneaky)["error"]["code"] == "TOOL_NOT_FOUND"
        assert not (workdir / "out.txt").exists()


async def test_stdio_approve_call_when_configured(
    workdir: Path, open_stdio: Any, mcp_payload: Any
) -> None:
    config = DANGEROUS_WRITE + "\n[mcp]\nallow_approvals = true\n"
    async with open_stdio(workdir, config=config) as session:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        assert "approve_call" in listed
        asked = await session.call_tool("file_write", {"path": "out.txt", "content": "hi"})
        error = mcp_payload(asked)["error"]
        assert error["code"] == "CONFIRMATION_REQUIRED"
        approval_id = error["details"]["approval_id"]
        assert "approve_call" in error["suggestion"]

        done = await session.call_tool("approve_call", {"approval_id": approval_id})
        assert not done.is_error, mcp_payload(done)
        assert (workdir / "out.txt").read_text() == "hi"

        # An approval runs that exact call once.
        again = await session.call_tool("approve_call", {"approval_id": approval_id})
        assert mcp_payload(again)["error"]["code"] == "PERMISSION_DENIED"
        bad = await session.call_tool("approve_call", {})
        assert mcp_payload(bad)["error"]["code"] == "INVALID_ARGUMENTS"


async def test_stdio_confirmation_by_elicitation_asks_the_user(
    workdir: Path, open_stdio: Any, mcp_payload: Any
) -> None:
    asked: list[str] = []
    answers = iter(["accept", "decline"])

    async def user(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action=next(answers), content={"always": False})

    config = DANGEROUS_WRITE + '\n[mcp]\nconfirm = "elicit"\n'
    async with open_stdio(workdir, config=config, elicitation_callback=user) as session:
        done = await session.call_tool("file_write", {"path": "out.txt", "content": "yes"})
        assert not done.is_error, mcp_payload(done)
        assert (workdir / "out.txt").read_text() == "yes"
        assert "file_write" in asked[0] and '"content": "yes"' in asked[0]

        refused = await session.call_tool("file_write", {"path": "out.txt", "content": "no"})
        error = mcp_payload(refused)["error"]
        assert error["code"] == "PERMISSION_DENIED" and "decline" in error["message"]
        assert (workdir / "out.txt").read_text() == "yes"
        assert len(asked) == 2
