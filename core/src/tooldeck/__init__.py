"""tooldeck: the tools layer of an LLM agent.

Load a deck from installed plugins, open a session per conversation, deal the model a hand of
tools for its task, and run its calls through validation, authorization, cache, rate limits and
guarded execution::

    import trio
    from tooldeck import Deck

    async def main():
        async with Deck.load() as deck:
            session = deck.session(workdir=".")
            hand = await session.select("read the README and summarize it")
            tools = hand.export("openai")
            result = await session.call("file_read", {"path": "README.md"})

    trio.run(main)

The contract (data model, error codes, markers) is re-exported from :mod:`tooldeck_hookspecs`.
"""

# First of all: under ``python -m tooldeck`` nothing may be imported from the current folder
# (a tool may have written a ``trio.py`` there). The imports below come after it on purpose, and
# this module has no ``from __future__`` line: that statement imports ``__future__``, which a
# planted ``__future__.py`` in the current folder would replace.
from ._cwd import drop_cwd_for_dash_m

drop_cwd_for_dash_m()

from tooldeck_hookspecs import (  # noqa: E402
    ArgumentProblem,
    Decision,
    ErrorCode,
    Event,
    Exclusion,
    ExecutionConfig,
    Preference,
    RateLimit,
    RateLimitOutcome,
    RegistrationError,
    ScoredTool,
    SecurityConfig,
    SecurityLevel,
    SessionInfo,
    StageMissingError,
    ToolCall,
    ToolContext,
    TooldeckError,
    ToolDefinition,
    ToolError,
    ToolFailure,
    ToolResult,
    hookimpl,
    observes,
    tool,
)

from ._config import Config, load_config  # noqa: E402
from ._deck import ConfirmCallback, ConfirmRequest, Deck, Hand, Session  # noqa: E402
from ._plugins import PluginInfo  # noqa: E402
from .adapters import FORMATS, ParsedCall, export_tools, parse_tool_calls, result_messages  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Deck",
    "Session",
    "Hand",
    "ConfirmRequest",
    "ConfirmCallback",
    "Config",
    "load_config",
    "PluginInfo",
    "FORMATS",
    "ParsedCall",
    "export_tools",
    "parse_tool_calls",
    "result_messages",
    "ArgumentProblem",
    "Decision",
    "ErrorCode",
    "Event",
    "ExecutionConfig",
    "Exclusion",
    "Preference",
    "RateLimit",
    "RateLimitOutcome",
    "RegistrationError",
    "ScoredTool",
    "SecurityConfig",
    "SecurityLevel",
    "SessionInfo",
    "StageMissingError",
    "ToolCall",
    "ToolContext",
    "ToolDefinition",
    "ToolError",
    "ToolFailure",
    "TooldeckError",
    "ToolResult",
    "hookimpl",
    "observes",
    "tool",
]
