"""The URL guard of the browser, at the network level.

The policy plugin checks the ``url`` argument before a call; but a page then loads subresources,
follows redirects, runs scripts and opens WebSockets, none of which that check sees. Playwright's
``page.route`` cannot close the gap: redirects after the first request are not routed (measured
with Chromium 156 and Playwright 1.65: a 302 to an internal address was followed unchecked, even
when the first response was fulfilled by the handler). So every context of the browser talks to
the network through a small local proxy (:mod:`._proxy`) that checks each connection here, resolves
the host itself and connects only to addresses that passed: redirects, subresources, WebSockets
and DNS rebinding included.

The rules are those of ``tooldeck_policy.check_url`` when the policy plugin is installed (with the
same allow-list: ``TOOLDECK_URL_ALLOW`` and the session's ``url_allow`` attribute); otherwise a
smaller built-in check refuses loopback, private, link-local and metadata addresses.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

__all__ = [
    "ENV_ALLOW",
    "allowed_addresses",
    "allow_list_for",
    "check_url",
    "remember_session_allow",
    "scheme_problem",
]

#: The policy plugin's environment variable for extra allowed hosts/CIDRs (same name).
ENV_ALLOW = "TOOLDECK_URL_ALLOW"

try:  # the policy plugin is optional: use its guard (the same rules everywhere) when present
    from tooldeck_policy import check_url as _policy_check_url
    from tooldeck_policy import parse_allow_list as _policy_parse_allow_list
except ImportError:  # pragma: no cover - exercised only without tooldeck-policy installed
    _policy_check_url = None  # type: ignore[assignment]
    _policy_parse_allow_list = None  # type: ignore[assignment]

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


# --- a fallback guard, used only when tooldeck-policy is not installed ----------------------


def _parse_allow(values: Iterable[str]) -> tuple[set[str], list[Any]]:
    names: set[str] = set()
    networks: list[Any] = []
    for value in values:
        text = value.strip().lower().strip("[]")
        if not text:
            continue
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            names.add(text.rstrip("."))
    return names, networks


def _ip_allowed(ip: Any, networks: list[Any]) -> bool:
    if any(ip.version == n.version and ip in n for n in networks):
        return True
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None:
        return _ip_allowed(mapped, networks)
    return bool(ip.is_global) and not ip.is_multicast


def _fallback_check(url: str, allow: Iterable[str]) -> str | None:
    problem = scheme_problem(url)
    if problem:
        return problem
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        return f"URL {url[:200]!r} has no host"
    if parts.username or parts.password:
        return f"URL {url[:200]!r} carries credentials"
    names, networks = _parse_allow(allow)
    if host in names or any(n.startswith("*.") and host.endswith(n[1:]) for n in names):
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        if host == "localhost" or host.endswith(".localhost"):
            ip = ipaddress.ip_address("127.0.0.1")
        else:
            return None  # names are checked by address in allowed_addresses
    if _ip_allowed(ip, networks):
        return None
    return f"URL {url[:200]!r} points at {ip}, an internal address; use a public http(s) URL"


def check_url(url: str, allow: Iterable[str]) -> str | None:
    """Why ``url`` may not be loaded, or None. The policy plugin's rules when installed."""
    if _policy_check_url is not None:
        reason: str | None = _policy_check_url(url, tuple(allow))
        return reason
    return _fallback_check(url, allow)


def _host_in_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _name_allowed(host: str, allow: Iterable[str]) -> bool:
    if _policy_parse_allow_list is not None:
        names, _ = _policy_parse_allow_list(tuple(allow))
    else:
        names, _ = _parse_allow(allow)
    host = host.lower().rstrip(".")
    return host in names or any(n.startswith("*.") and host.endswith(n[1:]) for n in names)


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
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        return f"host {host!r} does not resolve ({exc})"
    explicitly_allowed = _name_allowed(host, allow)
    addresses: list[str] = []
    refused: list[str] = []
    for info in infos:
        address = str(info[4][0]).split("%", 1)[0]
        if address in addresses:
            continue
        if explicitly_allowed or check_url(f"{scheme}://{_host_in_url(address)}/", allow) is None:
            addresses.append(address)
        else:
            refused.append(address)
    if not addresses:
        return f"host {host!r} resolves only to internal addresses ({', '.join(refused)})"
    return addresses
