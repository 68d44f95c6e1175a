"""Text handling shared by the lexical and the dense signal: tool text, tokens, query segments."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tooldeck_hookspecs import ToolDefinition, local_ref_target

# camelCase / PascalCase / acronym boundaries: "getHTTPStatus2" -> get HTTP Status 2
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=[0-9])")
# Unicode-aware words: letters and digits of any script, so non-English text still tokenizes.
_WORD = re.compile(r"[^\W_]+")

# A small English stopword list. Kept here (rather than taken from a library) so the plugin
# needs no extra dependency and the list is stable across versions, which keeps BM25 scores
# reproducible.
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just let like me more most my myself no nor not now of off on once only or other
    our ours ourselves out over own please same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself
    yourselves want need would like could also additionally finally lastly then afterwards
    specific certain""".split()
)


def split_identifier(name: str) -> list[str]:
    """Words of an identifier: ``getUserProfile`` / ``get_user_profile`` -> get user profile."""
    return [w for w in _WORD.findall(_CAMEL.sub(" ", name))]


def stem(word: str) -> str:
    """A light, conservative English suffix stripper (plural, -ing, -ed, -ly).

    Light on purpose: aggressive stemmers conflate unrelated tool verbs (``organization`` and
    ``organ``); folding inflections is what matters when a query says "scheduling meetings" and
    a tool says "schedule meeting".
    """
    if len(word) <= 3 or not word.isascii():
        return word
    for suffix, repl in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("ly", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: len(word) - len(suffix)] + repl
            # "scheduling" -> "schedul": drop a trailing e the other way too, so both meet.
            return word[:-1] if word.endswith("e") else word
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def tokenize(text: str) -> list[str]:
    """Lower-cased, stemmed content words of ``text`` (identifiers are split into words)."""
    out = []
    for raw in _WORD.findall(_CAMEL.sub(" ", text)):
        word = raw.lower()
        if word in STOPWORDS:
            continue
        out.append(stem(word))
    return out


def query_terms(text: str) -> list[str]:
    """The lexical channel's terms of a request: :func:`tokenize` without plain numbers.

    A request's numbers are argument values ("I have 100$ and donated 40", "add 1 and 2",
    "ID 3726"); as terms they match tools by the digits in their names or schemas
    (``travel_1_find_attractions``, a volume "from 0 to 100"), not by what they do. Since
    :func:`tokenize` splits digits off letters, "mp3" or "ec2" keeps its letters ("mp", "ec")
    and loses its digits too: "mp3" and "mp4" tools then tie on that word.
    Measured on both open sets: BFCL live R@15 96.52 -> 96.60 and R@5 88.77 -> 89.25,
    Seal-Tools complete@15 96.64 -> 96.69.
    """
    return [term for term in tokenize(text) if not term.isdigit()]


# A quoted span: '...' (no word character outside either quote; apostrophes inside words, as
# in "they're", belong to the span), "...", and the typographic and guillemet pairs. Each
# alternative stops at the next quote that is not inside a word (or at the line's end), so a
# line full of quotes is scanned once, not once per quote.
_QUOTED = re.compile(
    r"""(?<!\w)'(?:[^'\n]|(?<=\w)'(?=\w))+?'(?!\w)"""
    r"""|(?<!\w)"[^"\n]+?"(?!\w)|“[^”\n]+?”|‘(?:[^’\n]|(?<=\w)’(?=\w))+?’(?!\w)|«[^»\n]+?»"""
)


_MASK_OPEN, _MASK_CLOSE = "\ue000", "\ue001"  # private-use: never in a tokenizer's words
_MASKED = re.compile(f"{_MASK_OPEN}(\\d+){_MASK_CLOSE}")


def _has_quote(text: str) -> bool:
    return "'" in text or '"' in text or any(q in text for q in "“‘«")


def _mask_quoted(text: str) -> tuple[str, list[str]]:
    """``text`` with each quoted span replaced by a numbered placeholder, and the spans."""
    if not _has_quote(text) or _MASK_OPEN in text:
        return text, []
    spans: list[str] = []

    def keep(match: re.Match[str]) -> str:
        if _SENTENCE.search(match.group(0)):
            return match.group(0)
        spans.append(match.group(0))
        return f"{_MASK_OPEN}{len(spans) - 1}{_MASK_CLOSE}"

    return _QUOTED.sub(keep, text), spans


def _unmask(text: str, spans: list[str]) -> str:
    return _MASKED.sub(lambda m: spans[int(m.group(1))], text)


