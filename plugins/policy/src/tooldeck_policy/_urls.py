"""The URL guard: http(s) only, no credentials, no address that reaches inside the network.

A host is checked as an IP literal first, in every spelling the C resolver accepts (``2130706433``,
``0x7f.1``, ``0177.0.0.1``, ``127.1``, ``[::ffff:127.0.0.1]``, percent-encoded
``%31%32%37.0.0.1``, full-width ``１２７。０。０。１``), then by name: ``localhost`` and
metadata names are refused without a look-up, other names are resolved (with a short time limit)
and every address they resolve to must be public. The allow list (hosts, IPs or CIDRs) lets chosen
internal targets through, e.g. a test server on ``127.0.0.1``. An entry may name a port
(``127.0.0.1:8000``, ``[::1]:8000``, ``localhost:8000``, ``*.corp.example:8443``,
``[10.0.0.0/8]:443``): it then lets through that port only, so allowing a test server does not
also open the Redis or the database listening on the same host. An entry without a port lets
through every port of that host (prefer ports for internal targets).

The look-up is a time-of-check: a fetching tool should connect to the addresses checked here (or
check again at connect time) to be safe against DNS rebinding.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import os
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterable
from typing import Any

__all__ = [
    "ENV_ALLOW",
    "ENV_DNS_TIMEOUT",
    "MAX_URL_CHARS",
    "check_url",
    "parse_allow_list",
    "split_allow_entry",
]

#: Environment variable with extra allowed hosts/CIDRs, comma-separated.
ENV_ALLOW = "TOOLDECK_URL_ALLOW"
#: Environment variable with the name-resolution time limit in seconds (default 2).
ENV_DNS_TIMEOUT = "TOOLDECK_DNS_TIMEOUT"

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address
_NET = ipaddress.IPv4Network | ipaddress.IPv6Network

_METADATA_IPS = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
        "169.254.170.2",  # AWS ECS task metadata
        "100.100.100.200",  # Alibaba Cloud
        "fd00:ec2::254",  # AWS IMDS over IPv6
        # Both look public to ``ipaddress`` (is_global) yet only answer inside their cloud:
        "192.0.0.192",  # Oracle Cloud IMDS
        "168.63.129.16",  # Azure WireServer (VM agent configuration, certificates)
    )
)
# Ranges ``ipaddress`` counts as global on some Python versions although they never are:
# 192.0.0.0/24 (IETF protocol assignments, Python 3.11 knows only 192.0.0.0/29 of it) and the
# deprecated IPv6 site-local fec0::/10 (still routed inside some older networks).
_NON_PUBLIC_NETS = (
    (ipaddress.IPv4Network("192.0.0.0/24"), "a non-public address"),
    (ipaddress.IPv6Network("fec0::/10"), "a site-local address"),
)
_METADATA_NAMES = frozenset(
    {
        "metadata.google.internal",
        "metadata.goog",
        "metadata",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})

# The numeric spellings inet_aton(3) accepts: 1 to 4 parts, each decimal, octal (leading 0) or hex.
_CONTROL = re.compile(r"[\x00-\x20\x7f]")  # whitespace and controls, one C pass

#: Longest URL checked (Chromium's own limit, ``url::kMaxURLChars``: no browser or HTTP client
#: sends a longer one). Longer ones are refused unread: the checks below are C passes over the
#: whole text that hold the GIL, and a model's 16 MB "URL" held it ~0.3 s per URL, stalling
#: every session even from a worker thread.
MAX_URL_CHARS = 2 * 1024 * 1024
#: RFC 1035's longest name is 253 characters; its IDNA form or an IP literal in any spelling
#: fits too (a full-width or Unicode name is checked before its IDNA form, so with slack).
_MAX_HOST_CHARS = 1024
_LEGACY_V4 = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}\Z")

_SUGGESTION = "use a public http(s) URL"

_DNS_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_DNS_CACHE: dict[str, tuple[float, list[_IP] | str]] = {}
_DNS_CACHE_LOCK = threading.Lock()
_DNS_CACHE_TTL_S = 30.0


_PORTED = re.compile(
    r"^\[(?P<bracketed>[^\]]+)\](?::(?P<port1>\d+|\*))?\Z"
    r"|^(?P<plain>[^:\[\]]+):(?P<port2>\d+|\*)\Z"
)


def split_allow_entry(entry: Any) -> tuple[str, int | None]:
    """One allow-list entry as (host, IP or CIDR in lower case; port or None for every port).

    ``host:8000``, ``[::1]:8000``, ``[fd00::/8]:443`` carry a port; ``::1``, ``10.0.0.0/8``,
    ``host`` and ``host:*`` do not.
    """
    text = str(entry).strip().lower()
    match = _PORTED.match(text)
    if match is None:
        return text.strip("[]").rstrip("."), None
    host = (match.group("bracketed") or match.group("plain") or "").rstrip(".")
    port = match.group("port1") or match.group("port2")
    if port is None or port == "*":
        return host, None
    number = int(port)
    # An impossible port matches nothing rather than everything.
    return host, number if 0 < number < 65536 else -1


def _entries_for(values: Iterable[Any] | str | None, port: int | None) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        values = values.split(",")
    kept = []
    for entry in values:
        host, entry_port = split_allow_entry(entry)
        if host and (entry_port is None or (port is not None and entry_port == port)):
            kept.append(host)
    return kept


def parse_allow_list(
    values: Iterable[Any] | str | None, *, port: int | None = None
) -> tuple[set[str], list[_NET]]:
    """Split an allow list (a comma-separated string or an iterable of strings) into host names
    (lower case, ``*.example.com`` wildcards kept) and networks. Unparseable entries are names.

    Entries that name a port count only when ``port`` is that port (without ``port``, only
    entries valid for every port are returned).
    """
    names: set[str] = set()
    networks: list[_NET] = []
    for text in _entries_for(values, port):
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            names.add(text)
    return names, networks


def _literal_ip(host: str) -> _IP | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _LEGACY_V4.match(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


# What the WHATWG host parser refuses in a decoded domain: spaces, controls and URL delimiters.
_FORBIDDEN_IN_HOST = frozenset(" #%/:<>?@[\\]^|\x7f") | {chr(c) for c in range(0x20)}


def _percent_decoded_host(host: str) -> str | None:
    """``host`` with its %XX escapes decoded as UTF-8, or None when a browser would refuse it."""
    try:
        decoded = urllib.parse.unquote_to_bytes(host).decode("utf-8")
    except UnicodeError:  # escapes that are not UTF-8, or a lone surrogate beside them
        return None
    if not decoded or any(c in _FORBIDDEN_IN_HOST for c in decoded):
        return None
    return decoded


def _embedded_v4(ip: _IP) -> ipaddress.IPv4Address | None:
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in ipaddress.IPv6Network("64:ff9b::/96"):  # NAT64 well-known prefix
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in ipaddress.IPv6Network("::/96") and int(ip) > 1:  # deprecated IPv4-compatible
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _ip_problem(ip: _IP) -> str | None:
    """What kind of internal address ``ip`` is, or None for a public one."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id is not None:
        # A zone id (fd00:ec2::254%eth0) makes the address compare unequal to the listed one.
        ip = ipaddress.IPv6Address(int(ip))
    if ip in _METADATA_IPS:
        return "a cloud metadata address"
    inner = _embedded_v4(ip)
    if inner is not None:
        problem = _ip_problem(inner)
        return f"{problem} (embedded in {ip})" if problem else None
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    for network, what in _NON_PUBLIC_NETS:
        if ip.version == network.version and ip in network:
            return what
    if ip.is_private:
        return "a private address"
    if ip.is_reserved:
        return "a reserved address"
    if not ip.is_global:
        # Shared address space (100.64/10), documentation ranges and the like.
        return "a non-public address"
    return None


