"""Recall, persistence, run-time changes, approximate index and bad input, with the real model."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from tooldeck_faiss import FaissRetriever, RetrieverSettings, dense_text, segment_query
from tooldeck_faiss._store import EmbeddingStore
from tooldeck_faiss._text import (
    REQUEST_VERBS,
    query_terms,
    strip_quoted,
    tokenize,
    tool_texts,
)
from tooldeck_faiss.plugin import tooldeck_retriever

from tooldeck_hookspecs import ConfigError, ToolDefinition


def names(results):
    return [r.name for r in results]


# ---------------------------------------------------------------- recall


@pytest.mark.parametrize(
    ("query", "expected", "within"),
    [
        ("What's the weather going to be like in Paris tomorrow?", {"get_weather"}, 1),
        # no word in common with the tool: the dense signal has to find it
        ("Will I need an umbrella in Rome?", {"get_weather"}, 3),
        ("How many dollars is 50 euros?", {"convert_currency"}, 2),
        ("Show me what is inside the config.toml file", {"file_read"}, 2),
        ("Put my dentist appointment on Friday at 3pm in the agenda", {"create_calendar_event"}, 3),
        ("What is Apple trading at right now?", {"getStockPrice"}, 3),
        # several intents: each brings its own tool into a small hand
        (
            "Look up the current share price of ACME. Then email the figure to my boss. "
            "Also remind me tomorrow at 9 to check it again.",
            {"getStockPrice", "send_email", "set_reminder"},
            5,
        ),
        (
            "Download https://example.com/report and summarize it. "
            "Translate the summary into German.",
            {"fetch_url", "summarize_text", "translate_text"},
            5,
        ),
    ],
)
async def test_handmade_catalog_recall(make_retriever, handmade, query, expected, within):
    retriever = make_retriever()
    await retriever.index(handmade)
    top = names(await retriever.search(query, within))
    assert expected <= set(top), top


async def test_signals_and_order(make_retriever, handmade):
    retriever = make_retriever()
    await retriever.index(handmade)
    results = await retriever.search("run a bash command. then commit the changes to git", 6)
    assert len(results) == 6
    scores = [r.score for r in results]
    assert scores == sorted(scores, reverse=True)
    for r in results:
        assert {"dense", "bm25", "fused"} <= set(r.signals)
        # A score is at most the tool's own (the spread over intents lowers the second and
        # later picks of one intent, which keeps the order when the core sorts by score).
        if "dense2" in r.signals:  # mixed with the second channel: its two parts' mix
            assert r.score <= max(r.signals["hybrid"], r.signals["dense2"]) + 1e-9
        else:
            assert r.score <= r.signals["fused"] + 1e-9
    assert {"run_shell_command", "git_commit"} <= set(names(results[:3]))
    # Each tool says which part of the compound request it serves.
    by_name = {r.name: r.reason for r in results}
    assert by_name["run_shell_command"].startswith('for "run a bash command"')
    assert by_name["git_commit"].startswith('for "then commit the changes to git"')


@pytest.mark.parametrize(
    ("signals", "intent", "reason"),
    [
        ({"lexical_share": 0.5, "bm25": 1.0, "dense": 0.2}, None, "by words"),
        ({"lexical_share": 0.5, "bm25": 0.1, "dense": 0.9}, None, "by meaning"),
        ({"lexical_share": 0.4, "bm25": 0.8, "dense": 0.7}, "list it.",
         'for "list it", by words and meaning'),
        # Brought in by past use only: no channel to name.
        ({"lexical_share": 0.4, "bm25": 0.0, "dense": 0.0, "history": 0.8}, None,
         "used before for a similar task"),
        ({"lexical_share": 0.4, "bm25": 0.0, "dense": 0.9}, "x" * 60,
         'for "' + "x" * 45 + '...", by meaning'),
    ],
)
def test_reasons_name_the_intent_the_channel_and_past_use(signals, intent, reason):
    from tooldeck_faiss._retriever import _reason

    assert _reason(signals, intent) == reason


def test_tool_text_has_all_fields(handmade):
    text = dense_text(handmade[16])  # getStockPrice
    assert text.startswith("get Stock Price:")
    assert "finance" in text and "ticker" in text and "Stock symbol" in text


def test_segmentation():
    assert segment_query("") == []
    assert segment_query("Read the notes.txt file. Then delete the old backup folder. Thanks!") == [
        "Read the notes.txt file.",
        "Then delete the old backup folder. Thanks!",
    ]
    assert segment_query("single sentence without a stop") == ["single sentence without a stop"]
    long = segment_query("Do task number %d now please. " * 100, max_segments=5)
    assert len(long) == 5 and all(len(s) <= 1000 for s in long)
    # A prompt whose request comes last keeps it: a long merged tail starts with its last
    # sentence (the embedding model reads 256 tokens); a short tail is merged in order.
    rules = " ".join(f"Rule {i}: keep the persona and answer politely." for i in range(200))
    prompt = segment_query(f"{rules} Now read the config file in my project.", max_segments=5)
    assert len(prompt) == 5 and all(len(s) <= 1000 for s in prompt)
    assert prompt[-1].startswith("Now read the config file in my project. Rule 4:")
    short = segment_query("Read the notes file. Send the weekly mail. List every folder now.",
                          max_segments=2)
    assert short == ["Read the notes file.", "Send the weekly mail. List every folder now."]


def test_and_also_separates_two_requests():
    # "and also" / "and finally" without a comma announce a second request as ", also" does:
    # "add 1 and 2 together and also tell me the time" dealt only clock tools before.
    for connective in ("and also", "and additionally", "and finally", "and lastly",
                       "and afterwards", "and after that", ", and also", ", also"):
        query = f"Could you add 1 and 2 together {connective} tell me the time in Berlin?"
        assert segment_query(query.replace(" ,", ",")) == [
            "Could you add 1 and 2 together", "tell me the time in Berlin?"], connective
    # "also" alone, or "and next" (a week, a page), joins the parts of one request.
    for query in ("I also want the weather report for Paris today",
                  "Book the flight to Rome and next week's hotel in Milan",
                  "Fetch the sales and also the returns"):
        assert segment_query(query) == [query]


def test_quoted_values_are_not_steps():
    verbs = REQUEST_VERBS
    for query in ("Translate 'read the file and delete the folder' into French",
                  'Search the web for "cheap flights, then hotels" please',
                  "Look up ‘how they’re made, and sort the list’ on the web",
                  "Open the journal «Science and read the news» for me"):
        segments = segment_query(query, verbs=verbs)
        assert not any(s.count("'") % 2 or s.count('"') % 2 for s in segments), segments
        assert query in segments or segments == [query], segments
    # Outside the quotes the request is still split, and every character comes back.
    assert segment_query("Translate 'the read me' and list the folder", verbs=verbs) == [
        "Translate 'the read me'", "list the folder"]
    # A quoted span holding whole sentences is split as before (Seal-Tools writes steps so).
    assert len(segment_query("Do this: 'Read the notes file. Delete the old folder.'")) == 2
    # An apostrophe, or a stray quote, is not a span.
    assert segment_query("What's Shishir's birthday and read the memory file",
                         verbs=verbs) == ["What's Shishir's birthday", "read the memory file"]


def test_strip_quoted_keeps_the_request():
    assert strip_quoted("Find information on 'the history of kites and how they're made'?") \
        == "Find information on  ?"
    assert strip_quoted('Search online for "translate text" now') == "Search online for   now"
    assert strip_quoted("Play “Baby Shark” and ‘Let It Be’ loudly") == "Play   and   loudly"
    # Apostrophes are not quotes; too little left means the text stays as it was.
    assert strip_quoted("What's Shishir's birthday?") == "What's Shishir's birthday?"
    assert strip_quoted("Search 'Baby Shark'") == "Search 'Baby Shark'"
    assert strip_quoted("no quotes at all") == "no quotes at all"
    # One pass over a line full of opening quotes that never close (a scan from each quote
    # to the line's end would take hours here), and over a line full of spans.
    bait = " 'a it's b" * 100_000
    assert strip_quoted(bait) == bait
    assert segment_query(bait + " and read the file", verbs=REQUEST_VERBS)[-1] == "read the file"
    spans = " 'a b' it's" * 100_000
    assert strip_quoted(spans) == "   it's" * 100_000


async def test_quoted_values_do_not_steer_the_embedding(make_retriever, handmade):
    # The dense signal of "find information on '<words of another tool>'" is about the
    # request, not the quoted value; BM25 still reads the value (a quoted word can name a tool).
    on, off = make_retriever(strip_quoted=True), make_retriever(strip_quoted=False)
    await on.index(handmade)
    await off.index(handmade)
    query = "Find some information on 'the weather and the currency exchange rates'"
    assert on._encode([strip_quoted(query)]).tolist() == on._embed_query([query])[0:1].tolist()
    assert off._encode([query]).tolist() == off._embed_query([query])[0:1].tolist()
    found_on, found_off = names(await on.search(query, 4)), names(await off.search(query, 4))
    assert "web_search" in found_on and "web_search" not in found_off


def test_numbers_are_values_not_terms():
    assert query_terms("I have 100$ and donated 40, ID 3726, add 1 and 2") == tokenize(
        "I have $ and donated, ID, add and") == ["donat", "id", "add"]
    # Words with digits in them keep their letters (tokenize splits the digits off).
    assert query_terms("convert the mp3 and list ec2 hosts") == ["convert", "mp", "list", "ec",
                                                                 "host"]


async def test_numbers_do_not_match_numbered_tool_names(make_retriever, handmade):
    numbered = [
        ToolDefinition(name=f"{area}_1_{verb}", description=text, category="api",
                       parameters={"type": "object", "properties": {}})
        for area, verb, text in (("buses", "find_bus", "Find a bus journey between cities."),
                                 ("media", "find_movies", "Find movies showing nearby."),
                                 ("volume", "set", "Set the speaker volume from 1 to 100."))
    ]
    retriever = make_retriever()
    await retriever.index([*handmade, *numbered])
    hits = await retriever.search("Could you add 1 and 100 together?", 40)
    lexical = {h.name: h.signals["bm25"] for h in hits}
    assert all(lexical.get(t.name, 0.0) == 0.0 for t in numbered), lexical
    assert lexical["create_calendar_event"] > 0  # "Add an event ...": the word still counts
    # A request made of numbers alone leaves the ranking to the embedding.
    only = await retriever.search("3726 100 40", 5)
    assert only and all(h.signals["bm25"] == 0.0 for h in only)


# ---------------------------------------------------------------- persistence


async def test_warm_start_embeds_nothing(make_retriever, handmade):
    # Each tool's full text, and its summary where that differs (summary_view).
    texts, _ = tool_texts(handmade, summary=True)
    assert len(handmade) < len(texts) <= 2 * len(handmade)
    cold = make_retriever()
    await cold.index(handmade)
    assert cold.statistics().texts_embedded == len(set(texts))

    warm = make_retriever()  # same cache folder, a new process would look the same
    await warm.index(handmade)
    stats = warm.statistics()
    assert stats.texts_embedded == 0 and stats.encode_calls == 0
    assert stats.cache_hits == len(texts)
    query = "send a message to alice by mail"
    assert names(await warm.search(query, 5)) == names(await cold.search(query, 5))

    # only the changed tool is embedded again
    changed = [*handmade[:-1], attrs.evolve(handmade[-1], description="Run Python code.")]
    again = make_retriever()
    await again.index(changed)
    assert again.statistics().texts_embedded == len(tool_texts(changed[-1:], summary=True)[0])


def test_store_concurrent_writers_and_merge(tmp_path):
    a = EmbeddingStore(tmp_path, "m")
    b = EmbeddingStore(tmp_path, "m")
    a.put_many(["k1"], np.ones((1, 4), dtype=np.float32))
    b.put_many(["k2"], np.full((1, 4), 2.0, dtype=np.float32))
    fresh = EmbeddingStore(tmp_path, "m")
    got = fresh.get_many(["k1", "k2", "k3"])
    assert set(got) == {"k1", "k2"} and got["k2"][0] == 2.0
    for i in range(12):  # enough chunks to trigger a merge
        a.put_many([f"x{i}"], np.zeros((1, 4), dtype=np.float32))
    assert len(list((tmp_path / "m").glob("chunk-*.npz"))) <= 9
    every = ["k1", "k2", *(f"x{i}" for i in range(12))]
    assert len(EmbeddingStore(tmp_path, "m").get_many(every)) == 14
    assert not list((tmp_path / "m").glob(".tmp-*"))


# ---------------------------------------------------------------- run-time changes


async def test_add_remove_replace_without_rebuild(make_retriever, handmade):
    retriever = make_retriever()
    await retriever.index(handmade)
    query = "play a song by the beatles"
    assert "play_music" not in names(await retriever.search(query, 3))

    music = ToolDefinition(name="play_music", description="Play a song or an album.",
                           category="media", parameters={"type": "object", "properties": {}})
    await retriever.add([music])
    assert names(await retriever.search(query, 1)) == ["play_music"]
    assert retriever.statistics().tools == len(handmade) + 1

    await retriever.remove(["play_music", "get_weather", "no_such_tool"])
    assert retriever.statistics().tools == len(handmade) - 1
    results = names(await retriever.search("weather forecast for Oslo and a song", 25))
    assert "play_music" not in results and "get_weather" not in results

    # replacing a tool under the same name changes what it is found for
    weather = attrs.evolve(handmade[8], description="Tide tables for a harbour.")
    await retriever.add([weather])
    assert names(await retriever.search("high tide times in the harbour", 1)) == ["get_weather"]
    hand = names(await retriever.search("high tide times in the harbour", 40))
    assert hand.count("get_weather") == 1


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
async def test_approximate_index_above_threshold(make_retriever, handmade, kind):
    retriever = make_retriever(approx_threshold=5, approx_kind=kind)
    await retriever.index(handmade)
    assert retriever.statistics().index_kind == kind
    assert "get_weather" in names(await retriever.search("weather forecast in Lisbon", 3))
    await retriever.remove(["get_weather"])
    assert "get_weather" not in names(await retriever.search("weather forecast in Lisbon", 20))
    if kind == "hnsw":
        assert retriever.statistics().tombstones == 1
    await retriever.add([handmade[8]])
    assert "get_weather" in names(await retriever.search("weather forecast in Lisbon", 3))

    small = make_retriever(approx_threshold=100)
    await small.index(handmade)
    assert small.statistics().index_kind == "flat"


async def test_index_vectors_injects_precomputed(make_retriever, handmade):
    retriever = make_retriever()
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(len(handmade), 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    await retriever.index_vectors(handmade, vectors)
    assert retriever.statistics().texts_embedded == 0
    # the lexical signal still works on random vectors
    assert "git_commit" in names(await retriever.search("git commit my changes", 3))
    with pytest.raises(ValueError, match="vectors"):
        await retriever.index_vectors(handmade, vectors[:3])


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "query",
    ["", "   \n\t ", "?!.;", "Wie wird das Wetter morgen in Berlin?", "明天北京的天气怎么样？",
     "x" * 10_000, "Read the file. " * 700, "\x00\ud800 broken"],
)
async def test_bad_queries_answered_cleanly(make_retriever, handmade, query):
    retriever = make_retriever()
    await retriever.index(handmade)
    results = await retriever.search(query, 10)
    assert isinstance(results, list) and len(results) <= 10
    assert len({r.name for r in results}) == len(results)


async def test_empty_catalog_and_zero_k(make_retriever, handmade):
    retriever = make_retriever()
    assert await retriever.search("read a file", 5) == []
    await retriever.index([])
    assert await retriever.search("read a file", 5) == []
    await retriever.add(handmade[:2])
    assert await retriever.search("read a file", 0) == []
    assert names(await retriever.search("read a file", 1)) == ["file_read"]


# ---------------------------------------------------------------- the hook


def test_hook_reads_its_table(tmp_path):
    retriever = tooldeck_retriever({"faiss": {"cache_dir": str(tmp_path), "lexical_weight": 0.45}})
    assert isinstance(retriever.retriever, FaissRetriever)
    assert retriever.settings.lexical_weight == 0.45
    assert isinstance(tooldeck_retriever({}).retriever, FaissRetriever)
    with pytest.raises(ConfigError, match="lexical_wieght"):
        tooldeck_retriever({"faiss": {"lexical_wieght": 0.4}})
    with pytest.raises(ConfigError):
        RetrieverSettings.from_mapping({"approx_kind": "lsh"})


async def test_lazy_model_load_from_settings(tmp_path, handmade):
    retriever = tooldeck_retriever({"faiss": {"cache_dir": str(tmp_path)}})
    assert retriever._model is None  # nothing loaded at start-up
    await retriever.index(handmade[:3])
    assert names(await retriever.search("list the files in a folder", 1)) == ["list_directory"]


async def test_repeated_query_is_not_embedded_again(make_retriever, handmade):
    retriever = make_retriever()
    await retriever.index(handmade)
    query = "Read the notes file. Then email its summary to Bob."
    first = await retriever.search(query, 20)
    calls = retriever.statistics().encode_calls
    assert await retriever.search(query, 40) != [] and retriever.statistics().encode_calls == calls
    assert names((await retriever.search(query, 40))[:20]) == names(first)


async def test_concurrent_searches_and_changes(make_retriever, handmade):
    import trio

    retriever = make_retriever()
    await retriever.index(handmade[:10])
    results: list[list[str]] = []

    async def search(i: int) -> None:
        results.append(names(await retriever.search(f"read file number {i}. then list folder", 5)))

    async with trio.open_nursery() as nursery:
        for i in range(8):
            nursery.start_soon(search, i)
        nursery.start_soon(retriever.add, handmade[10:])
        nursery.start_soon(retriever.remove, ["delete_file"])
    assert len(results) == 8 and all("file_read" in r for r in results)
    assert retriever.statistics().tools == len(handmade) - 1


def test_the_plugin_names_every_setting():
    # plugin.py spells the keys out so that loading it imports no numpy: keep them in step.
    from tooldeck_faiss.plugin import SETTING_NAMES

    assert list(SETTING_NAMES) == [field.name for field in attrs.fields(RetrieverSettings)]


async def test_the_hook_builds_the_retriever_at_first_use(tmp_path, handmade):
    from tooldeck_faiss.plugin import LazyFaissRetriever

    retriever = tooldeck_retriever({"faiss": {"cache_dir": str(tmp_path), "approx_kind": "lsh"}})
    assert isinstance(retriever, LazyFaissRetriever) and not retriever.built
    await retriever.aclose()  # closing an unbuilt retriever builds nothing
    assert not retriever.built
    with pytest.raises(ConfigError):  # a bad value surfaces at first use
        await retriever.index(handmade[:3])
    good = tooldeck_retriever({"faiss": {"cache_dir": str(tmp_path)}})
    await good.index(handmade[:3])
    assert good.built and isinstance(good.retriever, FaissRetriever)
    assert good.settings.cache_dir == str(tmp_path)
    await good.aclose()


# A request body nested two levels deep, as OpenAPI-made and pydantic-made tools have it.
_NESTED = {
    "type": "object",
    "$defs": {
        "Mode": {"type": "string", "description": "Job mode of the air conditioner.",
                 "enum": ["AIR_CLEAN", "COOL", "AIR_DRY"]},
        "Loop": {"type": "object", "properties": {"again": {"$ref": "#/$defs/Loop"}}},
    },
    "properties": {
        "body": {
            "type": "object",
            "description": "The appliance command.",
            "properties": {
                "jobMode": {"anyOf": [{"$ref": "#/$defs/Mode"}, {"type": "null"}]},
                "windStrength": {"type": "string", "enum": ["LOW", "MID", "HIGH"]},
                "schedule": {
                    "type": "array",
                    "items": {"type": "object", "properties": {
                        "hourToStop": {"type": "integer", "description": "Hours until it stops."}
                    }},
                },
            },
        },
        "loop": {"$ref": "#/$defs/Loop"},
    },
}


def test_nested_parameters_are_tool_text():
    from tooldeck_faiss._text import MAX_DEPTH, MAX_PARAMS, lexical_fields, schema_params

    names = [name for name, _ in schema_params(_NESTED)]
    # Depth-first in declared order: objects, array items, $refs and Optional members.
    assert names[:5] == ["body", "jobMode", "windStrength", "schedule", "hourToStop"]
    # A self-referencing $ref stops at MAX_DEPTH levels instead of looping.
    assert names[5:] == ["loop"] + ["again"] * (MAX_DEPTH - 1)
    tool = ToolDefinition(name="thin_q_connect", description="Send a command to an appliance.",
                          category="home", parameters=_NESTED)
    fields = lexical_fields(tool)
    assert "job Mode" in fields["param_names"] and "hour To Stop" in fields["param_names"]
    assert "Job mode of the air conditioner." in fields["param_descriptions"]
    assert fields["param_values"].split() == ["AIR_CLEAN", "COOL", "AIR_DRY", "LOW", "MID", "HIGH"]
    assert "job Mode (Job mode of the air conditioner.)" in dense_text(tool)
    # One tool's schema cannot grow without bound.
    wide = {"type": "object", "properties": {
        f"p{i}": {"type": "object", "properties": {f"q{i}_{j}": {"type": "string"}
                                                   for j in range(10)}}
        for i in range(100)
    }}
    assert len(schema_params(wide)) == MAX_PARAMS
    for broken in (None, [], {"properties": []}, {"properties": {"a": 3}}, {"$ref": "#/nowhere"}):
        schema_params(broken)  # type: ignore[arg-type]  # malformed schemas are read, not raised on
    # OpenAPI's composition: allOf members' properties merge; a self-including allOf and a
    # wide one stop at the resolution budget.
    composed = {"type": "object", "$defs": {
        "Base": {"properties": {"id": {"type": "string"}}},
        "Loop": {"allOf": [{"$ref": "#/$defs/Loop"}] * 50},
    }, "properties": {
        "pet": {"allOf": [{"$ref": "#/$defs/Base"},
                          {"properties": {"breed": {"type": "string", "enum": ["PUG"]}}}]},
        "loop": {"$ref": "#/$defs/Loop"},
    }}
    assert [name for name, _ in schema_params(composed)] == ["pet", "id", "breed", "loop"]


async def test_a_request_finds_a_tool_by_its_nested_parameters(make_retriever, handmade):
    # The air conditioner is named only inside the nested body: the tool must still be dealt.
    appliance = ToolDefinition(name="thin_q_connect", description="Send a command to a device.",
                               category="home", parameters=_NESTED)
    retriever = make_retriever()
    await retriever.index([*handmade, appliance])
    top = [r.name for r in await retriever.search("set the air conditioner to COOL mode", 3)]
    assert top[0] == "thin_q_connect"
