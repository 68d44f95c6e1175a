"""The framework adapters import without their frameworks and name the extra when used without
them (checked in a fresh interpreter where the frameworks are made unimportable)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import importlib, sys
    # Unimportable, as if not installed (even when the dev environment has them).
    for name in ["langchain", "langchain.agents", "langchain.agents.middleware",
                 "langchain_core", "langchain_core.tools", "langgraph", "langgraph.types",
                 "agents", "pydantic_ai", "llm"]:
        sys.modules[name] = None
    from tooldeck.integrations import langchain, llm, openai_agents, pydantic_ai

    uses = {
        "langchain": lambda: langchain.to_langchain_tools(None, []),
        "langchain-middleware": lambda: langchain.TooldeckMiddleware,
        "openai-agents": lambda: openai_agents.to_function_tools(None, []),
        "pydantic-ai": lambda: pydantic_ai.TooldeckToolset,
        "llm": lambda: llm.to_llm_tools(None, []),
        "llm-pending": lambda: llm.ApprovalPending,
    }
    for key, use in uses.items():
        try:
            use()
        except ImportError as exc:
            print(key, "->", exc)
        else:
            print(key, "-> no error")
    """
)


def test_modules_import_without_frameworks_and_name_the_extra():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    lines = dict(line.split(" -> ", 1) for line in out.strip().splitlines())
    expected = {
        "langchain": 'tooldeck[langchain]"',
        "langchain-middleware": 'tooldeck[langchain]"',
        "openai-agents": 'tooldeck[openai-agents]"',
        "pydantic-ai": 'tooldeck[pydantic-ai]"',
        "llm": 'tooldeck[llm]"',
        "llm-pending": 'tooldeck[llm]"',
    }
    for key, extra in expected.items():
        assert lines[key].endswith(f'pip install "{extra}'), (key, lines[key])


def test_a_wrong_session_is_a_clear_type_error():
    import pytest

    from tooldeck.integrations._bridge import SessionBridge

    with pytest.raises(TypeError, match="DeckPortal"):
        SessionBridge(object())  # type: ignore[arg-type]
