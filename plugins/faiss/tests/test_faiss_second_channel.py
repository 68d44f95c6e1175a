"""The second dense channel (multilingual Universal Sentence Encoder, ``second_encoder = "use"``):
requests in other languages find their tools, turning it off keeps the hybrid's ranking, its
vectors are cached, and run-time add/remove keep both indexes in step. Real models only."""

from __future__ import annotations

import pytest
from tooldeck_faiss._dense2 import channel_weight, looks_non_english

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
    off = make_retriever()
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
    plain = make_retriever(cache_dir=str(tmp_path / "a"))
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


@pytest.mark.parametrize(
    ("text", "foreign"),
    [("明天北京的天气怎么样", True), ("what is the weather in Paris", False),
     ("quiero saber el tiempo de la semana en Madrid", True)],
)
def test_the_gate(text, foreign):
    assert looks_non_english(text) is foreign
    single = channel_weight(text, 1, single=0.5, multi=0.2)
    assert single == 0.5
    assert channel_weight(text, 3, single=0.5, multi=0.2) == (0.5 if foreign else 0.2)
