"""The summary view (``summary_view``): each tool's name and description alone as a second
vector in both dense channels, the tool scored by the closer of its two.

The wiring is checked against vectors encoded here from the texts themselves, through index
builds, additions, replacements, removals and the compaction they trigger: a view filed under
another tool's slot would silently rank the wrong tool. What the view is worth is measured on
the open sets (``test_open_sets_figures``).
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from tooldeck_faiss import dense_text
from tooldeck_faiss._text import summary_text, tool_texts

from tooldeck_hookspecs import ToolDefinition

QUERIES = [
    "what's the weather in Rome tomorrow",
    "send a note to alice by mail and list the folder",
    "how much is 40 dollars in euros",
]


def _tool(name: str, description: str, param: str = "") -> ToolDefinition:
    props = {param: {"type": "string", "description": param.title()}} if param else {}
    return ToolDefinition(name=name, description=description, category="api" if param else None,
                          parameters={"type": "object", "properties": props})


def _churned(handmade):
    """The catalog after a life of changes: 70 tools added and removed again (more dead slots
    than the compaction threshold), one description changed, one tool with no parameters."""
    extra = [_tool(f"extra_tool_{i}", f"Extra tool number {i} for testing.", "value")
             for i in range(70)]
    changed = attrs.evolve(handmade[3], description="Remove a file for good, no undo.")
    bare = _tool("ping_host", "Check that a host answers.")
    return extra, changed, bare


def test_the_summary_is_the_name_and_description_without_parameters(handmade):
    tool = handmade[7]  # send_email: three parameters
    assert summary_text(tool) == "send email: Send an email message to a recipient."
    assert dense_text(tool).startswith(summary_text(tool))
    assert "Recipient" in dense_text(tool) and "Recipient" not in summary_text(tool)
    bare = attrs.evolve(tool, parameters={}, category=None)
    assert summary_text(bare) == dense_text(bare)
    # Texts to embed: every full text, then only the summaries that differ from it.
    texts, differ = tool_texts([tool, bare], summary=True)
    assert texts == [dense_text(tool), dense_text(bare), summary_text(tool)] and differ == [0]
    assert tool_texts([tool, bare], summary=False) == ([dense_text(tool), dense_text(bare)], None)


async def test_each_tool_is_scored_by_the_closer_of_its_two_texts(make_retriever, handmade):
    extra, changed, bare = _churned(handmade)
    retriever = make_retriever(second_encoder="none")
    await retriever.index(handmade)
    await retriever.add([*extra, bare])
    await retriever.remove([t.name for t in extra])
    await retriever.add([changed])
    assert len(retriever._names) < len(handmade) + len(extra)  # compacted on the way
    live = {t.name: t for t in [*handmade, bare, changed]}
    assert set(retriever._slot_of) == set(live)
    names = list(live)
    full = retriever._encode([dense_text(live[n]) for n in names])
    summary = retriever._encode([summary_text(live[n]) for n in names])
    for i, name in enumerate(names):
        slot = retriever._slot_of[name]
        np.testing.assert_allclose(retriever._vectors[slot], full[i], atol=1e-5)
        np.testing.assert_allclose(retriever._views[slot], summary[i], atol=1e-5)
    for query in QUERIES:
        segments = retriever._query_segments(query)
        qvecs = retriever._embed_query(segments)
        found, _, dense = retriever._candidates(segments, qvecs)
        rows = [names.index(n) for n in found]
        expected = np.maximum(qvecs @ full[rows].T, qvecs @ summary[rows].T)
        np.testing.assert_allclose(dense, expected, atol=1e-5)
        # Where the summary is the closer text, the tool scores above its full text alone.
        assert (dense > qvecs @ full[rows].T + 1e-4).any()


async def test_off_scores_the_full_text_alone(make_retriever, handmade):
    retriever = make_retriever(second_encoder="none", summary_view=False)
    await retriever.index(handmade)
    assert retriever._views is None
    segments = retriever._query_segments(QUERIES[0])
    qvecs = retriever._embed_query(segments)
    found, _, dense = retriever._candidates(segments, qvecs)
    full = retriever._encode([dense_text(t) for n in found for t in handmade if t.name == n])
    np.testing.assert_allclose(dense, qvecs @ full.T, atol=1e-5)
    assert retriever.statistics().texts_embedded == len(handmade)


@pytest.mark.parametrize("approx_threshold", [20_000, 5], ids=["exact", "ivf"])
async def test_the_second_channel_keeps_each_tool_once_at_its_closer_text(
    make_retriever, handmade, approx_threshold
):
    extra, changed, bare = _churned(handmade)
    # ivf_nprobe covers every list: the scores are checked exactly, not the recall.
    retriever = make_retriever(approx_threshold=approx_threshold, ivf_nprobe=64)
    await retriever.index(handmade)
    await retriever.add([*extra, bare])
    await retriever.remove([t.name for t in extra])
    await retriever.add([changed])
    channel = retriever._dense2
    assert channel is not None and channel.active
    live = {t.name: t for t in [*handmade, bare, changed]}
    assert channel.names() == set(live)
    texts, differ = tool_texts(list(live.values()), summary=True)
    # Removed tools left no row behind, and a tool whose summary is its full text has one.
    assert channel._index.ntotal == len(texts) and bare.name not in [
        list(live)[i] for i in differ]
    full = channel._encode([dense_text(t) for t in live.values()])
    summary = channel._encode([summary_text(t) for t in live.values()])
    for query in QUERIES:
        hits = channel.search(query, len(live))
        assert len(hits) == len(live) == len({n for n, _ in hits})
        qvec = channel.query_vector(query)
        want = dict(zip(live, np.maximum(full @ qvec, summary @ qvec).tolist(), strict=True))
        for name, score in hits:
            assert score == pytest.approx(want[name], abs=1e-4), name
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        top3 = channel.search(query, 3)
        assert top3 == hits[:3]
    np.testing.assert_allclose(channel.vector(changed.name), full[list(live).index(changed.name)],
                               atol=1e-4)
    # Removing a tool removes its rows, one or two (the bare tool has no summary row).
    before = channel._index.ntotal
    await retriever.remove([bare.name, changed.name])
    assert channel._index.ntotal == before - 3
    assert {n for n, _ in channel.search(QUERIES[0], 50)} == set(live) - {bare.name, changed.name}


async def test_precomputed_vectors_leave_the_view_off_and_additions_still_rank(
    make_retriever, handmade
):
    retriever = make_retriever(second_encoder="none")
    vectors = retriever._encode([dense_text(t) for t in handmade])
    await retriever.index_vectors(handmade, vectors)
    assert retriever._views is None
    await retriever.add([_tool("play_music", "Play a song by an artist.", "song")])
    assert retriever._views is None  # no half-filled view: every slot or none
    hits = await retriever.search("play a song by Queen", 3)
    assert hits[0].name == "play_music"


async def test_precomputed_summary_vectors_are_used_in_both_channels(make_retriever, handmade):
    retriever = make_retriever()
    full = retriever._encode([dense_text(t) for t in handmade])
    summary = retriever._encode([summary_text(t) for t in handmade])
    rng = np.random.default_rng(3)
    second, second_views = (rng.standard_normal((len(handmade), 512)).astype(np.float32)
                            for _ in range(2))
    second /= np.linalg.norm(second, axis=1, keepdims=True)
    second_views /= np.linalg.norm(second_views, axis=1, keepdims=True)
    with pytest.raises(ValueError, match="view vectors"):
        await retriever.index_vectors(handmade, full, view_vectors=summary[:3])
    await retriever.index_vectors(handmade, full, view_vectors=summary,
                                  second_vectors=second, second_view_vectors=second_views)
    np.testing.assert_allclose(retriever._views, summary, atol=1e-6)
    assert retriever._dense2._index.ntotal == 2 * len(handmade)
    segments = retriever._query_segments(QUERIES[0])
    qvecs = retriever._embed_query(segments)
    found, _, dense = retriever._candidates(segments, qvecs)
    rows = [[t.name for t in handmade].index(n) for n in found]
    np.testing.assert_allclose(
        dense, np.maximum(qvecs @ full[rows].T, qvecs @ summary[rows].T), atol=1e-5)
