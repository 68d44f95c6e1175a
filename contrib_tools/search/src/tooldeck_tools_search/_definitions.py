"""The ToolDefinition of ``web_search``: schema and description written for a model."""

from __future__ import annotations

from tooldeck_hookspecs import ExecutionConfig, SecurityConfig, SecurityLevel, ToolDefinition

from . import tools
from ._providers import PROVIDERS
from .tools import DEFAULT_RESULTS, MAX_QUERY_CHARS, MAX_RESULTS

__all__ = ["WEB_SEARCH", "definitions"]

WEB_SEARCH = ToolDefinition(
    name="web_search",
    version="1.0.0",
    category="search",
    description=(
        "Search the web and get the top results, each with title, url, a short snippet and "
        "its source site. Use it to find current information, documentation, news or pages "
        "you do not know the address of; then open a result with a browser or fetch tool to "
        f"read it. Returns at most max_results results (default {DEFAULT_RESULTS})."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS,
                      "description": "What to search for, in plain words, e.g. 'trio "
                      "structured concurrency tutorial'."},
            "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS,
                            "default": DEFAULT_RESULTS,
                            "description": "How many results to return."},
            "provider": {"type": "string", "enum": list(PROVIDERS),
                         "description": "Search service to use; leave it out to use the "
                         "configured one."},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    # Reads public search results with keys the operator set: safe. network: a sandbox (if
    # one is ever asked for) must let it out.
    security=SecurityConfig(level=SecurityLevel.SAFE, network=True),
    # Results change slowly; ten minutes of caching saves quota. 429/5xx/timeouts are retried
    # by the runner with backoff (1 s, 2 s, 4 s).
    execution=ExecutionConfig(timeout_s=tools.REQUEST_TIMEOUT_S + 10, retryable=True,
                              max_retries=3, cacheable=True, cache_ttl_s=600.0,
                              max_output_bytes=200_000),
    execute=tools.web_search,
    entrypoint="tooldeck_tools_search.tools:web_search",
    call_style="mapping",
    tags=("search", "web", "internet", "google", "lookup", "find", "news"),
)


def definitions() -> tuple[ToolDefinition, ...]:
    """The tools of the pack."""
    return (WEB_SEARCH,)
