"""The hand, its rules and the fallback paths with the real stages: MiniLM + FAISS retriever,
the policy plugin's rule filters, the fs pack, and a demo catalog of a few hundred tools."""

from __future__ import annotations

import os

import pytest

from tooldeck import ErrorCode
from tooldeck._catalog_data import load_demo_catalog
from tooldeck.testing import make_deck

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    # The demo catalog's vectors, shared by every module of this test process that deals from
    # it (core/tests/test_hand_tokens.py and test_history_selection.py,
    # tests/test_hand_with_real_retriever.py): embedding its ~400 tools takes seconds, and these
    # tests check the hand, not a first embedding (tooldeck-faiss's own tests check that).
    shared = tmp_path_factory.getbasetemp() / "demo-catalog-embeddings"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture
def deck(cache_dir):
    # One deck per test (a deck belongs to one trio run); the model is shared by the process and
    # the vectors by the cache folder, so only the first test embeds the catalog.
    return make_deck(
        load_entry_points=["schema", "runner", "policy", "faiss", "fs"],
        tools=load_demo_catalog(),
        config={"faiss": {"cache_dir": str(cache_dir)}, "hand": {"limit": 12}},
    )


async def test_the_hand_fits_the_task_and_rules_remove_with_reasons(deck, tmp_path):
    session = deck.session(workdir=tmp_path, excluded_categories={"email"}, max_level="moderate")
    hand = await session.select("read the notes file in my project folder and list the folder")
    assert 1 <= len(hand.tools) <= 12
    assert {"file_read", "list_dir"} <= set(hand.names)
    mail = await session.select("send an email to the team about the release")
    assert not any(t.category == "email" for t in mail.tools)
    removed = {e.name: e for e in mail.exclusions}
    assert any(deck.catalog.get(n).category == "email" for n in removed)
    assert all(e.reason and e.plugin == "policy" for e in mail.exclusions)
    assert all(t.security.level != "dangerous" for t in mail.tools)


async def test_fallback_widens_the_search_or_refuses_with_a_reason(deck, tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    session = deck.session(workdir=tmp_path, grants={"filesystem"}, excluded_categories={"email"})
    hand = await session.select("read the file a.txt", limit=3)
    assert "file_read" in hand.names
    # Not dealt with 3, but among the 40 tools most related to the task: it proceeds, noted.
    others = [n for n in ("list_dir", "file_write") if n not in hand.names]
    widened = await session.call(
        others[0], {"path": "."} if others[0] == "list_dir" else {"path": "b.txt", "content": "x"}
    )
    assert widened.success, widened.error
    assert widened.metadata["fallback"]["widened_to"] == 40
    # Excluded by a rule: PERMISSION_DENIED with the rule's reason.
    excluded = await session.call(
        "send_email", {"to": "a@example.org", "subject": "s", "body": "b"}
    )
    assert excluded.error.code is ErrorCode.PERMISSION_DENIED
    assert "email" in excluded.error.message
    # Invented name: TOOL_NOT_FOUND with the closest registered names.
    invented = await session.call("read_file", {"path": "a.txt"})
    assert invented.error.code is ErrorCode.TOOL_NOT_FOUND
    assert "file_read" in invented.error.details["candidates"]


async def test_pinned_and_sticky_tools_stay_in_the_hand(deck, tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    session = deck.session(workdir=tmp_path, pinned=["get_current_weather"])
    await session.select("read the file a.txt")
    assert (await session.call("file_read", {"path": "a.txt"})).success
    hand = await session.select("book a table for two at an italian restaurant")
    assert "file_read" in hand.names and "sticky" in hand.reasons["file_read"]
    assert "get_current_weather" in hand.names and "pinned" in hand.reasons["get_current_weather"]


@pytest.mark.parametrize(
    "task", ["", "x" * 10_000, "Lire le fichier de configuration et lister le dossier", "🙂" * 50]
)
async def test_bad_tasks_are_answered_cleanly(deck, task):
    hand = await deck.session().select(task)
    assert len(hand.tools) <= 12


@pytest.mark.parametrize(
    "task",
    [
        "read the config file in my project and list the folder",
        "search the web for trio structured concurrency. then save the result to notes.txt",
        "Find the latest price of ACME shares. Then email it to my manager. "
        "Also remind me to check again on Friday.",
        "run the unit tests. If they fail, show me the log. Finally commit the fix to git.",
        "resize every picture in the photos folder, then zip the folder and upload it",
    ],
)
async def test_the_hand_keeps_the_retrievers_spread_over_intents(deck, tmp_path, task):
    # The retriever spreads a compound task's tools over its intents; select sorts by score
    # after its rule filters, so the scores must carry that order. They once did not: the
    # hand re-sorted by the unspread scores differed from the retriever's on each of these.
    session = deck.session(workdir=tmp_path)
    hand = await session.select(task, limit=12)
    retrieved = [r.name for r in await deck._retriever.search(task, session.recall)]
    assert list(hand.names) == retrieved[: len(hand.names)]
