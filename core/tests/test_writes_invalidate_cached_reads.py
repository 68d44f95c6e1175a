"""A write makes cached reads of what it wrote stale, whatever its outcome and whatever it lists.

Found by an audit: a ``shell_exec`` that wrote a file and then timed out left ``file_read``
serving the old content (``cached: True``) for the cache's TTL (invalidation ran on success
only); and ``browser_screenshot``, which writes into the workdir without listing ``file_read`` in
``invalidates``, left a cached read of the previous screenshot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tooldeck import tool
from tooldeck.testing import make_deck
from tooldeck_hookspecs import ToolContext, ToolFailure


def _write_then(outcome: str) -> Any:
    @tool(
        name=f"write_then_{outcome}",
        category="filesystem",
        security={"writes_workdir": True},
        execution={"cacheable": False, "timeout_s": 1, "max_retries": 0},
    )
    async def write(path: str, content: str, context: ToolContext) -> str:
        """Write a file in the working directory, then end as the test wants.

        Args:
            path: the file
            content: what to write
        """
        (Path(context.workdir) / path).write_text(content)
        if outcome == "fail":
            raise ToolFailure("EXECUTION_ERROR", "failed after writing")
        if outcome == "hang":
            await trio.sleep(30)  # past its 1 s timeout
        return "written"

    return write


@pytest.mark.parametrize("outcome", ["ok", "fail", "hang"])
async def test_a_write_that_does_not_list_the_reader_still_invalidates_it(
    tmp_path: Path, outcome: str
) -> None:
    (tmp_path / "notes.txt").write_text("old")
    deck = make_deck(
        load_entry_points=["schema", "runner", "policy", "fs", "cache"],
        tools=[_write_then(outcome)],
    )
    async with deck:
        session = deck.session(workdir=str(tmp_path), grants={"filesystem"})
        first = await session.call("file_read", {"path": "notes.txt"})
        again = await session.call("file_read", {"path": "notes.txt"})
        assert "old" in str(first.data) and again.metadata.get("cached") is True
        wrote = await session.call(f"write_then_{outcome}", {"path": "notes.txt", "content": "new"})
        assert wrote.success is (outcome == "ok"), wrote
        assert (tmp_path / "notes.txt").read_text() == "new"
        after = await session.call("file_read", {"path": "notes.txt"})
        assert "new" in str(after.data), after
        assert not after.metadata.get("cached")
