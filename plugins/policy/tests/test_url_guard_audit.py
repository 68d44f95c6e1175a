"""The URL guard against a hostile model's spellings of internal addresses, through a real deck.

The deck loads schema, runner and policy and one tool, ``fetch_url``, whose ``url`` is a URL
parameter; the tool only records the URLs it was called with, so nothing is ever fetched. The
resolver hook of the guard is replaced by a table: every name not in it "resolves" to a public
address (as a wildcard DNS or a search domain could make it), so a spelling that the guard leaves
to the resolver instead of decoding itself gets through and the test sees it.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
from tooldeck_policy import _urls, check_url

from tooldeck.testing import make_deck
from tooldeck_hookspecs import SecurityConfig, ToolDefinition

# Never connected to: the recording tool fetches nothing.
_PUBLIC = ipaddress.ip_address("93.184.216.34")
_TABLE = {
    "imds-v6.test": [ipaddress.ip_address("fd00:ec2::254")],
    "oracle-imds.test": [ipaddress.ip_address("192.0.0.192")],
    "internal.test": [ipaddress.ip_address("fd00::5")],
}


@pytest.fixture(autouse=True)
def fake_resolver(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names resolve from ``_TABLE``, anything else to a public address; look-ups are recorded."""
    asked: list[str] = []

    def resolve(host: str, timeout_s: float) -> list[Any] | str:
        asked.append(host)
        return list(_TABLE.get(host, [_PUBLIC]))

    monkeypatch.setattr(_urls, "_resolve", resolve)
    monkeypatch.delenv("TOOLDECK_URL_ALLOW", raising=False)
    return asked


def _fetch_tool(seen: list[str]) -> ToolDefinition:
    def fetch_url(arguments: dict[str, Any], context: Any) -> str:
        seen.append(arguments["url"])
        return "fetched"

    return ToolDefinition(
        name="fetch_url",
        version="1.0.0",
        description="Fetch a URL (records it only).",
        category="api",
        parameters={
            "type": "object",
            "properties": {"url": {"type": "string"}},
            "required": ["url"],
            "additionalProperties": False,
        },
        security=SecurityConfig(level="safe", url_params="url"),
        execute=fetch_url,
    )


async def _outcomes(
    urls: list[str], tmp_path: Path, allow: str | None = None
) -> tuple[dict[str, str | None], list[str]]:
    """Each URL's error code through the deck (None when the tool ran), and what the tool saw."""
    seen: list[str] = []
    attributes = {"url_allow": allow} if allow else {}
    async with make_deck(load_entry_points=["schema", "runner", "policy"],
                         tools=[_fetch_tool(seen)]) as deck:
        session = deck.session(workdir=str(tmp_path), attributes=attributes)
        codes: dict[str, str | None] = {}
        for url in urls:
            result = await session.call("fetch_url", {"url": url})
            codes[url] = None if result.success else str(result.error.code)
    return codes, seen


# Browsers percent-decode the host (WHATWG URL): each of these is loopback to Chromium.
PERCENT_ENCODED = [
    "http://%31%32%37.0.0.1/",
    "http://%31%32%37%2e%30%2e%30%2e%31:8080/admin",
    "http://%6c%6f%63%61%6c%68%6f%73%74/",
    "http://%EF%BC%91%EF%BC%92%EF%BC%97.0.0.1/",  # full-width digits, then percent-encoded
    "http://%31%36%39.254.169.254/latest/meta-data/",
    "http://0x7f%30%30%30%30%30%31/",  # 0x7f000001
]
# Percent escapes that decode to something no browser accepts as a host.
PERCENT_INVALID = ["http://%ff%fe/", "http://%2531%2532%2537.0.0.1/", "http://a%2fb@/",
                   "http://a%2fb/", "http://%00/"]
# Addresses ``ipaddress`` calls global on Python 3.11 although they are internal.
NON_PUBLIC_LITERALS = [
    "http://192.0.0.192/opc/v2/instance/",  # Oracle Cloud metadata
    "http://168.63.129.16/machine?comp=goalstate",  # Azure WireServer
    "http://192.0.0.8/",
    "http://[fec0::1]/",  # IPv6 site-local
    "http://[::ffff:192.0.0.192]/",
    "http://[64:ff9b::a8:3f81:10]/",  # NAT64 of 168.63.129.16
]


async def test_percent_encoded_internal_hosts_are_decoded_before_the_check(
    tmp_path: Path, fake_resolver: list[str]
) -> None:
    codes, seen = await _outcomes(PERCENT_ENCODED + PERCENT_INVALID, tmp_path)
    assert codes == dict.fromkeys(PERCENT_ENCODED + PERCENT_INVALID, "URL_NOT_ALLOWED")
    assert seen == []
    # Nothing was handed to the resolver as a name with escapes in it.
    assert not [host for host in fake_resolver if "%" in host]


