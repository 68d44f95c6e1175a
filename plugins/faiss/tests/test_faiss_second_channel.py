"""The second dense channel (multilingual Universal Sentence Encoder, ``second_encoder = "use"``):
requests in other languages find their tools, turning it off keeps the hybrid's ranking, its
vectors are cached, and run-time add/remove keep both indexes in step. Real models only."""

from __future__ import annotations

import pytest
from tooldeck_faiss._dense2 import channel_weight, hybrid_margin, looks_non_english, mix_rankings

from tooldeck_hookspecs import ScoredTool

#: Requests MiniLM (an English model) does not place first among the handmade tools.
FOREIGN = {
    "給老闆寄一封郵件": "send_email",
    "¿Qué tiempo hará mañana en Madrid?": "get_weather",
    "envoyer un courriel à mon patron": "send_email",
    "오늘 서울 날씨": "get_weather",
}


def _first(results):
    return results[0].name


async def test_requests_in_other_languages_find_their_tool(make_retriever, handmade):
    off = make_retriever(second_encoder="none")
    on = make_retriever(second_encoder="use")
    await off.index(handmade)
    await on.index(handmade)
    wrong_without = 0
    for query, expected in FOREIGN.items():
        assert _first(await on.search(query, 5)) == expected, query
        wrong_without += _first(await off.search(query, 5)) != expected
    # The channel is what made the difference: the hybrid alone misses most of them.
    assert wrong_without >= 3
    # An English multi-intent request keeps both intents at the top.
    top = [r.name for r in await on.search("run a bash command. then commit the changes", 3)]
    assert {"run_shell_command", "git_commit"} <= set(top)


async def test_off_is_the_hybrid_and_vectors_are_cached(make_retriever, handmade, tmp_path):
    # The channel at weight 0 deals exactly what the hybrid alone ("none") deals.
    plain = make_retriever(
        cache_dir=str(tmp_path / "a"), second_encoder="use", second_weight=0.0,
        second_weight_multi=0.0,
    )
    off = make_retriever(cache_dir=str(tmp_path / "a"), second_encoder="none")
    await plain.index(handmade)
    await off.index(handmade)
    for query in ("read the config file and list the folder", "weather", *FOREIGN):
        assert [r.name for r in await plain.search(query, 8)] == [
            r.name for r in await off.search(query, 8)
        ]
    first = make_retriever(cache_dir=str(tmp_path / "b"), second_encoder="use")
    await first.index(handmade)
    second = make_retriever(cache_dir=str(tmp_path / "b"), second_encoder="use")
    await second.index(handmade)
    assert second._dense2 is not None and len(second._dense2) == len(handmade)
    # The second retriever's USE vectors came from the cache: equal to the first's.
    for tool in handmade[:3]:
        assert (second._dense2.vector(tool.name) == first._dense2.vector(tool.name)).all()


async def test_add_and_remove_keep_both_indexes_in_step(make_retriever, handmade):
    retriever = make_retriever(second_encoder="use")
    await retriever.index(handmade[:10])
    await retriever.add(handmade[10:])
    assert retriever._dense2.names() == {t.name for t in handmade}
    await retriever.remove(["get_weather", "send_email"])
    assert retriever._dense2.names() == {t.name for t in handmade} - {"get_weather", "send_email"}
    for query in FOREIGN:
        assert {r.name for r in await retriever.search(query, 10)}.isdisjoint(
            {"get_weather", "send_email"}
        )


