"""Screenshot writes refuse the shared protected paths as file_write does: the rules the fs pack
once held alone, folded spellings, and a git ``HEAD`` file."""

from __future__ import annotations

from pathlib import Path

import pytest
from tooldeck_tools_browser import _files

from tooldeck_hookspecs import ToolFailure

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


@pytest.mark.parametrize(("path", "rule"), [
    (".cursor/mcp.png", ".cursor/"),
    ("sub/.gemini/x.png", ".gemini/"),
    ("venv/lib/python3.11/site-packages/x.png", "site-packages/"),
    (".config/x.png", "/.config/"),
    (".local/bin/x.png", "/.local/"),
    # Spellings a case-insensitive file system takes for the protected name.
    (".\uff43ursor/mcp.png", ".cursor/"),
    (".g\u200bit/x.png", ".git/"),
])
def test_shared_protected_paths_are_refused(tmp_path: Path, path: str, rule: str) -> None:
    with pytest.raises(ToolFailure) as info:
        _files.write_in_workdir(str(tmp_path), path, PNG)
    assert info.value.code == "PATH_NOT_ALLOWED" and info.value.details["rule"] == rule
    assert list(tmp_path.iterdir()) == []  # refused before any folder was created


def test_a_head_file_is_refused_but_a_head_folder_is_not(tmp_path: Path) -> None:
    # A screenshot's name ends in .png, so the HEAD check can only be reached through the
    # location check itself; it checks the target as a file.
    rules = _files._rules(None)
    with pytest.raises(ToolFailure) as info:
        _files._check_location("x/HEAD", ["x", "HEAD"], str(tmp_path), rules, ())
    assert info.value.code == "PATH_NOT_ALLOWED" and info.value.details["rule"] == "HEAD"
    assert _files.write_in_workdir(str(tmp_path), "head/HEAD.png", PNG) == "head/HEAD.png"
    assert (tmp_path / "head" / "HEAD.png").read_bytes() == PNG
