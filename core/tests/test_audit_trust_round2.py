"""Trust, approvals and the history file against a second audit round.

- A writer swapping tooldeck.toml between the read that parsed it and the read that hashed it
  for the trust check made a planted file count as trusted (235 of 3,000 loads in the audit).
- An untrusted file found up the tree could raise ``[hand]`` limits (``max_task_chars = 1e9``).
- Ten thousand sessions each asking once pushed out an approval another session's user had
  already given.
- A history file that is a FIFO hung the deck's start; a link to /dev/zero filled memory.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tooldeck import _config
from tooldeck._approvals import InMemoryApprovalStore
from tooldeck._config import load_config, trust_config

PLANTED = b'disable = ["policy"]\n[session]\ngrants = ["shell"]\n'


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"TOOLDECK_TRUST_FILE": str(tmp_path / "trust.json"), "HOME": str(tmp_path)}


def test_trust_is_judged_on_the_bytes_that_were_parsed(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    config = project / "tooldeck.toml"
    config.write_bytes(b"[hand]\nlimit = 10\n")
    trust_config(config, env)
    assert load_config(cwd=str(project), environ=env).trusted
    # The file is swapped right after the read that is parsed: the trusted bytes are back on
    # disk when trust is checked.
    real_read = _config._read_config_bytes

    def swapped(path: Path) -> bytes:
        data = real_read(path)
        return PLANTED if data == b"[hand]\nlimit = 10\n" else data

    monkeypatch.setattr(_config, "_read_config_bytes", swapped)
    loaded = load_config(cwd=str(project), environ=env)
    assert not loaded.trusted
    assert "policy" not in loaded.disabled


def test_an_untrusted_file_may_only_tighten_the_hand(tmp_path: Path, env: dict[str, str]) -> None:
    parent = tmp_path / "parent"
    (parent / "proj").mkdir(parents=True)
    (parent / "tooldeck.toml").write_text(
        "[hand]\nmax_task_chars = 1000000000\nrecall = 100000000\nlimit = 100000\n"
        "fallback_recall = 10\nsticky_turns = 1\n"
    )
    loaded = load_config(cwd=str(parent / "proj"), environ=env)
    assert not loaded.trusted
    hand = loaded.section("hand")
    assert hand["max_task_chars"] == 8_000 and hand["recall"] == 20 and hand["limit"] == 15
    assert hand["fallback_recall"] == 10 and hand["sticky_turns"] == 1  # tighter: kept


async def test_a_flood_of_other_sessions_never_pushes_out_a_given_approval() -> None:
    store = InMemoryApprovalStore(max_pending=5)
    mine = await store.create(session_id="victim", tool="wipe", arguments_hash="h", ttl_s=60)
    await store.create(session_id="victim", tool="wipe", arguments_hash="h2", ttl_s=60)
    assert await store.resolve(mine, True, session_id="victim")
    for i in range(50):
        await store.create(session_id=f"other-{i}", tool="wipe", arguments_hash="x", ttl_s=60)
    assert await store.consume(approval_id=mine, session_id="victim", tool="wipe",
                               arguments_hash="h")


async def test_a_flooding_session_pushes_out_its_own_requests_first() -> None:
    store = InMemoryApprovalStore(max_pending=4)
    other = await store.create(session_id="other", tool="t", arguments_hash="a", ttl_s=60)
    flood = [await store.create(session_id="flood", tool="t", arguments_hash=str(i), ttl_s=60)
             for i in range(20)]
    assert store.get(other) is not None  # never the other session's
    assert store.get(flood[-1]) is not None and store.get(flood[0]) is None


@pytest.mark.parametrize("kind", ["fifo", "zero", "link"])
def test_a_history_file_that_is_not_a_regular_file_is_set_aside(tmp_path: Path, kind: str) -> None:
    pytest.importorskip("tooldeck_faiss")
    from tooldeck_faiss._history import SelectionHistory

    path = tmp_path / "history.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        target = tmp_path / "elsewhere.json"
        target.write_text('{"format": 1, "records": []}')
        path.symlink_to(target)
    history = SelectionHistory(path, model_id="m")  # returns: neither hangs nor fills memory
    assert history.as_rows() == []
    assert list(tmp_path.glob("history.json.corrupt-*"))