async def test_percent_encoded_public_names_still_work(tmp_path: Path) -> None:
    codes, seen = await _outcomes(["http://%70ublic.test/", "https://public%2etest/a%2fb"],
                                  tmp_path)
    assert codes == {"http://%70ublic.test/": None, "https://public%2etest/a%2fb": None}
    assert len(seen) == 2


async def test_metadata_and_protocol_ranges_python_calls_global_are_refused(
    tmp_path: Path,
) -> None:
    names = ["http://oracle-imds.test/opc/v1/instance/"]
    codes, seen = await _outcomes(NON_PUBLIC_LITERALS + names, tmp_path)
    assert codes == dict.fromkeys(NON_PUBLIC_LITERALS + names, "URL_NOT_ALLOWED")
    assert seen == []
    assert "metadata" in (check_url("http://192.0.0.192/", ()) or "")
    assert "metadata" in (check_url("http://168.63.129.16/", ()) or "")


async def test_an_allowed_range_does_not_open_the_metadata_service_inside_it(
    tmp_path: Path,
) -> None:
    # An operator opening their ULA network (fd00::/8) or link-local devices (169.254/16) has not
    # asked for AWS's IMDS (fd00:ec2::254, 169.254.169.254), which sit inside those ranges.
    refused = [
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://[fd00:ec2::254%25eth0]/latest/meta-data/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "http://imds-v6.test/latest/meta-data/",
    ]
    fine = ["http://[fd00::5]/", "http://169.254.10.1/", "http://internal.test/"]
    codes, seen = await _outcomes(refused + fine, tmp_path, allow="fd00::/8,169.254.0.0/16")
    assert codes == {**dict.fromkeys(refused, "URL_NOT_ALLOWED"), **dict.fromkeys(fine, None)}
    assert seen == fine
    # Naming the address itself still lets it through (an operator's explicit choice).
    codes, _ = await _outcomes(["http://169.254.169.254/", "http://[fd00:ec2::254]:80/"],
                               tmp_path, allow="169.254.169.254,[fd00:ec2::254]:80")
    assert set(codes.values()) == {None}


@pytest.mark.parametrize(
    "url",
    [
        # A sample of the families that held before this audit, kept as a regression net.
        "http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/", "http://127.1/",
        "http://0/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/", "http://[::]/",
        "http://[64:ff9b::10.0.0.1]/", "http://[2002:a00:1::]/", "http://[fe80::1%25eth0]/",
        "http://[fc00::1]/", "http://[0000:0000::0001]/", "http://[fd00:ec2::254]/",
        "http://localhost./", "http://127.0.0.1./", "http://127\u30020\u30020\u30021/",
        "http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/",
        "http://allowed.test@127.0.0.1/", "http://127.0.0.1\\@allowed.test/", "http:///x",
        "file:///etc/passwd", "data:text/html,x", "javascript:alert(1)", "view-source:http://x/",
        "chrome://version", "about:blank", "blob:http://x/y", "ftp://x/", "ws://x/", "wss://x/",
        "gopher://x/", "HTTP://127.0.0.1/", " http://127.0.0.1/", "\x01http://x/",
        "http://metadata.google.internal./", "http://a.localhost/",
    ],
)
def test_families_that_held(url: str) -> None:
    assert check_url(url, ()) is not None


# A lone surrogate is valid JSON ("\ud800"), so a model can send one anywhere in a URL. The
# percent-decoding of the host raised UnicodeEncodeError out of the guard (and out of authorize).
SURROGATES = [
    "http://%\ud800/", "http://%41\ud800/", "http://%31\udfff%32/", "http://\ud800/",
    "http://x/\ud800", "http://x/?q=\udc80", "http://x/#\ud800", "http://u:\ud800@x/",
    "http://x:\ud800/", "http://[\ud800]/", "ht\ud800tp://x/", "\ud800",
]


@pytest.mark.parametrize("url", SURROGATES)
def test_a_lone_surrogate_anywhere_is_a_refusal_not_a_crash(url: str) -> None:
    reason = check_url(url, ())
    assert reason is not None and reason.encode("utf-8")  # the reason itself is sendable


async def test_a_lone_surrogate_through_the_deck_is_a_structured_error(tmp_path: Path) -> None:
    codes, seen = await _outcomes(SURROGATES, tmp_path)
    assert seen == []
    assert set(codes.values()) <= {"URL_NOT_ALLOWED", "INVALID_ARGUMENTS"}, codes