async def test_approximate_indexes_deal_what_the_exact_ones_deal(make_retriever, handmade):
    # Above approx_threshold both channels switch to IVF; probing every list makes IVF exact,
    # so the hand must be the exact path's, for the hybrid and the multilingual channel alike.
    exact = make_retriever(second_encoder="use")
    approx = make_retriever(second_encoder="use", approx_threshold=5, ivf_nprobe=1_000)
    await exact.index(handmade)
    await approx.index(handmade)
    assert approx._approx and type(approx._dense2._index).__name__ == "IndexIVFFlat"
    queries = ["read the config file and list the folder", "weather in Paris", *FOREIGN]
    for query in queries:
        assert [r.name for r in await approx.search(query, 8)] == [
            r.name for r in await exact.search(query, 8)
        ], query
    # Run-time changes and vector lookups work on the IVF channel too.
    await approx.remove(["get_weather"])
    assert "get_weather" not in approx._dense2.names()
    assert all(r.name != "get_weather" for r in await approx.search("오늘 서울 날씨", 10))
    await approx.add([t for t in handmade if t.name == "get_weather"])
    assert _first(await approx.search("오늘 서울 날씨", 5)) == "get_weather"
    assert approx._dense2.vector("get_weather").shape == (512,)


@pytest.mark.parametrize(
    ("text", "foreign"),
    [("明天北京的天气怎么样", True), ("what is the weather in Paris", False),
     ("quiero saber el tiempo de la semana en Madrid", True),
     ("¿Qué tiempo hará mañana en Madrid?", True),
     ("send my résumé to the team", False)],
)
def test_the_gate(text, foreign):
    assert looks_non_english(text) is foreign
    single = channel_weight(text, 1, single=0.5, multi=0.2)
    assert single == 0.5
    assert channel_weight(text, 3, single=0.5, multi=0.2) == (0.5 if foreign else 0.2)
    # A clear hybrid winner shrinks the share of English requests only.
    clear = channel_weight(text, 1, single=0.5, multi=0.2, margin=0.6, margin_scale=1.0)
    assert clear == pytest.approx(0.5 if foreign else 0.2)


def _scored(*scores):
    return [ScoredTool(name=f"t{i}", score=s) for i, s in enumerate(scores)]


@pytest.mark.parametrize(
    ("scores", "margin"),
    [((0.9, 0.9, 0.1), 0.0),  # a tie at the top: the second channel decides
     ((1.0, 0.5, 0.0), 0.5),
     ((1.0, 0.0, 0.0), 1.0),  # a clear winner
     ((0.4, 0.4, 0.4), 0.0),  # no spread at all
     ((0.7,), 1.0)],
)
def test_the_hybrids_margin(scores, margin):
    assert hybrid_margin(_scored(*scores)) == pytest.approx(margin)


async def test_a_clear_hybrid_winner_shrinks_the_second_channel(make_retriever, handmade):
    """With ``second_margin_scale = 1`` the weight falls to nothing where the hybrid's winner
    stands clear, so the second channel can only reorder where the hybrid hesitates."""
    full = make_retriever(second_encoder="use", second_margin_scale=0.0)
    scaled = make_retriever(second_encoder="use", second_margin_scale=1.0)
    await full.index(handmade)
    await scaled.index(handmade)
    query = "send an email to my boss"
    segments = full._query_segments(query)
    hybrid = full._rank(segments, full._embed_query(segments), 100)
    margin = hybrid_margin(hybrid)
    assert 0.0 < margin < 1.0
    names = lambda hits: [h.name for h in hits]  # noqa: E731
    # The same query, both retrievers: the winner stays and the mix differs only by weight.
    a, b = await full.search(query, 10), await scaled.search(query, 10)
    assert a[0].name == b[0].name == "send_email"
    second = [(n, c) for n, c in full._dense2.search(query, 100) if n in full._slot_of]
    assert names(b) == names(mix_rankings(hybrid, second, 0.5 * (1.0 - margin), 10))
    assert names(a) == names(mix_rankings(hybrid, second, 0.5, 10))
    assert [h.score for h in a] != [h.score for h in b]  # the margin did change the mix


