"""The search providers: how each one is asked, and where its results sit in its answer.

A provider is configured by environment variables only (keys never live in configuration files):

============  ===================================  ==========================================
provider      needs                                endpoint (override)
============  ===================================  ==========================================
``searxng``   ``SEARXNG_URL`` (the instance)       ``GET {SEARXNG_URL}/search?format=json``
``brave``     ``BRAVE_API_KEY``                    ``GET`` ``BRAVE_SEARCH_URL`` (Brave's API)
``tavily``    ``TAVILY_API_KEY``                   ``POST`` ``TAVILY_URL`` (Tavily's API)
============  ===================================  ==========================================

``TOOLDECK_SEARCH_PROVIDER`` picks one; otherwise the first configured one in the order above.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from tooldeck_hookspecs import ErrorCode, ToolFailure

__all__ = [
    "BRAVE_DEFAULT_URL",
    "ENV_PROVIDER",
    "PROVIDERS",
    "TAVILY_DEFAULT_URL",
    "Provider",
    "RawResult",
    "Request",
    "choose_provider",
]

#: Environment variable naming the provider to use (searxng, brave or tavily).
ENV_PROVIDER = "TOOLDECK_SEARCH_PROVIDER"
BRAVE_DEFAULT_URL = "https://api.search.brave.com/res/v1/web/search"
TAVILY_DEFAULT_URL = "https://api.tavily.com/search"


@attrs.frozen(kw_only=True)
class Request:
    """One HTTP request to a provider."""

    method: str
    url: str
    params: Mapping[str, str] = attrs.field(factory=dict)
    headers: Mapping[str, str] = attrs.field(factory=dict)
    json: Mapping[str, Any] | None = None


@attrs.frozen(kw_only=True)
class RawResult:
    """A result as the provider gave it (title and snippet may hold HTML)."""

    title: str
    url: str
    snippet: str


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _items(answer: Any, *path: str) -> list[Any]:
    """``answer[path...]`` as a list; ``ToolFailure`` when the answer has another shape."""
    node = answer
    for key in path:
        if not isinstance(node, Mapping):
            raise _shape_error(path)
        node = node.get(key, [])
        if node is None:
            node = []
    if not isinstance(node, list):
        raise _shape_error(path)
    return node


def _shape_error(path: tuple[str, ...]) -> ToolFailure:
    return ToolFailure(
        ErrorCode.EXECUTION_ERROR,
        f"the search provider answered JSON without a {'.'.join(path)} list",
        suggestion="The search service answered unexpectedly; try again later or ask the user "
        "to check the search provider's configuration.",
    )


@attrs.frozen(kw_only=True)
class Provider:
    """A configured provider: its name, where it lives, the key and where it came from."""

    name: str
    endpoint: str
    key: str | None = attrs.field(default=None, repr=False)
    key_env: str | None = None

    def request(self, query: str, max_results: int) -> Request:
        """The HTTP request for ``query``."""
        if self.name == "searxng":
            return Request(method="GET", url=self.endpoint,
                           params={"q": query, "format": "json"},
                           headers={"Accept": "application/json"})
        if self.name == "brave":
            return Request(method="GET", url=self.endpoint,
                           params={"q": query, "count": str(max_results)},
                           headers={"Accept": "application/json",
                                    "X-Subscription-Token": self.key or ""})
        return Request(method="POST", url=self.endpoint,
                       json={"query": query, "max_results": max_results},
                       headers={"Accept": "application/json",
                                "Authorization": f"Bearer {self.key or ''}"})

    def results(self, answer: Any) -> list[RawResult]:
        """The results in a decoded JSON answer, in the provider's order."""
        if self.name == "brave":
            items, snippet_key = _items(answer, "web", "results"), "description"
        else:
            items, snippet_key = _items(answer, "results"), "content"
        out: list[RawResult] = []
        for item in items:
            if not isinstance(item, Mapping):
                continue
            out.append(RawResult(title=_text(item.get("title")), url=_text(item.get("url")),
                                 snippet=_text(item.get(snippet_key))))
        return out


_SETUP = (
    "Web search is not set up here. Tell the user to set one of SEARXNG_URL (a SearXNG "
    "instance), BRAVE_API_KEY or TAVILY_API_KEY; meanwhile answer without searching."
)


def _provider(name: str, env: Mapping[str, str]) -> Provider | None:
    if name == "searxng":
        base = env.get("SEARXNG_URL", "").strip()
        return Provider(name=name, endpoint=base.rstrip("/") + "/search") if base else None
    if name == "brave":
        key = env.get("BRAVE_API_KEY", "").strip()
        url = env.get("BRAVE_SEARCH_URL", "").strip() or BRAVE_DEFAULT_URL
        return Provider(name=name, endpoint=url, key=key, key_env="BRAVE_API_KEY") if key else None
    if name == "tavily":
        key = env.get("TAVILY_API_KEY", "").strip()
        url = env.get("TAVILY_URL", "").strip() or TAVILY_DEFAULT_URL
        return Provider(name=name, endpoint=url, key=key, key_env="TAVILY_API_KEY") if key else None
    return None


#: Provider names, in the order the first configured one is picked.
PROVIDERS = ("searxng", "brave", "tavily")
_NEEDS = {"searxng": "SEARXNG_URL", "brave": "BRAVE_API_KEY", "tavily": "TAVILY_API_KEY"}


def choose_provider(requested: str | None, env: Mapping[str, str]) -> Provider:
    """The provider for a call: the one asked for, ``TOOLDECK_SEARCH_PROVIDER``, or the first
    configured. ``ToolFailure`` naming the environment variable to set when there is none."""
    name = requested or env.get(ENV_PROVIDER, "").strip().lower() or None
    if name is not None:
        if name not in PROVIDERS:
            raise ToolFailure(
                ErrorCode.INVALID_ARGUMENTS if requested else ErrorCode.EXECUTION_ERROR,
                f"unknown search provider {name!r}; known: {', '.join(PROVIDERS)}",
                suggestion="Leave provider out to use the configured one."
                if requested else f"Tell the user to fix {ENV_PROVIDER}.",
            )
        provider = _provider(name, env)
        if provider is None:
            raise ToolFailure(
                ErrorCode.EXECUTION_ERROR,
                f"search provider {name!r} is not configured: set {_NEEDS[name]}",
                suggestion=f"Tell the user to set {_NEEDS[name]}"
                + (", or leave provider out to use the configured one." if requested else "."),
                details={"provider": name, "missing_env": _NEEDS[name]},
            )
        return provider
    for candidate in PROVIDERS:
        provider = _provider(candidate, env)
        if provider is not None:
            return provider
    raise ToolFailure(
        ErrorCode.EXECUTION_ERROR,
        "no web search provider is configured (set SEARXNG_URL, BRAVE_API_KEY or "
        "TAVILY_API_KEY)",
        suggestion=_SETUP,
        details={"missing_env": ["SEARXNG_URL", "BRAVE_API_KEY", "TAVILY_API_KEY"]},
    )