def strip_quoted(text: str) -> str:
    """``text`` without its quoted spans, or ``text`` itself when fewer than two content words
    would remain.

    What a request quotes is usually an argument value: a file name, a search phrase, a song,
    the sentence to translate ("find information on 'the history of kites'" wants a web
    search, not a tool about kites). The query's embedding reads the request without them;
    the lexical channel keeps them, since a quoted word can name the tool. Measured on both
    open sets: embedding the stripped text raised BFCL live R@15 from 96.37 to 96.52 and
    Seal-Tools R@5 from 94.83 to 95.09, and lost nothing; stripping for BM25 or for the second
    channel too lost R@15 on BFCL live.
    """
    if not _has_quote(text):
        return text
    stripped = _QUOTED.sub(" ", text)
    return stripped if len(tokenize(stripped)) >= 2 else text


#: Bounds of the walk over a parameters schema: real catalogs nest request bodies several
#: levels deep, and one tool's schema must not outweigh its name and description.
MAX_PARAMS = 48
MAX_DEPTH = 3
_REF_HOPS = 8


def _resolve(spec: Any, root: Mapping[str, Any], budget: list[int] | None = None) -> Any:
    """``spec`` with local ``$ref``s followed, ``allOf`` members merged (their properties
    too: OpenAPI's composition) and an ``anyOf``/``oneOf`` narrowed to its first non-null
    member (``Optional[Model]`` in pydantic's schemas); the outer keywords win.

    ``budget`` bounds the steps of one resolution, cycles and wide ``allOf``s included.
    """
    budget = [_REF_HOPS * 4] if budget is None else budget
    while isinstance(spec, Mapping) and budget[0] > 0:
        budget[0] -= 1
        outer = {k: v for k, v in spec.items() if k not in ("$ref", "anyOf", "oneOf", "allOf")}
        ref, every = spec.get("$ref"), spec.get("allOf")
        target: Any
        if isinstance(ref, str):
            target = local_ref_target(root, ref)
        elif isinstance(every, list):
            target, props = {}, {}
            for member in every:
                member = _resolve(member, root, budget)
                if isinstance(member, Mapping):
                    target.update(member)
                    if isinstance(member.get("properties"), Mapping):
                        props.update(member["properties"])
            if props:
                target["properties"] = props
        else:
            members = spec.get("anyOf") or spec.get("oneOf")
            if not isinstance(members, list):
                return spec
            target = next((m for m in members if isinstance(m, Mapping)
                           and m.get("type") != "null"), None)
        if not isinstance(target, Mapping):
            return outer
        spec = {**target, **outer}
    return spec


def schema_params(parameters: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, schema) of every parameter, nested ones too, depth-first in declared order.

    Properties of objects and of arrays' item objects count (an appliance command's ``body``
    with its ``airConJobMode``), as do local ``$ref``s and optional members; at most
    :data:`MAX_DEPTH` levels and :data:`MAX_PARAMS` parameters per tool.
    """
    root = parameters if isinstance(parameters, Mapping) else {}
    out: list[tuple[str, Mapping[str, Any]]] = []

    def walk(spec: Any, depth: int) -> None:
        props = spec.get("properties") if isinstance(spec, Mapping) else None
        if not isinstance(props, Mapping):
            return
        for name, sub in props.items():
            if len(out) >= MAX_PARAMS:
                return
            sub = _resolve(sub, root)
            out.append((str(name), sub if isinstance(sub, Mapping) else {}))
            if depth + 1 < MAX_DEPTH and isinstance(sub, Mapping):
                walk(sub, depth + 1)
                items = _resolve(sub.get("items"), root)
                if isinstance(items, Mapping):
                    walk(items, depth + 1)

    walk(_resolve(root, root), 0)
    return out


def _param_items(walked: list[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, str]]:
    """(name, description) of the parameters :func:`schema_params` walked."""
    return [(name, str(spec.get("description", "") or "")) for name, spec in walked]


def _param_values(walked: list[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Enum members and examples of the parameters :func:`schema_params` walked: words a
    request often repeats ("COOL", "celsius") that the descriptions leave out."""
    values: list[str] = []
    for _, spec in walked:
        for key in ("enum", "examples"):
            items = spec.get(key)
            if isinstance(items, list):
                values.extend(str(v) for v in items[:20] if isinstance(v, str | int | float))
    return values


def _category_words(category: str) -> str:
    # "Science/Geology" -> "Science Geology"; "file_system" -> "file system"
    return " ".join(split_identifier(category.replace("/", " ")))


