"""The URL guard. No DNS look-up of a public name happens here: IP literals and local names only
(``localhost`` is refused by name; the machine's own host name resolves through /etc/hosts)."""

from __future__ import annotations

import socket
import time

import pytest
from tooldeck_policy import check_url, parse_allow_list

REFUSED = [
    # loopback, every spelling
    "http://127.0.0.1/",
    "http://127.0.0.1:8080/admin",
    "http://127.1/",
    "http://2130706433/",
    "http://017700000001/",
    "http://0177.0.0.1/",
    "http://0x7f.1/",
    "http://0x7f000001/",
    "http://0x7f.0x0.0x0.0x1/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[0:0:0:0:0:ffff:127.0.0.1]/",
    "http://127.0.0.1./",
    "http://localhost/",
    "http://LOCALHOST:3000/",
    "http://localhost./",
    "http://api.localhost/",
    "http://\u24db\u24de\u24d2\u24d0\u24db\u24d7\u24de\u24e2\u24e3/",  # circled 'localhost'
    "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/",  # full-width 127.0.0.1
    # unspecified, private, link-local, multicast, reserved, shared
    "http://0.0.0.0/",
    "http://0/",
    "http://[::]/",
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://192.168.1.1/",
    "http://[fd12:3456::1]/",
    "http://169.254.1.1/",
    "http://[fe80::1]/",
    "http://224.0.0.1/",
    "http://240.0.0.1/",
    "http://100.64.0.1/",
    "http://[64:ff9b::a00:1]/",  # NAT64 of 10.0.0.1
    "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    # cloud metadata
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://0xa9fea9fe/",  # 169.254.169.254 in hex
    "http://2852039166/",  # ... and in decimal
    "http://100.100.100.200/",
    # not http(s), credentials, malformed
    "file:///etc/passwd",
    "gopher://127.0.0.1:6379/_INFO",
    "ftp://8.8.8.8/",
    "javascript:alert(1)",
    "//8.8.8.8/",
    "http://user:pass@8.8.8.8/",
    "https://token@1.1.1.1/",
    "http://8.8.8.8:99999/",
    "http://8.8.8.8\\@127.0.0.1/",
    "http://8.8.8.8/a b",
    "http://8.8.8.8/\r\nHost: x",
    "http:///path",
]

ALLOWED = [
    "http://8.8.8.8/",
    "https://1.1.1.1/dns-query",
    "https://93.184.215.14:443/index.html?q=%0a",
    "http://[2606:4700:4700::1111]/",
    "HTTPS://8.8.4.4/",
]


@pytest.mark.parametrize("url", REFUSED)
def test_policy_url_refused(url: str) -> None:
    reason = check_url(url)
    assert reason is not None, url
    assert len(reason) > 20


@pytest.mark.parametrize("url", ALLOWED)
def test_policy_url_public_literal_allowed(url: str) -> None:
    assert check_url(url) is None


def test_policy_url_reasons_are_specific() -> None:
    assert "loopback" in (check_url("http://2130706433/") or "")
    assert "metadata" in (check_url("http://169.254.169.254/") or "")
    assert "credentials" in (check_url("http://a:b@8.8.8.8/") or "")
    assert "scheme 'file'" in (check_url("file:///etc/passwd") or "")
    assert "private" in (check_url("http://10.1.2.3/") or "")


def test_policy_url_allow_list() -> None:
    allow = "127.0.0.1,::1,localhost,10.0.0.0/8"
    assert check_url("http://127.0.0.1:8000/", allow) is None
    assert check_url("http://[::1]:8000/", allow) is None
    assert check_url("http://localhost:8000/", allow) is None
    assert check_url("http://10.20.30.40/", allow) is None
    assert check_url("http://0x7f.1/", ["127.0.0.1"]) is None  # same address, other spelling
    assert check_url("http://[::ffff:127.0.0.1]/", ["127.0.0.1"]) is None
    assert check_url("http://localhost:8000/", ["127.0.0.1"]) is None
    # The list opens only what it names.
    assert check_url("http://192.168.0.1/", allow) is not None
    assert check_url("http://169.254.169.254/", allow) is not None
    assert check_url("http://a:b@127.0.0.1/", allow) is not None  # credentials never
    names, networks = parse_allow_list(["*.corp.example", "fd00::/8", " "])
    assert names == {"*.corp.example"} and len(networks) == 1
    assert check_url("https://wiki.corp.example/", ["*.corp.example"]) is None


