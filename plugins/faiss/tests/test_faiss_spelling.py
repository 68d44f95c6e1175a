"""Misspelt request words are read as the catalog's words, and nothing else is changed."""

from __future__ import annotations

from collections import Counter

import pytest
from tooldeck_faiss._retriever import default_model_path
from tooldeck_faiss._spelling import MAX_LOOKUPS, Speller, load_known_words

# A small stand-in for the English word list: the unit tests must not depend on which words
# pyspellchecker's list happens to hold.
KNOWN = frozenset(
    "search searches web weather drive list files information complaint california tomorrow "
    "university translate remind remember kite kits warn nodes cloud temperature actual "
    "delete document".split()
)
CATALOG_TEXTS = [
    "web search: search the web and return links",
    "get weather: current weather and temperature for a city",
    "list files: list the files of a drive",
    "file complaint: submit a complaint with information",
    "university finder: find a university in california",
    "set reminder: remind me tomorrow",
    "translate text: translate a document",
    "kits catalog: craft kits and nodes",
    "openapi spec: read an openapi document",
]


def uses_of(texts: list[str]) -> Counter[str]:
    """Tools per word of their texts (the retriever counts a word's BM25 term)."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(Speller.words(text))
    return counts


def speller(texts: list[str] = CATALOG_TEXTS, known: frozenset[str] = KNOWN) -> Speller:
    counts = uses_of(texts)
    return Speller(known, counts.__getitem__)


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("seacrh apple", "search apple"),  # two letters swapped
        ("weather in India using searcvh web tool", "weather in India using search web tool"),
        ("LIST C DRIIVE", "LIST C drive"),  # one letter more, all capitals
        ("I want informaton on this", "I want information on this"),  # one letter less
        ("file a compaint", "file a complaint"),
        ("best schools in califronia", "best schools in california"),
        ("remind me tomorro", "remind me tomorrow"),
        ("the universityg of Oslo", "the university of Oslo"),
        ("Seacrh the web", "search the web"),  # Title case at the start of a sentence
        ("Done. Seacrh the web", "Done. search the web"),
        ("seacrhh the web", "seacrhh the web"),  # two edits, under 8 letters: left as typed
        ("searchh the web", "search the web"),  # a stuck key: the last letter repeated
    ],
)
def test_a_misspelt_word_is_read_as_the_catalog_word_it_misses(typed: str, meant: str) -> None:
    text, changes = speller().correct(typed)
    assert text == meant
    assert bool(changes) == (typed != meant)


@pytest.mark.parametrize(
    "typed",
    [
        "what is the weather",  # known words
        "kites and how they are made",  # a real word the catalog lacks ("kite" + s), not "kits"
        "hello Sarch, how are you",  # a name inside a sentence
        "call getSearh on the pointA",  # camelCase identifiers
        "run seacrh_v2 and seacrh2",  # glued to "_" or digits
        "line one\\nSeacrh",  # the letters after a literal \n
        "warna merah",  # a trailing letter more that does not repeat: another language
        "openai models",  # the nearest catalog word is not an English word
        "scheme vs chemes",  # no catalog word within reach
        "temperatüre",  # non-ASCII: another language's word
        "xearch the web",  # the first letter differs
        "searchs the web",  # an inflection of a catalog word: BM25 reads it, so does MiniLM
        "can't won't",
    ],
)
def test_what_is_not_a_misspelling_of_a_catalog_word_is_left_alone(typed: str) -> None:
    spell = speller()
    text, changes = spell.correct(typed)
    assert (text, changes) == (typed, {})
    assert spell.corrections == 0


def test_two_equally_likely_readings_correct_nothing() -> None:
    known = frozenset({"cable", "canle"})
    counts = uses_of(["alpha: the cable", "beta: the canle"])
    spell = Speller(known, counts.__getitem__)
    assert spell.correct("canble") == ("canble", {})  # one edit from both, each used once
    counts.update(uses_of(["gamma: another cable"]))
    assert spell.correct("canble") == ("cable", {"canble": "cable"})  # now the more used one


def test_the_speller_reads_the_catalog_as_it_is_now() -> None:
    counts = uses_of(["list files: list the files"])
    spell = Speller(KNOWN, counts.__getitem__)
    assert spell.correct("seacrh") == ("seacrh", {})
    counts.update(uses_of(["web search: search the web"]))
    assert spell.correct("seacrh")[0] == "search"
    counts.subtract(uses_of(["web search: search the web"]))
    assert spell.correct("seacrh") == ("seacrh", {})


def test_without_known_words_nothing_is_corrected() -> None:
    spell = speller(known=frozenset())
    assert not spell.enabled
    assert spell.correct("seacrh the web") == ("seacrh the web", {})


def test_the_known_words_are_the_model_vocabulary_and_an_english_word_list() -> None:
    known = load_known_words(default_model_path())
    # Real English words outside BERT's 30k word pieces come from the English list...
    assert {"bake", "latte", "picky", "sentient", "validating", "allocating"} <= known
    # ...and the model's vocabulary is there too; misspellings are in neither.
    assert {"search", "weather", "university"} <= known
    assert not {"seacrh", "searcvh", "informaton", "califronia"} & known
    assert load_known_words("/nonexistent") <= known


def test_a_long_line_is_corrected_in_one_pass() -> None:
    spell = speller()
    line = "seacrh the web " * 20_000
    text, changes = spell.correct(line)
    assert text == "search the web " * 20_000
    assert changes == {"seacrh": "search"}


def test_a_request_of_made_up_words_is_looked_up_within_a_bound(monkeypatch) -> None:
    spell = speller()
    looked_up: list[str] = []
    candidate = spell._candidate

    def counted(word: str) -> str | None:
        looked_up.append(word)
        return candidate(word)

    monkeypatch.setattr(spell, "_candidate", counted)
    # 5,000 distinct made-up words of letters only (words glued to digits are not looked at).
    made_up = " ".join("zq" + "".join(chr(97 + int(d)) for d in str(i)) + "xw"
                       for i in range(5000))
    text, changes = spell.correct(made_up + " seacrh")
    assert (text, changes) == (made_up + " seacrh", {})  # past the bound: left as typed
    assert len(looked_up) == MAX_LOOKUPS
    looked_up.clear()
    assert spell.correct("seacrh " + made_up)[1] == {"seacrh": "search"}
    assert looked_up[0] == "seacrh" and len(looked_up) == MAX_LOOKUPS


# ---------------------------------------------------------------- through the real retriever


TYPOS = [
    ("seacrh for trio tutorials", "web_search"),
    ("tranlsate this paragraph to french", "translate_text"),
    ("remnid me to call mom", "set_reminder"),
]


@pytest.mark.trio
@pytest.mark.parametrize(("query", "tool"), TYPOS)
async def test_a_misspelt_request_matches_its_tool_on_both_channels(
    make_retriever, handmade, query: str, tool: str
) -> None:
    plain = make_retriever(correct_spelling=False, second_encoder="none")
    corrected = make_retriever(second_encoder="none")
    await plain.index(handmade)
    await corrected.index(handmade)
    before = {h.name: h for h in await plain.search(query, 20)}
    after = await corrected.search(query, 20)
    # The misspelt word matched no term: the tool had no lexical signal at all.
    assert before[tool].signals["bm25"] == 0.0
    assert after[0].name == tool
    assert after[0].signals["bm25"] > 0.0
    assert after[0].signals["dense"] >= before[tool].signals["dense"]
    assert corrected.statistics().spelling_corrections == 1
    assert plain.statistics().spelling_corrections == 0


@pytest.mark.trio
async def test_words_of_a_tool_added_at_run_time_are_corrected_to_and_go_with_it(
    make_retriever, handmade
) -> None:
    from tooldeck_hookspecs import ToolDefinition

    retriever = make_retriever(second_encoder="none")
    await retriever.index(handmade)
    query = "show my parcle deliveries"
    assert (await retriever.search(query, 1))[0].signals["bm25"] == 0.0
    parcel = ToolDefinition(
        name="track_parcel", description="Track a parcel delivery by its number.",
        category="api", parameters={"type": "object", "properties": {}},
    )
    await retriever.add([parcel])
    hits = await retriever.search(query, 3)
    assert hits[0].name == "track_parcel"
    assert hits[0].signals["bm25"] > 0.0
    await retriever.remove(["track_parcel"])
    assert all(h.signals["bm25"] == 0.0 for h in await retriever.search(query, 3)
               if h.name != "track_parcel")
    assert retriever._speller is not None
    assert retriever._speller.correct(query) == (query, {})
