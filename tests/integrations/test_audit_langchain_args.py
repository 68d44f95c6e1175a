"""to_langchain_tools hands a tool every argument the model sent, whatever its name.

LangChain injects its own ``config`` and ``run_manager`` keywords into a tool's keyword
arguments; a deck tool parameter of either name must still reach the deck (not be replaced by
LangChain's objects), and input that is not an object must come back as the deck's structured
error, not as an exception that ends the agent loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langchain_core.tools")

from tooldeck import tool
from tooldeck.integrations.langchain import to_langchain_tools
from tooldeck.portal import DeckPortal, PortalSession
from tooldeck.testing import make_deck


@tool(category="text", execution={"cacheable": False})
def configure_service(config: str, run_manager: str = "", callbacks: str = "") -> str:
    """Apply a configuration value to a service.

    Args:
        config: the configuration value
        run_manager: who runs the change
        callbacks: where to report
    """
    return f"{config}|{run_manager}|{callbacks}"


@pytest.fixture(scope="module")
def deck_session() -> Iterator[PortalSession]:
    deck = make_deck(load_entry_points=["schema", "runner"], tools=[configure_service])
    with DeckPortal(deck) as portal:
        yield portal.session()


def _payload(output: Any) -> dict[str, Any]:
    return json.loads(getattr(output, "content", output))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_parameters_named_like_langchain_keywords_reach_the_tool(
    deck_session: PortalSession, mode: str
) -> None:
    [lc_tool] = to_langchain_tools(deck_session, ["configure_service"])
    arguments = {"config": "debug=1", "run_manager": "ops", "callbacks": "pager"}
    call = {"name": "configure_service", "args": arguments, "id": "call_1", "type": "tool_call"}
    output = lc_tool.invoke(call) if mode == "sync" else asyncio.run(lc_tool.ainvoke(call))
    assert _payload(output) == {"ok": True, "data": "debug=1|ops|pager"}
    assert output.status == "success"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_input_that_is_not_an_object_is_a_structured_error(
    deck_session: PortalSession, mode: str
) -> None:
    [lc_tool] = to_langchain_tools(deck_session, ["configure_service"])
    output = (
        lc_tool.invoke("debug=1") if mode == "sync" else asyncio.run(lc_tool.ainvoke("debug=1"))
    )
    payload = _payload(output)
    assert payload["ok"] is False
    assert payload["error"]["code"] == "INVALID_ARGUMENTS"
