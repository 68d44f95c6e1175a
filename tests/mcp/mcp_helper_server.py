"""A tiny MCP server written with the official SDK, launched over stdio by the bridge tests.

Run as ``python mcp_helper_server.py``. Its tools cover what the bridge maps: a read-only hint, a
destructive hint, no hints, structured output, a tool error, and the server's pid (so a test can
kill it mid-session).
"""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("tooldeck-test-helper")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def add(a: int, b: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": a + b}


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def wipe_records(table: str) -> str:
    """Delete every record of a table (pretend)."""
    return f"wiped {table}"


@server.tool(name="server-pid", annotations=ToolAnnotations(read_only_hint=True))
def server_pid() -> int:
    """The process id of this server."""
    return os.getpid()


@server.tool()
def explode(reason: str) -> str:
    """Always fails with the given reason."""
    raise ToolError(f"exploded: {reason}")


@server.tool()
def nap(seconds: float) -> str:
    """Sleep, then answer (for timeouts)."""
    time.sleep(seconds)
    return "awake"


@server.tool()
async def slow_steps(steps: int, ctx: Context) -> str:
    """Work in steps, reporting progress after each."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
    return "finished"


@server.tool()
def tiny_picture() -> Image:
    """A 1x1 PNG."""
    return Image(data=PNG_1X1, format="png")


PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


if __name__ == "__main__":
    server.run("stdio")
