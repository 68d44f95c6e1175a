"""A screenshot whose call the runner gave up on is not saved: ``write_in_workdir`` calls
``before_publish`` (the tool passes ``ToolContext.commit``) right before its rename."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tooldeck_tools_browser import _files

from tooldeck_hookspecs import CallAbandoned

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def test_a_refused_commit_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    (tmp_path / "shot.png").write_bytes(b"old")

    def abandoned() -> None:
        raise CallAbandoned()

    with pytest.raises(CallAbandoned):
        _files.write_in_workdir(str(tmp_path), "shot.png", PNG, before_publish=abandoned)
    assert (tmp_path / "shot.png").read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["shot.png"]


def test_an_accepted_commit_writes(tmp_path: Path) -> None:
    calls = []
    written = _files.write_in_workdir(
        str(tmp_path), "a/shot.png", PNG, before_publish=lambda: calls.append(1)
    )
    assert written == "a/shot.png" and calls == [1]
    assert (tmp_path / "a" / "shot.png").read_bytes() == PNG
