"""A task of any length costs selection a bounded amount of work, and says when it was cut.

Agents pass transcripts and documents as the task. A 1 MB task took about a minute of a core in
the FAISS retriever (its second channel reads every token) and was kept whole in the hand, the
history and the query caches. Now selection reads ``hand.max_task_chars`` of it: the beginning
and the end, where a document's instruction and a transcript's latest request are.

Real stages where it matters: the last test deals from MiniLM + FAISS over the demo catalog.
"""

from __future__ import annotations

import base64
import os

import pytest
import trio

from tooldeck import tool
from tooldeck._catalog_data import load_demo_catalog
from tooldeck._deck import DEFAULT_MAX_TASK_CHARS, _bounded_task
from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck
from tooldeck_hookspecs import ConfigError

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@tool(category="demo")
def read_notes() -> str:
    """Read the notes file."""
    return "notes"


@tool(category="demo")
def send_invoice() -> str:
    """Send an invoice by email."""
    return "sent"


class _Recording(KeywordRetriever):
    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    async def search(self, query, k):
        self.queries.append(query)
        return await super().search(query, k)


def _deck(retriever: _Recording, **hand):
    return make_deck(
        inline_plugin(tooldeck_retriever=lambda settings: retriever, name="words"),
        load_entry_points=["schema", "runner", "policy"], tools=[read_notes, send_invoice],
        config={"hand": hand} if hand else None,
    )


FILLER = "lorem ipsum dolor sit amet " * 40_000  # ~1 MB of words that match no tool


@pytest.mark.parametrize("where", ["start", "end"])
async def test_a_huge_task_is_read_by_its_beginning_and_its_end(where: str) -> None:
    request = "please send the invoice by email"
    task = f"{request}. {FILLER}" if where == "start" else f"{FILLER} {request}."
    retriever = _Recording()
    async with _deck(retriever) as deck:
        with trio.fail_after(30):
            hand = await deck.session().select(task)
    assert hand.names[0] == "send_invoice"  # the request was read, wherever it was
    (seen,) = retriever.queries
    assert len(seen) <= DEFAULT_MAX_TASK_CHARS + 3  # the two halves and the mark between
    assert seen.startswith(task[:100]) and seen.endswith(task[-100:])
    assert len(hand.query) <= DEFAULT_MAX_TASK_CHARS + 3
    (note,) = [p for p in hand.problems if "max_task_chars" in p]
    assert f"{len(task):,} characters" in note


async def test_a_task_within_the_bound_is_read_whole_and_not_flagged() -> None:
    retriever = _Recording()
    task = "please send the invoice by email. " * 200  # 6,800 characters
    async with _deck(retriever) as deck:
        hand = await deck.session().select(task)
    assert retriever.queries == [task]
    assert hand.problems == ()


async def test_the_bound_is_a_setting_and_bad_values_are_refused() -> None:
    retriever = _Recording()
    async with _deck(retriever, max_task_chars=1_000) as deck:
        hand = await deck.session().select("x " * 5_000)
    assert len(retriever.queries[0]) <= 1_003
    assert any("hand.max_task_chars = 1,000" in p for p in hand.problems)
    for bad in (0, 199, "long", 1.5):
        with pytest.raises(ConfigError, match="max_task_chars"):
            async with _deck(_Recording(), max_task_chars=bad):
                pass


async def test_a_task_that_is_not_text_is_a_type_error() -> None:
    async with _deck(_Recording()) as deck:
        session = deck.session()
        for bad in (None, 42, b"read the notes", ["read", "notes"]):
            with pytest.raises(TypeError, match="task must be a string"):
                await session.select(bad)  # type: ignore[arg-type]


def test_the_cut_keeps_whole_words_and_counts_what_it_kept() -> None:
    task = " ".join(f"w{i}" for i in range(10_000))
    shown, note = _bounded_task(task, 1_000)
    head, tail = shown.split("\n…\n")
    assert task.startswith(head) and task.endswith(tail)
    assert head.split(" ")[-1] in task.split(" ") and tail.split(" ")[0] in task.split(" ")
    assert note is not None and f"first {len(head):,}" in note and f"last {len(tail):,}" in note
    # No space anywhere: cut where the halves end.
    shown, _ = _bounded_task("a" * 5_000, 1_000)
    assert shown == "a" * 500 + "\n…\n" + "a" * 500
    assert _bounded_task("short", 1_000) == ("short", None)


async def test_the_real_retriever_deals_for_a_request_that_carries_a_megabyte() -> None:
    # "Do X with this: <a whole document>". Before, this selection kept a core busy for about
    # a minute (the second channel embedded all of it) and the hand held the megabyte.
    attachment = base64.b64encode(bytes(range(256)) * 3_000).decode()
    task = f"Get the README file contents from our GitHub repository, then decode: {attachment}"
    assert len(task) > 1_000_000
    async with make_deck(load_entry_points=["schema", "runner", "faiss"],
                         tools=list(load_demo_catalog())) as deck:
        with trio.fail_after(120):
            hand = await deck.session().select(task)
    assert hand.names[0] == "github_get_file_contents"
    assert len(hand.query) <= DEFAULT_MAX_TASK_CHARS + 3
    assert any("max_task_chars" in p for p in hand.problems)