#: Words of a description the embedding sees before it is cut at a sentence end.
SUMMARY_WORDS = 40
#: Words of each parameter description the embedding sees.
PARAM_WORDS = 16


def _lead(text: str, words: int) -> str:
    """The leading sentences of ``text`` that fit in about ``words`` words (at least one).

    Long descriptions are usage notes for the model (limits, encodings, caveats); mean-pooled
    embeddings of the whole text drift away from what the tool *does*, which the first
    sentence says. Short texts are returned unchanged.
    """
    text = " ".join(text.split())
    if len(text.split()) <= words:
        return text
    out: list[str] = []
    count = 0
    for sentence in _SENTENCE.split(text):
        n = len(sentence.split())
        if out and count + n > words:
            break
        out.append(sentence)
        count += n
    lead = " ".join(out)
    if len(lead.split()) > 2 * words:  # one endless sentence
        lead = " ".join(lead.split()[: 2 * words])
    return lead


def dense_text(tool: ToolDefinition) -> str:
    """What the embedding model sees for a tool: name words, the description's lead, category,
    parameters, nested ones too (each description's lead). BM25 still indexes every word."""
    parts = [summary_text(tool)]
    if tool.category:
        parts.append(f"Category: {_category_words(tool.category)}.")
    params = _param_items(schema_params(tool.parameters))
    if params:
        rendered = "; ".join(
            f"{' '.join(split_identifier(n))}"
            + (f" ({_lead(d, PARAM_WORDS)})" if d.strip() else "")
            for n, d in params
        )
        parts.append(f"Parameters: {rendered}")
    return " ".join(p for p in parts if p)


def summary_text(tool: ToolDefinition) -> str:
    """A tool's name words and the lead of its description: the opening of :func:`dense_text`,
    without its category and parameters, for the summary view (``summary_view``). A request
    that names only what a tool does matches this text better than the full one, whose
    parameter words pull its vector away from that purpose."""
    lead = _lead(tool.description, SUMMARY_WORDS)
    return " ".join(split_identifier(tool.name)) + ":" + (f" {lead}" if lead else "")


def tool_texts(
    tools: Sequence[ToolDefinition], summary: bool
) -> tuple[list[str], list[int] | None]:
    """The texts to embed for ``tools``: every tool's :func:`dense_text`, then (``summary``)
    the :func:`summary_text` of each tool whose summary differs from it, and the indexes of
    those tools (None without ``summary``). A tool without category or parameters has one
    text: its vector serves both views."""
    texts = [dense_text(t) for t in tools]
    if not summary:
        return texts, None
    views = [summary_text(t) for t in tools]
    differ = [i for i, (full, view) in enumerate(zip(texts, views, strict=True)) if full != view]
    return texts + [views[i] for i in differ], differ


def lexical_fields(tool: ToolDefinition) -> dict[str, str]:
    """The fields BM25 indexes, so that each can carry its own weight."""
    # One walk of the schema for both parameter fields: it follows $refs and copies specs.
    walked = schema_params(tool.parameters)
    params = _param_items(walked)
    return {
        "name": " ".join(split_identifier(tool.name)),
        "description": tool.description,
        "category": _category_words(tool.category or ""),
        "param_names": " ".join(" ".join(split_identifier(n)) for n, _ in params),
        "param_descriptions": " ".join(d for _, d in params),
        "param_values": " ".join(_param_values(walked)),
    }


# Sentence ends (., ?, !, ;, newlines) followed by space; avoids splitting "e.g. x" or "3.5".
_SENTENCE = re.compile(r"(?<=[.!?;。！？])\s+|\n+")


# Clause boundaries that announce a new step inside one sentence: "..., then check ...",
# "... and then ...", "...; also ...", "... and also ..." (no comma needed after "and"). Plain
# commas and "and" are left alone: they join the parts of one request far more often than they
# separate two. "and next" is not a boundary: "and next week's hotel" is one request.
_CLAUSE = re.compile(
    r",?\s+(?:and\s+)?then\s+|,\s+(?:and\s+)?(?:also|additionally|afterwards|after that|"
    r"finally|lastly|next)\b,?\s*|\s+and\s+(?:also|additionally|afterwards|after that|finally|"
    r"lastly)\b,?\s*",
    re.IGNORECASE,
)


