"""The URL guard of the browser, at the network level.

The policy plugin checks the ``url`` argument before a call; but a page then loads subresources,
follows redirects, runs scripts and opens WebSockets, none of which that check sees. Playwright's
``page.route`` cannot close the gap: redirects after the first request are not routed (measured
with Chromium 156 and Playwright 1.65: a 302 to an internal address was followed unchecked, even
when the first response was fulfilled by the handler). So every context of the browser talks to
the network through a small local proxy (:mod:`._proxy`) that checks each connection here, resolves
the host itself and connects only to addresses that passed: redirects, subresources, WebSockets
and DNS rebinding included.

The rules are those of ``tooldeck_policy.check_url``, with the same allow-list:
``TOOLDECK_URL_ALLOW`` and the session's ``url_allow`` attribute. An entry may carry a port
(``127.0.0.1:8000``, ``[::1]:8000``, ``*.corp.example:443``): it then lets through that port only;
an entry without one lets through every port of its host. Every check here is made for the port
the connection goes to (the proxy's ``CONNECT host:port`` or the request's URL).
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import os
import socket
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from tooldeck_policy import ENV_DNS_TIMEOUT, parse_allow_list
from tooldeck_policy import check_url as _policy_check_url

__all__ = [
    "ENV_ALLOW",
    "allowed_addresses",
    "allow_list_for",
    "check_url",
    "forget_session_allow",
    "remember_session_allow",
    "scheme_problem",
]

#: The policy plugin's environment variable for extra allowed hosts/CIDRs (same name).
ENV_ALLOW = "TOOLDECK_URL_ALLOW"


_SESSION_ALLOW: OrderedDict[str, tuple[str, ...]] = OrderedDict()
_SESSION_ALLOW_LOCK = threading.Lock()
_MAX_REMEMBERED = 4096


def _split(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = raw.split(",")
    return tuple(s for s in (str(x).strip() for x in raw) if s)


def remember_session_allow(session_id: str, raw: Any) -> None:
    """Record a session's ``url_allow`` attribute (the tool's context does not carry it)."""
    values = _split(raw)
    with _SESSION_ALLOW_LOCK:
        if values:
            _SESSION_ALLOW[session_id] = values
            _SESSION_ALLOW.move_to_end(session_id)
            while len(_SESSION_ALLOW) > _MAX_REMEMBERED:
                _SESSION_ALLOW.popitem(last=False)
        else:
            _SESSION_ALLOW.pop(session_id, None)


def forget_session_allow(session_id: str) -> None:
    """Drop a closed session's ``url_allow`` (kept otherwise until 4,096 newer ones came)."""
    with _SESSION_ALLOW_LOCK:
        _SESSION_ALLOW.pop(session_id, None)


def allow_list_for(session_id: str) -> tuple[str, ...]:
    """The hosts/CIDRs a session's pages may reach although internal: env plus session."""
    with _SESSION_ALLOW_LOCK:
        session = _SESSION_ALLOW.get(session_id, ())
    return tuple(sorted({*_split(os.environ.get(ENV_ALLOW, "")), *session}))


def scheme_problem(url: str) -> str | None:
    """Why a URL given to the browser is refused before anything loads: only http(s)."""
    scheme = urllib.parse.urlsplit(url).scheme.lower() if isinstance(url, str) else ""
    if scheme not in ("http", "https"):
        return (
            f"URL {url[:200]!r} uses scheme {scheme or 'none'!r}; the browser opens only http "
            "and https URLs (no file:, data:, javascript:, chrome: or about: pages)"
        )
    return None


def check_url(url: str, allow: Iterable[str]) -> str | None:
    """Why ``url`` may not be loaded, or None: the policy plugin's rules and allow-list."""
    reason: str | None = _policy_check_url(url, tuple(allow))
    return reason


def _host_in_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _name_allowed(host: str, allow: Iterable[str], port: int) -> bool:
    # Entries naming another port do not count (``host:8000`` allows port 8000 only).
    names, _ = parse_allow_list(tuple(allow), port=port)
    host = host.lower().rstrip(".")
    return host in names or any(n.startswith("*.") and host.endswith(n[1:]) for n in names)


_LOOKUPS: concurrent.futures.ThreadPoolExecutor | None = None
_LOOKUPS_LOCK = threading.Lock()


def _dns_timeout() -> float:
    try:
        return max(0.05, float(os.environ.get(ENV_DNS_TIMEOUT, "2")))
    except ValueError:
        return 2.0


def _lookup(host: str, port: int) -> list[Any]:
    """``getaddrinfo`` within ``TOOLDECK_DNS_TIMEOUT`` seconds (default 2), as the policy's.

    getaddrinfo has no time limit of its own, and a DNS server the page's author runs can hold
    every answer: the proxy's checks would then queue behind stuck look-ups in asyncio's small
    default pool, for every session's browser. They run in a pool of their own and are given
    up on (the connection refused) past the time limit.
    """
    global _LOOKUPS
    with _LOOKUPS_LOCK:
        if _LOOKUPS is None:
            _LOOKUPS = concurrent.futures.ThreadPoolExecutor(
                max_workers=8, thread_name_prefix="tooldeck-proxy-dns"
            )
        pool = _LOOKUPS
    future = pool.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    return future.result(timeout=_dns_timeout())


def allowed_addresses(scheme: str, host: str, port: int, allow: Iterable[str]) -> list[str] | str:
    """The addresses the proxy may connect to for ``host:port``, or the reason it may not.

    Blocking (name resolution): call it from a worker thread. The host is checked as a URL first
    (names, literal addresses, metadata and local names); then resolved here and every address is
    checked again, and only those that pass are returned, so that the connection goes to an
    address that was checked (a DNS answer that changes between the check and the connect, i.e.
    DNS rebinding, gains nothing).
    """
    allow = tuple(allow)
    url = f"{scheme}://{_host_in_url(host)}:{port}/"
    reason = check_url(url, allow)
    if reason:
        return reason
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    if literal is not None:
        return [str(literal)]
    try:
        infos = _lookup(host, port)
    except concurrent.futures.TimeoutError:
        return f"host {host!r} took longer than {_dns_timeout():g} s to resolve"
    except (OSError, UnicodeError) as exc:
        return f"host {host!r} does not resolve ({exc})"
    explicitly_allowed = _name_allowed(host, allow, port)
    addresses: list[str] = []
    refused: list[str] = []
    for info in infos:
        address = str(info[4][0]).split("%", 1)[0]
        if address in addresses:
            continue
        # With the port: an entry ``10.0.0.5:80`` must not let a name that now resolves to
        # 10.0.0.5 through on port 6379.
        verdict = check_url(f"{scheme}://{_host_in_url(address)}:{port}/", allow)
        if explicitly_allowed or verdict is None:
            addresses.append(address)
        else:
            refused.append(address)
    if not addresses:
        return f"host {host!r} resolves only to internal addresses ({', '.join(refused)})"
    return addresses
