"""Fixtures of the fs pack's tests: a shallow sandbox under /tmp with a canary outside."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from tooldeck_tools_fs import _safepath

from tooldeck_hookspecs import ToolContext


@attrs.frozen
class Sandbox:
    """``base/allowed`` is the only allowed root; ``base/outside/canary.txt`` must survive."""

    base: Path
    allowed: Path
    canary: Path
    marker: str

    @property
    def context(self) -> ToolContext:
        return ToolContext(session_id="test", workdir=str(self.allowed),
                           allowed_paths=(str(self.allowed),))

    def canary_from_root(self) -> str:
        """The canary's path written relative to '/', for {FILE} placeholders."""
        return str(self.canary).lstrip("/")

    def files_outside_allowed(self) -> set[str]:
        found = set()
        for path in self.base.rglob("*"):
            rel = path.relative_to(self.base)
            if rel.parts[0] != "allowed":
                found.add(str(rel))
        return found


def make_sandbox() -> Sandbox:
    # Directly under /tmp, so the allowed root is three levels deep (/tmp/x/allowed) and most
    # '..' chains overshoot to '/' and land on the canary (security corpus README, rule 3).
    base = Path(tempfile.mkdtemp(prefix="tdfs-", dir="/tmp"))
    allowed = base / "allowed"
    allowed.mkdir()
    (base / "outside").mkdir()
    marker = f"CANARY-{secrets.token_hex(16)}"
    canary = base / "outside" / "canary.txt"
    canary.write_text(marker + "\n")
    return Sandbox(base=base, allowed=allowed, canary=canary, marker=marker)


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    box = make_sandbox()
    try:
        yield box
    finally:
        shutil.rmtree(box.base, ignore_errors=True)


@pytest.fixture(params=["openat2", "walk"])
def resolve_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once through openat2 (skipped where the kernel lacks it) and once through the
    component walk fallback."""
    mode: str = request.param
    if mode == "openat2" and not _safepath.openat2_available():
        pytest.skip("openat2(2) is not available on this kernel")
    monkeypatch.setattr(_safepath, "MODE", mode)
    return mode