def _allowed_ip(ip: _IP, networks: list[_NET]) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id is not None:
        ip = ipaddress.IPv6Address(int(ip))
    candidates = [ip]
    inner = _embedded_v4(ip)
    if inner is not None:
        candidates.append(inner)
    # A metadata service is let through only by an entry naming its very address: allowing an
    # internal range (fd00::/8 for a ULA network, 169.254.0.0/16 for a link-local device) must
    # not open the cloud's credentials endpoint that happens to sit inside it.
    exact = any(c in _METADATA_IPS for c in candidates)
    return any(
        c.version == n.version and c in n and (not exact or n.num_addresses == 1)
        for c in candidates
        for n in networks
    )


def _name_allowed(host: str, names: set[str]) -> bool:
    if host in names:
        return True
    return any(n.startswith("*.") and host.endswith(n[1:]) for n in names)


def _resolve(host: str, timeout_s: float) -> list[_IP] | str:
    now = time.monotonic()
    with _DNS_CACHE_LOCK:
        hit = _DNS_CACHE.get(host)
        if hit and hit[0] > now:
            return hit[1]

    def lookup() -> list[_IP]:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]

    global _DNS_POOL
    if _DNS_POOL is None:
        # getaddrinfo has no time limit of its own: run it in a thread and stop waiting.
        _DNS_POOL = concurrent.futures.ThreadPoolExecutor(
            max_workers=4, thread_name_prefix="tooldeck-dns"
        )
    outcome: list[_IP] | str
    try:
        outcome = _DNS_POOL.submit(lookup).result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        outcome = f"resolving it took longer than {timeout_s:g} s"
    except (OSError, UnicodeError, ValueError) as exc:
        outcome = f"it does not resolve ({exc})"
    if not outcome:
        outcome = "it resolves to no address"
    with _DNS_CACHE_LOCK:
        if len(_DNS_CACHE) > 4096:
            _DNS_CACHE.clear()
        _DNS_CACHE[host] = (now + _DNS_CACHE_TTL_S, outcome)
    return outcome


