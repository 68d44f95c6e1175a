"""The code pack without a deck: file collection, direct calls, and the shared process runner."""

from __future__ import annotations

import pytest
from tooldeck_tools_code import MAX_FILES, code_execute, collect_files

from tooldeck_hookspecs import ToolContext, ToolFailure


def test_collect_files_caps_the_count_and_never_follows_links(tmp_path):
    for i in range(MAX_FILES + 5):
        (tmp_path / f"f{i:02d}.txt").write_text(str(i))
    (tmp_path / "zz-link").symlink_to("/etc/hostname")
    found = collect_files(str(tmp_path))
    assert len(found["files"]) == MAX_FILES and found["files_omitted"] == 6
    assert found["files_truncated"] is True
    assert found["files"][0] == {"name": "f00.txt", "size": 1, "content": "0",
                                 "encoding": "utf-8"}


def test_direct_call_refuses_oversized_code_with_too_large(tmp_path):
    context = ToolContext(session_id="s", workdir=str(tmp_path))
    with pytest.raises(ToolFailure) as info:
        code_execute({"code": "#" * 200_000}, context)
    assert info.value.code == "TOO_LARGE"
    with pytest.raises(ToolFailure) as info:
        code_execute({"code": "print(1)", "stdin": "\ud800"}, context)
    assert info.value.code == "INVALID_ARGUMENTS"
    # Unsandboxed (a direct call), the snippet still gets its own limits and directory.
    result = code_execute({"code": "import os; print(os.getcwd() != os.environ['WORKDIR'])"},
                          context)
    assert result["stdout"] == "True\n"


async def test_degraded_mode_without_bubblewrap_runs_and_returns_files(tmp_path):
    from tooldeck.testing import make_deck

    deck = make_deck(load_entry_points=["schema", "runner", "policy", "code"],
                     config={"runner": {"sandbox": "process"}})
    async with deck:
        session = deck.session(workdir=tmp_path, grants={"code"})
        result = await session.call("code_execute", {"code": "open('o.txt', 'w').write('hi')"})
    assert result.success and result.metadata["isolation"] == "process (degraded isolation)"
    assert result.data["files"][0]["content"] == "hi"
    assert list(tmp_path.iterdir()) == []


async def test_without_bubblewrap_and_without_opting_in_code_execute_is_refused(
    tmp_path, monkeypatch
):
    from tooldeck.testing import make_deck

    monkeypatch.setenv("PATH", str(tmp_path))  # a machine where `bwrap` cannot be found
    deck = make_deck(load_entry_points=["schema", "runner", "policy", "code"], config={})
    async with deck:
        session = deck.session(workdir=tmp_path, grants={"code"})
        result = await session.call("code_execute", {"code": "print('ran')"})
    assert not result.success and result.error.code == "PERMISSION_DENIED", result
    assert "bubblewrap" in result.error.message
    assert "allow_degraded" in result.error.suggestion