#: Verbs that open a request ("... and list the folder"). The retriever adds the first words
#: of its tools' names, so a catalog's own verbs split requests too.
REQUEST_VERBS = frozenset(
    stem(w)
    for w in """add analyze analyse book buy calculate cancel change check close compare compute
    convert copy count create delete download draft edit email estimate export fetch find
    forward generate get give install list load look make merge move open order pay play post
    predict print read record remind remove rename reply reserve reset resize restart retrieve
    review run save schedule search send set share show sort start stop submit summarize
    summarise tell translate turn update upload validate verify view write zip""".split()
)

# "... and <verb> ...", ", <verb> ...": candidate boundaries between two requests in a sentence.
_AND = re.compile(r"(?:,\s*(?:and\s+)?|\s+and\s+)(?=([^\W\d_]+))", re.IGNORECASE)


def _split_on_verbs(sentence: str, verbs: frozenset[str]) -> list[str]:
    """Split at "and"/"," when a request verb follows and both sides carry two content words."""
    parts: list[str] = []
    start = 0
    for match in _AND.finditer(sentence):
        if stem(match.group(1).lower()) not in verbs:
            continue
        left, right = sentence[start : match.start()], sentence[match.end() :]
        if len(tokenize(left)) >= 2 and len(tokenize(right)) >= 2:
            parts.append(left.strip())
            start = match.end()
    parts.append(sentence[start:].strip())
    return [p for p in parts if p]


def _clauses(sentence: str, verbs: frozenset[str] | None = None) -> list[str]:
    parts = [p.strip() for p in _CLAUSE.split(sentence) if p and p.strip()]
    # Only split when every clause can stand on its own.
    if not (len(parts) > 1 and all(len(tokenize(p)) >= 3 for p in parts)):
        parts = [sentence]
    if verbs:
        parts = [q for p in parts for q in _split_on_verbs(p, verbs)]
    return parts


def segment_query(
    query: str,
    *,
    max_segments: int = 12,
    max_chars: int = 1000,
    clauses: bool = True,
    verbs: frozenset[str] | None = None,
) -> list[str]:
    """Split a task description into its sentences (one intent each, usually), and sentences
    into clauses where a connective such as ", then" announces a new step.

    Sentences with fewer than three content words ("Thanks.", "Then:") are glued to the
    previous one instead of standing alone. Very long inputs are bounded: at most
    ``max_segments`` segments (the tail is merged into the last) and ``max_chars`` per segment
    (the embedding model truncates to 256 tokens anyway). A merged tail longer than that starts
    with its last sentence: a prompt that ends with the user's request ("... From now on, act
    as your persona. What's Shishir's birthday?") lost the request when the tail was cut.
    With ``verbs``, "and" or a comma followed by one of those verbs also separates two requests
    ("read the config and list the folder"); short intents there need only two content words
    each side. Nothing splits inside a quoted span that holds no sentence end.
    """
    query = query.strip()
    if not query:
        return []
    # Quoted spans are values, not steps: "translate 'read the file and delete the folder'"
    # is one request. Each span is replaced by a placeholder while the query is split, then
    # put back. Spans holding whole sentences are split as before: in Seal-Tools they are
    # steps of the request written in quotes, and masking them lost two complete hands.
    masked, spans = _mask_quoted(query)
    pieces = [p.strip() for p in _SENTENCE.split(masked) if p and p.strip()]
    if clauses:
        pieces = [c for p in pieces for c in _clauses(p, verbs)]
    if spans:
        pieces = [_unmask(p, spans) for p in pieces]
    segments: list[str] = []

    def stands_alone(piece: str) -> bool:
        words = tokenize(piece)
        if len(words) >= 3:
            return True
        # A short request that opens with a verb ("list the folder") is an intent of its own.
        first = _WORD.findall(piece)
        return bool(verbs) and len(words) == 2 and bool(first) and (
            stem(first[0].lower()) in verbs  # type: ignore[operator]
        )

    for piece in pieces:
        if segments and not stands_alone(piece):
            segments[-1] = f"{segments[-1]} {piece}"
        else:
            segments.append(piece)
    if len(segments) > 1 and not stands_alone(segments[0]):
        segments[1] = f"{segments[0]} {segments[1]}"
        segments.pop(0)
    if len(segments) > max_segments:
        tail = " ".join(segments[max_segments - 1 :])
        if len(tail) > max_chars:
            # The last sentence first: the embedding model reads the first 256 tokens only.
            rest = " ".join(segments[max_segments - 1 : -1])
            tail = f"{segments[-1][: max_chars // 2]} {rest}"
        segments = [*segments[: max_segments - 1], tail]
    return [s[:max_chars] for s in segments]
