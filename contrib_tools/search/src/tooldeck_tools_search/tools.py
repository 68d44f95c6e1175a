"""``web_search``: one query to the configured provider, results normalized.

Errors are answers: a provider that is rate limiting (429) or failing (5xx), or a connection
that fails, raises a *retryable* ``ToolFailure`` so the runner retries with backoff (the
tool's ``execution.retryable`` is on); a rejected key or another 4xx is not retryable; a
missing configuration names the environment variable to set.
"""

from __future__ import annotations

import email.utils
import functools
import json
import os
import ssl
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tooldeck_hookspecs import ErrorCode, ToolContext, ToolFailure

from ._normalize import normalize
from ._providers import PROVIDERS, Provider, choose_provider

if TYPE_CHECKING:  # httpx is imported on the first search, not with the pack
    import httpx

__all__ = [
    "retry_after_seconds",
    "DEFAULT_RESULTS",
    "MAX_BODY_BYTES",
    "MAX_QUERY_CHARS",
    "MAX_RESULTS",
    "REQUEST_TIMEOUT_S",
    "web_search",
]

DEFAULT_RESULTS = 5
MAX_RESULTS = 20
MAX_QUERY_CHARS = 400  # Brave's own limit; the others accept it too
#: A provider answer larger than this is refused rather than parsed (a sane one is < 100 kB).
MAX_BODY_BYTES = 4 * 1024 * 1024
#: Each HTTP request's time limit; the tool's execution timeout is above it.
REQUEST_TIMEOUT_S = 20.0

_USER_AGENT = "tooldeck-tools-search/0.1 (+https://pypi.org/project/tooldeck-tools-search/)"


def _arguments(arguments: Mapping[str, Any]) -> tuple[str, int, str | None]:
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, "query must be a non-empty string")
    query = " ".join(query.split())
    if len(query) > MAX_QUERY_CHARS:
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS, f"query is {len(query)} characters; at "
                          f"most {MAX_QUERY_CHARS}", suggestion="Use a shorter query: the key "
                          "words only.")
    count = arguments.get("max_results", DEFAULT_RESULTS)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_RESULTS:
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS,
                          f"max_results must be an integer from 1 to {MAX_RESULTS}")
    provider = arguments.get("provider")
    if provider is not None and provider not in PROVIDERS:
        raise ToolFailure(ErrorCode.INVALID_ARGUMENTS,
                          f"provider must be one of {', '.join(PROVIDERS)}")
    return query, count, provider


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header (seconds, or an HTTP date) in seconds from now."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _decode(body: bytes, content_type: str) -> str:
    """The body as text: UTF-8 (what JSON must be), else the declared charset, else cp1252."""
    try:
        return body.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    for part in content_type.split(";")[1:]:
        key, _, charset = part.strip().partition("=")
        if key.lower() == "charset" and charset:
            try:
                return body.decode(charset.strip().strip('"'))
            except (LookupError, UnicodeDecodeError):
                break
    # Not UTF-8 and no usable charset: cp1252 is what such services send in practice; the
    # replacement character marks anything else rather than failing the whole answer.
    return body.decode("cp1252", errors="replace")


def _status_error(provider: Provider, response: httpx.Response, excerpt: str) -> ToolFailure:
    status = response.status_code
    shown = f" ({excerpt[:200]})" if excerpt else ""
    if status == 429 or status >= 500:
        wait = retry_after_seconds(response.headers.get("retry-after"))
        details: dict[str, Any] = {"status": status, "provider": provider.name}
        if wait is not None:
            details["retry_after_s"] = wait
        what = "is rate limiting us" if status == 429 else "is failing"
        return ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            f"search provider {provider.name} {what} (HTTP {status}){shown}",
            retryable=True,
            retry_after_s=wait,
            suggestion="Wait a little and search again"
            + (f" (the provider asked for {wait:g} s)" if wait is not None else "")
            + "; or answer without searching.",
            details=details,
        )
    if status in (401, 403) and provider.key_env:
        return ToolFailure(
            ErrorCode.EXECUTION_ERROR,
            f"search provider {provider.name} rejected the API key (HTTP {status}){shown}",
            suggestion=f"Tell the user to check {provider.key_env}; answer without searching.",
            details={"status": status, "provider": provider.name},
        )
    return ToolFailure(
        ErrorCode.EXECUTION_ERROR,
        f"search provider {provider.name} refused the request (HTTP {status}){shown}",
        suggestion="Rephrase the query (plain words, no special syntax) and try again.",
        details={"status": status, "provider": provider.name},
    )


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Building a context loads the CA bundle (tens of ms): once per process, not per call.
    try:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:  # pragma: no cover - httpx depends on certifi
        return ssl.create_default_context()


async def _fetch(provider: Provider, query: str, count: int) -> tuple[httpx.Response, bytes]:
    import httpx  # here, not at import: loading the pack (tooldeck call, tools) stays cheap

    request = provider.request(query, count)
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S, connect=min(10.0, REQUEST_TIMEOUT_S))
    try:
        # API endpoints do not redirect; following a redirect would send the key elsewhere.
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False,
                                     verify=_ssl_context(),
                                     headers={"User-Agent": _USER_AGENT}) as client:
            async with client.stream(request.method, request.url, params=dict(request.params),
                                     headers=dict(request.headers), json=request.json) as response:
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > MAX_BODY_BYTES:
                        raise ToolFailure(
                            ErrorCode.TOO_LARGE,
                            f"search provider {provider.name} sent more than "
                            f"{MAX_BODY_BYTES // (1024 * 1024)} MiB; the answer was dropped",
                            suggestion="Ask for fewer results (max_results) or search again.",
                            details={"limit_bytes": MAX_BODY_BYTES},
                        )
                    chunks.append(chunk)
                return response, b"".join(chunks)
    except httpx.TimeoutException:
        raise ToolFailure(ErrorCode.TIMEOUT, f"search provider {provider.name} did not answer "
                          f"within {REQUEST_TIMEOUT_S:g} s", retryable=True,
                          suggestion="Search again in a moment, or with a simpler query.",
                          details={"provider": provider.name}) from None
    except httpx.HTTPError as exc:
        raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"could not reach search provider "
                          f"{provider.name}: {type(exc).__name__}: {exc}", retryable=True,
                          suggestion="The search service is unreachable; try again later or "
                          "answer without searching.",
                          details={"provider": provider.name}) from None


async def web_search(arguments: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
    """Search the web: ``{"results": [{title, url, snippet, source}], "provider": name}``."""
    query, count, requested = _arguments(arguments)
    provider = choose_provider(requested, os.environ)
    response, body = await _fetch(provider, query, count)
    text = _decode(body, response.headers.get("content-type", ""))
    if response.status_code != 200:
        raise _status_error(provider, response, " ".join(text.split()))
    try:
        answer = json.loads(text)
    except ValueError as exc:
        raise ToolFailure(ErrorCode.EXECUTION_ERROR, f"search provider {provider.name} answered "
                          f"with malformed JSON ({exc})", suggestion="The search service "
                          "answered unexpectedly; try again later or answer without searching.",
                          details={"provider": provider.name}) from None
    raw = provider.results(answer)
    results = normalize(raw, base_url=provider.endpoint, limit=count)
    return {"query": query, "provider": provider.name, "results": results,
            "count": len(results)}
