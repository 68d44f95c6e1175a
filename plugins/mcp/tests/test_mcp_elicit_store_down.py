"""A user's "no" over MCP elicitation holds when the approval store cannot record it.

With a shared store (Redis) down, ``session.deny`` raises. The server must still answer the
declined call with ``PERMISSION_DENIED`` (the call did not run, and the session refuses the id
from then on) instead of letting the store's error escape ``call_tool``.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from mcp import Client, types
from tooldeck_mcp.server import DeckMcpServer

from tooldeck import tool
from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck

RAN: list[str] = []


@tool(category="files", security={"level": "dangerous"})
def wipe(target: str) -> str:
    """Wipe a target file.

    Args:
        target: the file to wipe
    """
    RAN.append(target)
    return "wiped"


class StoreThatCannotDecide:
    """Creates approvals, and fails every decision (its backend went away meanwhile)."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    async def create(self, *, session_id: str, tool: str, arguments_hash: str,
                     ttl_s: float) -> str:
        return f"apr_{next(self._ids)}"

    async def resolve(self, approval_id: str, approved: bool, *,
                      session_id: str | None = None) -> bool:
        raise ConnectionError("approval backend unreachable")

    async def consume(self, *, approval_id: str, session_id: str, tool: str,
                      arguments_hash: str) -> bool:
        raise ConnectionError("approval backend unreachable")


async def test_a_declined_call_is_refused_when_the_store_cannot_record_the_denial(
    tmp_path: Path,
) -> None:
    RAN.clear()
    deck = make_deck(
        inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever(), name="keywords"),
        inline_plugin(tooldeck_approval_store=lambda settings: StoreThatCannotDecide(),
                      name="flaky-store"),
        load_entry_points=["schema", "runner", "policy"],
        tools=[wipe],
        config={"mcp": {"confirm": "elicit"}, "session": {"grants": ["files"]}},
    )
    asked: list[str] = []

    async def user(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    async with deck:
        server = DeckMcpServer(deck, workdir=str(tmp_path))
        async with Client(server.server, mode="legacy", elicitation_callback=user) as client:
            first = await client.call_tool("wipe", {"target": "a.txt"})
            second = await client.call_tool("wipe", {"target": "b.txt"})  # still serving
    for result in (first, second):
        assert result.structured_content is not None
        assert result.structured_content["error"]["code"] == "PERMISSION_DENIED"
        assert "decline" in result.structured_content["error"]["message"]
    assert len(asked) == 2
    assert RAN == []
