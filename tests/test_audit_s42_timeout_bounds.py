"""Every ``timeout_s`` the configuration accepts for a tool is one its definition may have.

The configuration's check took ``[tools.NAME.execution] timeout_s`` up to 366 days, the schema
plugin's definition rule only up to one day: a deployment giving ``shell_exec`` two days passed
the first, then the shell pack was left out of the deck at registration (an inline tool: the
deck refused to start), and the message blamed the pack.
"""

from __future__ import annotations

import pytest

from tooldeck.testing import make_deck
from tooldeck_hookspecs import MAX_RATE_WINDOW_S, ConfigError, ToolDefinition

TWO_DAYS = 2 * 86400.0


def _plain(arguments: dict, context: object) -> str:
    return "ok"


PLAIN = ToolDefinition(name="plain_tool", description="A tool that answers ok at once.",
                       category="timing", execute=_plain)


@pytest.mark.parametrize("seconds", [TWO_DAYS, MAX_RATE_WINDOW_S], ids=["two-days", "366-days"])
async def test_a_long_configured_timeout_keeps_pack_and_inline_tools(seconds: float) -> None:
    config = {"tools": {"file_read": {"execution": {"timeout_s": seconds}},
                        "plain_tool": {"execution": {"timeout_s": seconds}}}}
    deck = make_deck(config=config, load_entry_points=["schema", "runner", "policy", "fs"],
                     tools=[PLAIN])
    async with deck:
        tools = {tool.name: tool for tool in deck.catalog}
        assert tools["file_read"].execution.timeout_s == seconds
        assert tools["plain_tool"].execution.timeout_s == seconds
        result = await deck.session(grants={"timing"}).call("plain_tool", {})
        assert result.success and result.data == "ok", result.error


def test_past_the_bound_the_configuration_says_so_at_load() -> None:
    config = {"tools": {"plain_tool": {"execution": {"timeout_s": MAX_RATE_WINDOW_S + 1}}}}
    with pytest.raises(ConfigError, match="timeout_s"):
        make_deck(config=config, load_entry_points=["schema", "runner", "policy"], tools=[PLAIN])