def test_the_mix_keeps_the_history_lift_whole():
    """A tool the deployment used for this task keeps its lead through the mix: the lift is
    taken out before the min-max of the hybrid scores and added back after."""
    hits = [
        ScoredTool(name="used_before", score=1.2, signals={"history": 0.9}),
        ScoredTool(name="look_alike", score=1.0, signals={}),
        ScoredTool(name="other", score=0.1, signals={}),
    ]
    second = [("look_alike", 0.9), ("other", 0.5), ("used_before", 0.1)]
    mixed = mix_rankings(hits, second, 0.5, 3)
    assert mixed[0].name == "used_before"
    without = mix_rankings(
        [ScoredTool(name=h.name, score=h.score - h.signals.get("history", 0.0)) for h in hits],
        second, 0.5, 3,
    )
    assert without[0].name == "look_alike"  # the lift, not the similarity, put it first
    by_name = {m.name: m.score for m in mixed}
    plain = {w.name: w.score for w in without}
    assert by_name["used_before"] == pytest.approx(plain["used_before"] + 0.9)


def test_the_mix_spreads_over_intents_again():
    """Three near-duplicates answer the first intent, one tool the second: sorting the mix by
    score deals only the duplicates; with the intents and a diversity the second intent's tool
    gets a slot, as in the hybrid's own order."""
    hits = [
        ScoredTool(name="read_a", score=1.00),
        ScoredTool(name="read_b", score=0.98),
        ScoredTool(name="read_c", score=0.97),
        ScoredTool(name="list_dir", score=0.90),
        ScoredTool(name="unrelated", score=0.10),
    ]
    intents = [0, 0, 0, 1, 2]
    second = [("read_a", 0.9), ("read_b", 0.9), ("read_c", 0.9), ("list_dir", 0.5),
              ("only_second", 0.4)]
    plain = [h.name for h in mix_rankings(hits, second, 0.1, 3)]
    assert plain == ["read_a", "read_b", "read_c"]
    # A pick costs its intent 0.1 in the hybrid's units: read_c (0.97 mixed) falls below
    # list_dir (0.82) after two picks of its intent, read_b (0.98) not after one.
    spread = mix_rankings(hits, second, 0.1, 3, intents=intents, other_intent=2, diversity=0.1)
    assert [h.name for h in spread] == ["read_a", "read_b", "list_dir"]
    # Scores never rise along the order (a caller sorting by score keeps it): a second pick
    # of an intent is lowered by the penalty, the first ones keep their mixed score.
    scores = [h.score for h in spread]
    assert scores == sorted(scores, reverse=True)
    by_name = {h.name: h.score for h in mix_rankings(hits, second, 0.1, 5)}
    assert spread[0].score == pytest.approx(by_name["read_a"])
    assert spread[2].score == pytest.approx(by_name["list_dir"])
    assert spread[1].score == pytest.approx(by_name["read_b"] - 0.1 * 0.9 / 0.9)
    # Diversity 0 is the plain order; tools only the channel found have an intent too.
    assert [h.name for h in mix_rankings(hits, second, 0.1, 3, intents=intents)] == plain
    assert len(mix_rankings(hits, second, 0.1, 6, intents=intents, other_intent=2,
                            diversity=0.1)) == 6


async def test_a_forked_child_selects_with_its_own_side_thread(handmade, tmp_path):
    # The USE query vector is computed on a side thread; a child forked after a selection
    # inherits the pool without its thread and must not wait on it forever (without the fork
    # hook this test waits its 60 s and fails). The default ONNX encoder, not the tests'
    # shared torch model: torch's own thread pool does not survive a fork.
    import os
    import select

    from tooldeck_faiss import FaissRetriever, RetrieverSettings

    retriever = FaissRetriever(
        RetrieverSettings(cache_dir=str(tmp_path), second_encoder="use", history=False)
    )
    await retriever.index(handmade)
    assert _first(retriever._search_sync("오늘 서울 날씨", 5)) == "get_weather"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one new (uncached) selection, its answer through the pipe
        try:
            os.write(write, retriever._search_sync("給老闆寄一封郵件", 5)[0].name.encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], 60)
        answer = os.read(read, 100).decode() if ready else None
    finally:
        os.close(read)
        if not ready:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert answer == "send_email", "the child's selection hung or failed"
