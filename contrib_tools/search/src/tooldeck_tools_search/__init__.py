"""tooldeck's web search tool pack: ``web_search`` over SearXNG, Brave Search or Tavily.

The provider and its key come from the environment (``SEARXNG_URL``, ``BRAVE_API_KEY``,
``TAVILY_API_KEY``, ``TOOLDECK_SEARCH_PROVIDER``); results come back normalized: plain-text
titles and snippets, absolute URLs, no duplicates, at most ``max_results``.
"""

from __future__ import annotations

from ._definitions import WEB_SEARCH, definitions
from ._normalize import MAX_SNIPPET_CHARS, MAX_TITLE_CHARS, normalize, strip_html
from ._providers import (
    BRAVE_DEFAULT_URL,
    ENV_PROVIDER,
    PROVIDERS,
    TAVILY_DEFAULT_URL,
    Provider,
    RawResult,
    choose_provider,
)
from .tools import (
    DEFAULT_RESULTS,
    MAX_BODY_BYTES,
    MAX_QUERY_CHARS,
    MAX_RESULTS,
    REQUEST_TIMEOUT_S,
    retry_after_seconds,
    web_search,
)

__all__ = [
    "BRAVE_DEFAULT_URL",
    "DEFAULT_RESULTS",
    "ENV_PROVIDER",
    "MAX_BODY_BYTES",
    "MAX_QUERY_CHARS",
    "MAX_RESULTS",
    "MAX_SNIPPET_CHARS",
    "MAX_TITLE_CHARS",
    "PROVIDERS",
    "REQUEST_TIMEOUT_S",
    "TAVILY_DEFAULT_URL",
    "WEB_SEARCH",
    "Provider",
    "RawResult",
    "choose_provider",
    "definitions",
    "normalize",
    "retry_after_seconds",
    "strip_html",
    "web_search",
]
