"""A new screenshot over a file read before is what the next ``file_read`` answers, not the
cached old picture: ``browser_screenshot`` declares the fs pack's cacheable readers in
``invalidates``, as file_write and shell_exec do (the core also drops, for any tool that writes
the workdir, the cached tools keyed by the workdir; the declaration does not rely on that)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from tooldeck_tools_browser import definitions

from tooldeck.testing import make_deck


def test_every_tool_of_the_pack_that_writes_the_workdir_declares_the_readers():
    writers = [t for t in definitions() if t.security.writes_workdir]
    assert [t.name for t in writers] == ["browser_screenshot"]
    for tool in writers:
        assert {"file_read", "list_dir"} <= set(tool.execution.invalidates), tool.name


@pytest.mark.chromium
async def test_file_read_after_a_new_screenshot_is_the_new_picture(
    site, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    pytest.importorskip("tooldeck_tools_fs")
    pytest.importorskip("tooldeck_cache")
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")
    deck = make_deck(load_entry_points=["schema", "runner", "policy", "cache", "fs", "browser"])
    async with deck:
        session = deck.session(workdir=str(tmp_path), max_level="moderate",
                               grants={"browser", "filesystem"})
        page = await session.call("browser_navigate", {"url": site.url("/")})
        assert page.success, page.error
        page_id = page.data["page_id"]
        shot = {"page_id": page_id, "path": "shot.png"}
        read = {"path": "shot.png", "encoding": "base64"}
        assert (await session.call("browser_screenshot", shot)).success
        first = await session.call("file_read", read)
        assert (await session.call("file_read", read)).metadata.get("cached")
        other = await session.call("browser_navigate", {"url": site.url("/form"),
                                                        "page_id": page_id})
        assert other.success, other.error
        assert (await session.call("browser_screenshot", shot)).success
        second = await session.call("file_read", read)
    on_disk = (tmp_path / "shot.png").read_bytes()
    assert base64.b64decode(first.data["content"]) != on_disk
    assert base64.b64decode(second.data["content"]) == on_disk
    assert not second.metadata.get("cached")
