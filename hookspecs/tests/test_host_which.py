"""host_which: programs the deck starts on the host never come from a relative PATH entry."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tooldeck_hookspecs import host_which


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # A model wrote an executable 'env' into the folder the deck runs in.
    fake = tmp_path / "env"
    fake.write_text("#!/bin/sh\ntouch canary\n")
    fake.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    return fake


@pytest.mark.parametrize("path", [".:/usr/bin:/bin", ":/usr/bin:/bin", "/usr/bin::/bin"])
def test_a_relative_path_entry_is_skipped(planted: Path, path: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", path)
    # What shutil.which answers with that PATH: the planted program (when it comes first).
    if not path.startswith("/"):
        assert os.path.samefile(shutil.which("env") or "", planted)
    found = host_which("env")
    assert found is not None and os.path.isabs(found)
    assert not os.path.samefile(found, planted)


def test_only_relative_entries_find_nothing(planted: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", ".")
    assert host_which("env") is None