def test_policy_url_resolved_name_checked() -> None:
    # The machine's own name resolves locally (/etc/hosts), to a loopback or private address.
    host = socket.gethostname()
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        pytest.skip("this machine's host name does not resolve")
    reason = check_url(f"http://{host}/")
    assert reason is not None and "resolves to" in reason, (addresses, reason)
    assert check_url(f"http://{host}/", resolve=False) is None


def test_policy_url_resolution_failure_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> list[object]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    # Fault injection instead of a real look-up of a name that does not exist.
    monkeypatch.setattr(socket, "getaddrinfo", fail)
    reason = check_url("https://no-such-host-for-tooldeck-tests.example/")
    assert reason is not None and "does not resolve" in reason


def test_policy_url_resolution_timeout_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(*args: object, **kwargs: object) -> list[object]:
        time.sleep(0.5)
        return []

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    monkeypatch.setenv("TOOLDECK_DNS_TIMEOUT", "0.05")
    reason = check_url("https://slow-host-for-tooldeck-tests.example/")
    assert reason is not None and "longer than" in reason


def test_policy_url_guard_benchmark() -> None:
    """Reports the cost of checking a literal URL; asserts nothing about time."""
    urls = REFUSED + ALLOWED
    started = time.perf_counter()
    for _ in range(20):
        for url in urls:
            check_url(url, resolve=False)
    per_call = (time.perf_counter() - started) / (20 * len(urls))
    print(f"\n[policy] check_url: {per_call * 1e6:.0f} us per URL (literal hosts)")


@pytest.mark.parametrize(
    ("entry", "allowed", "refused"),
    [
        ("127.0.0.1:8000", ["http://127.0.0.1:8000/x", "http://0x7f.1:8000/"],
         ["http://127.0.0.1:6379/", "http://127.0.0.1/", "https://127.0.0.1:8001/"]),
        ("[::1]:8000", ["http://[::1]:8000/"], ["http://[::1]:6379/", "http://[::1]/"]),
        ("localhost:8000", ["http://localhost:8000/"], ["http://localhost:5432/"]),
        ("[10.0.0.0/8]:443", ["https://10.1.2.3/", "http://10.1.2.3:443/"],
         ["http://10.1.2.3/", "https://10.1.2.3:8443/"]),
        ("10.0.0.0/8", ["http://10.1.2.3:6379/"], ["http://192.168.0.1/"]),
        ("127.0.0.1:*", ["http://127.0.0.1:6379/"], ["http://10.0.0.1/"]),
        ("127.0.0.1:99999", [], ["http://127.0.0.1/", "http://127.0.0.1:9999/"]),
    ],
)
def test_policy_url_allow_list_is_per_host_and_port(entry, allowed, refused) -> None:
    for url in allowed:
        assert check_url(url, [entry]) is None, (entry, url)
    for url in refused:
        assert check_url(url, [entry]) is not None, (entry, url)


def test_policy_url_allow_entries_split() -> None:
    from tooldeck_policy import split_allow_entry

    assert split_allow_entry("Example.Internal:8443") == ("example.internal", 8443)
    assert split_allow_entry("[::1]") == ("::1", None)
    assert split_allow_entry("::1") == ("::1", None)
    assert split_allow_entry("fd00::/8") == ("fd00::/8", None)
    assert split_allow_entry("*.corp.example:80") == ("*.corp.example", 80)
    assert split_allow_entry("host:*") == ("host", None)
