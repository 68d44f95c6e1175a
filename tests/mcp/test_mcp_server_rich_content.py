"""``serve mcp`` hands rich results over as MCP content blocks (image, audio, resources).

The official client, in process, against the deck's MCP server: what a tool returns as
``tooldeck_hookspecs.content`` objects arrives as ``ImageContent``, ``AudioContent``,
``EmbeddedResource`` and ``ResourceLink`` blocks, after a text block that names each.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import trio
from mcp import Client, types
from tooldeck_mcp.server import DeckMcpServer

from tooldeck import ToolContext, tool
from tooldeck.testing import make_deck
from tooldeck_hookspecs.content import Audio, Image, Resource, ResourceLink

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))


@tool(category="media")
def make_chart() -> list:
    """Draw a chart of the sales figures."""
    return [
        "Sales went up.",
        Image(PNG, "image/png"),
        Audio(b"RIFF" + bytes(40), "audio/wav"),
        Resource("file:///w/data.csv", text="a,b\n1,2\n", mime_type="text/csv"),
        Resource("file:///w/raw.bin", data=b"\x00\x01", mime_type="application/octet-stream"),
        ResourceLink("file:///w/chart.png", "chart.png", mime_type="image/png"),
    ]


async def test_rich_results_arrive_as_mcp_content_blocks(workdir: Path) -> None:
    deck = make_deck(load_entry_points=["schema", "runner"], tools=[make_chart])
    async with deck:
        server = DeckMcpServer(deck, workdir=str(workdir))
        async with Client(server.server) as client:
            result = await client.call_tool("make_chart", {})
    assert not result.is_error
    kinds = [type(block) for block in result.content]
    assert kinds == [types.TextContent, types.ImageContent, types.AudioContent,
                     types.EmbeddedResource, types.EmbeddedResource, types.ResourceLink]
    text, image, audio, text_file, blob_file, link = result.content
    assert base64.b64decode(image.data) == PNG and image.mime_type == "image/png"
    assert audio.mime_type == "audio/wav"
    assert isinstance(text_file.resource, types.TextResourceContents)
    assert text_file.resource.text == "a,b\n1,2\n"
    assert isinstance(blob_file.resource, types.BlobResourceContents)
    assert base64.b64decode(blob_file.resource.blob) == b"\x00\x01"
    assert link.name == "chart.png"
    payload = json.loads(text.text)
    assert payload["data"][0] == "Sales went up."
    assert payload["data"][1]["$content"] == "image" and "data" not in payload["data"][1]


@tool(category="work")
async def long_job(steps: int, context: ToolContext) -> str:
    """Run a long job, reporting progress.

    Args:
        steps: how many steps
    """
    for step in range(1, steps + 1):
        context.emit({"progress": step, "total": steps, "message": f"step {step} of {steps}"})
        await trio.sleep(0.01)
    context.emit({"message": "finishing"})  # no number: the server keeps progress increasing
    return "done"


async def test_tool_progress_reaches_the_client_as_progress_notifications(workdir: Path) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    deck = make_deck(load_entry_points=["schema", "runner"], tools=[long_job])
    async with deck:
        server = DeckMcpServer(deck, workdir=str(workdir))
        async with Client(server.server) as client:
            result = await client.call_tool("long_job", {"steps": 3}, progress_callback=on_progress)
            silent = await client.call_tool("long_job", {"steps": 2})  # no token: no notices
    assert not result.is_error and not silent.is_error
    assert seen[:3] == [(1.0, 3.0, "step 1 of 3"), (2.0, 3.0, "step 2 of 3"),
                        (3.0, 3.0, "step 3 of 3")]
    assert len(seen) == 4 and seen[3][0] > 3.0 and seen[3][2] == "finishing"
