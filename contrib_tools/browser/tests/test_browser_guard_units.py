"""The pieces of the browser pack that need no browser: the address guard and the PNG path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tooldeck_tools_browser import _files, _guard

from tooldeck_hookspecs import ToolFailure


def test_allowed_addresses_refuse_internal_hosts_and_honour_the_allow_list():
    assert isinstance(_guard.allowed_addresses("http", "127.0.0.1", 80, ()), str)
    assert isinstance(_guard.allowed_addresses("https", "localhost", 443, ()), str)
    assert isinstance(_guard.allowed_addresses("http", "169.254.169.254", 80, ("127.0.0.1",)),
                      str)
    assert isinstance(_guard.allowed_addresses("http", "::1", 80, ("127.0.0.1",)), str)
    assert _guard.allowed_addresses("http", "127.0.0.1", 8080, ("127.0.0.1",)) == ["127.0.0.1"]
    assert _guard.allowed_addresses("http", "::1", 8080, ("::1",)) == ["::1"]
    # A name is resolved here and only checked addresses are returned.
    addresses = _guard.allowed_addresses("http", "localhost", 80, ("127.0.0.1", "::1"))
    assert isinstance(addresses, list) and set(addresses) <= {"127.0.0.1", "::1"}


def test_session_allow_lists_are_remembered_per_session(monkeypatch):
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "10.0.0.0/8")
    _guard.remember_session_allow("units-a", "127.0.0.1, ::1")
    _guard.remember_session_allow("units-b", None)
    assert _guard.allow_list_for("units-a") == ("10.0.0.0/8", "127.0.0.1", "::1")
    assert _guard.allow_list_for("units-b") == ("10.0.0.0/8",)
    _guard.remember_session_allow("units-a", [])
    assert _guard.allow_list_for("units-a") == ("10.0.0.0/8",)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "javascript:alert(1)", "data:,x",
                                 "chrome://settings", "about:blank", "ftp://x/", "//x.org/"])
def test_only_http_and_https_are_opened(url):
    assert _guard.scheme_problem(url) is not None


@pytest.mark.parametrize("path", ["/tmp/x.png", "../x.png", "a/../../x.png", "x.jpg", "",
                                  "a\\b.png", "~/x.png", "nul\x00.png", ".", "dir/"])
def test_screenshot_paths_must_be_relative_pngs(path):
    with pytest.raises(ToolFailure) as info:
        _files.check_relative_png(path)
    assert info.value.code in ("PATH_NOT_ALLOWED", "INVALID_ARGUMENTS")


def test_screenshot_writes_create_folders_and_never_follow_symlinks(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    assert _files.write_in_workdir(str(work), "./a/b/shot.png", b"PNG") == "a/b/shot.png"
    assert (work / "a" / "b" / "shot.png").read_bytes() == b"PNG"
    os.symlink(outside, work / "link")
    os.symlink(outside / "target.png", work / "file-link.png")
    for path in ("link/x.png", "file-link.png"):
        with pytest.raises(ToolFailure) as info:
            _files.write_in_workdir(str(work), path, b"PNG")
        assert info.value.code == "PATH_NOT_ALLOWED"
    assert list(outside.iterdir()) == []


def test_a_missing_chromium_is_a_structured_error_naming_the_fix(monkeypatch, tmp_path):
    from tooldeck_tools_browser import _engine

    monkeypatch.setenv("TOOLDECK_CHROMIUM", str(tmp_path / "no-such-chromium"))
    with pytest.raises(ToolFailure) as info:
        _engine.find_executable()
    assert info.value.code == "EXECUTION_ERROR" and "TOOLDECK_CHROMIUM" in info.value.suggestion
    monkeypatch.delenv("TOOLDECK_CHROMIUM")
    monkeypatch.setattr(_engine, "DEFAULT_EXECUTABLES", (str(tmp_path / "chromium"),))
    with pytest.raises(ToolFailure) as info:
        _engine.find_executable()
    assert "apt-get install chromium" in info.value.suggestion


def test_allow_list_entries_with_a_port_allow_only_that_port():
    # host:port allows that port only; a host-only entry allows every port.
    assert _guard.allowed_addresses("http", "127.0.0.1", 8000, ("127.0.0.1:8000",)) == [
        "127.0.0.1"]
    assert isinstance(_guard.allowed_addresses("http", "127.0.0.1", 6379, ("127.0.0.1:8000",)),
                      str)
    assert _guard.allowed_addresses("https", "127.0.0.1", 6379, ("127.0.0.1",)) == ["127.0.0.1"]
    assert _guard.allowed_addresses("http", "::1", 8000, ("[::1]:8000",)) == ["::1"]
    assert isinstance(_guard.allowed_addresses("http", "::1", 8001, ("[::1]:8000",)), str)
    assert _guard.allowed_addresses("http", "10.1.2.3", 443, ("[10.0.0.0/8]:443",)) == [
        "10.1.2.3"]
    assert isinstance(_guard.allowed_addresses("http", "10.1.2.3", 80, ("[10.0.0.0/8]:443",)),
                      str)
    # A name with a port: resolved here, and its addresses are let through at that port only
    # (the per-address check used to ignore the port and refuse them).
    addresses = _guard.allowed_addresses("http", "localhost", 8000, ("localhost:8000",))
    assert isinstance(addresses, list) and set(addresses) <= {"127.0.0.1", "::1"}
    assert isinstance(_guard.allowed_addresses("http", "localhost", 8001, ("localhost:8000",)),
                      str)
    # An address entry with a port does not open other ports of the address to a name.
    assert isinstance(_guard.allowed_addresses("http", "localhost", 6379, ("127.0.0.1:80",
                                                                           "[::1]:80")), str)
