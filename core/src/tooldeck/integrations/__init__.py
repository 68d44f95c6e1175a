"""Adapters for the agent frameworks users already have, one module per framework.

Each module imports its framework lazily (importing the module needs nothing; using it without
the framework raises an ImportError naming the extra to install) and maps the deck's approvals
onto the framework's own human-in-the-loop mechanism:

========================================  ====================================  ==================
module                                    what                                  extra
========================================  ====================================  ==================
:mod:`tooldeck.integrations.langchain`    ``TooldeckMiddleware``,               ``langchain``
                                          ``to_langchain_tools(session, hand)``
:mod:`tooldeck.integrations.openai_agents`  ``to_function_tools(session, hand)``  ``openai-agents``
:mod:`tooldeck.integrations.pydantic_ai`  ``TooldeckToolset(session)``          ``pydantic-ai``
:mod:`tooldeck.integrations.llm`          ``to_llm_tools(session, hand)``       ``llm``
========================================  ====================================  ==================

Every adapter takes a :class:`tooldeck.portal.PortalSession` (``DeckPortal(deck).session(...)``),
which works from threads and asyncio (the frameworks' own worlds), while the deck stays on its trio
loop. See ``docs/integrations.md``.
"""

from __future__ import annotations

__all__: list[str] = []