def _dns_timeout() -> float:
    try:
        return max(0.05, float(os.environ.get(ENV_DNS_TIMEOUT, "2")))
    except ValueError:
        return 2.0


def check_url(url: object, allow: Iterable[Any] | str = (), *, resolve: bool = True) -> str | None:
    """Why ``url`` may not be fetched, or None when it may.

    ``allow`` lists hosts (``example.internal``, ``*.corp.example``), IPs or CIDRs that are let
    through although internal (a cloud metadata address only by an entry naming that address, not
    by a range around it). With ``resolve=False`` names other than the known local and metadata
    ones are not looked up (and pass).
    """
    if not isinstance(url, str):
        return f"a URL must be a string, got {type(url).__name__}; {_SUGGESTION}"
    shown = url if len(url) <= 200 else url[:200] + "..."
    if len(url) > MAX_URL_CHARS:
        return (
            f"URL {shown!r} is {len(url):,} characters long, more than any client sends "
            f"({MAX_URL_CHARS:,}); {_SUGGESTION}"
        )
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate is valid JSON ("\ud800") but no URL: nothing could send it.
        return f"URL {shown!r} is not valid text (it holds a lone surrogate); {_SUGGESTION}"
    if _CONTROL.search(url):
        return f"URL {shown!r} contains whitespace or control characters; {_SUGGESTION}"
    if "\\" in url:
        # Browsers and some clients read '\' as '/', others do not: the two disagree on the host.
        return f"URL {shown!r} contains a backslash, which clients parse differently; {_SUGGESTION}"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises on a malformed port
    except ValueError as exc:
        return f"URL {shown!r} cannot be parsed ({exc}); {_SUGGESTION}"
    if port is None:
        port = 443 if parts.scheme.lower() == "https" else 80
    if parts.scheme.lower() not in ("http", "https"):
        scheme = parts.scheme or "none"
        return f"URL {shown!r} uses scheme {scheme!r}; only http and https are allowed"
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return (
            f"URL {shown!r} carries credentials (user:password@); remove them, credentials are "
            f"never passed in URLs"
        )
    host = (parts.hostname or "").rstrip(".")
    if "%" in host and not parts.netloc.rpartition("@")[2].startswith("["):
        # Browsers (WHATWG URL) percent-decode the host before anything else: '%31%32%37.0.0.1'
        # is 127.0.0.1 to them, while getaddrinfo would look the escapes up as a name.
        decoded = _percent_decoded_host(host)
        if decoded is None:
            return f"URL {shown!r} has a percent-encoded host that is not valid; {_SUGGESTION}"
        host = decoded.lower().rstrip(".")
    if not host:
        return f"URL {shown!r} has no host; {_SUGGESTION}"
    if len(host) > _MAX_HOST_CHARS:
        # Before any regex or IDNA pass: those hold the GIL over the whole host (a model's 1 MB
        # host took ~60 ms of every session's loop), and no name or address is this long.
        return f"URL {shown!r} has a host longer than {_MAX_HOST_CHARS} characters; {_SUGGESTION}"
    if not host.isascii():
        # IDNA maps look-alikes to ASCII ('ⓛⓞⓒⓐⓛⓗⓞⓢⓣ' is localhost): check what will be resolved.
        try:
            host = host.encode("idna").decode("ascii").lower().rstrip(".")
        except UnicodeError:
            return f"URL {shown!r} has a host name that is not valid; {_SUGGESTION}"
    names, networks = parse_allow_list(allow, port=port)
    if _name_allowed(host, names):
        return None
    ip = _literal_ip(host)
    if ip is not None:
        problem = _ip_problem(ip)
        if problem is None or _allowed_ip(ip, networks):
            return None
        return f"URL {shown!r} points at {ip}, {problem}; {_SUGGESTION}"
    try:
        host.encode("idna")
    except UnicodeError:
        return f"URL {shown!r} has a host name that is not valid ({host!r}); {_SUGGESTION}"
    if host in _LOCAL_NAMES or host.endswith(".localhost"):
        if any(_allowed_ip(ipaddress.ip_address(a), networks) for a in ("127.0.0.1", "::1")):
            return None
        return f"URL {shown!r} points at {host}, the local machine; {_SUGGESTION}"
    if host in _METADATA_NAMES:
        return f"URL {shown!r} points at {host}, a cloud metadata service; {_SUGGESTION}"
    if not resolve:
        return None
    addresses = _resolve(host, _dns_timeout())
    if isinstance(addresses, str):
        return f"URL {shown!r} cannot be checked: host {host!r} {addresses}; {_SUGGESTION}"
    for address in addresses:
        problem = _ip_problem(address)
        if problem is not None and not _allowed_ip(address, networks):
            return f"URL {shown!r}: host {host!r} resolves to {address}, {problem}; {_SUGGESTION}"
    return None
