"""Secrets stay out of everything that leaves the deck, not only a known tool's result.

An audit found them going out as written: in the ``TOOL_NOT_FOUND`` answer, the metadata and the
``call.end`` events of a tool name the model made up (``AKIA...``), in the task of a hand and of
its ``select`` event, and in the answer to arguments that could not be parsed. All of these now
pass ``Deck.redact`` (the ``tooldeck_redact`` chain, which the policy plugin implements); a
sandboxed tool's progress passes the result processors. Through a real deck with the policy,
schema and runner plugins, with the fake secrets of the shared security corpus.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import string
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import trio
from tooldeck_policy import redact

from tooldeck import tool
from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck
from tooldeck_hookspecs import (
    ErrorCode,
    Event,
    Exclusion,
    Preference,
    SecurityConfig,
    ToolContext,
    ToolDefinition,
    nonblocking,
)

STAGES = ["schema", "runner", "policy"]
TESTS_DIR = str(Path(__file__).resolve().parent)


def _security_data() -> Path:
    """$TOOLDECK_SECURITY_DATA, /work/shared/data/security, or shared/ beside the repository."""
    candidates = [
        os.environ.get("TOOLDECK_SECURITY_DATA", ""),
        "/work/shared/data/security",
        str(Path(__file__).resolve().parents[4] / "shared" / "data" / "security"),
    ]
    return next((Path(c) for c in candidates if c and Path(c).is_dir()), Path(candidates[1]))


SECRETS = _security_data() / "secrets"
pytestmark = pytest.mark.skipif(not SECRETS.is_dir(), reason="security corpora not available")


class Case(NamedTuple):
    """What the model writes (``text``) and the part of it that must never go out."""

    text: str
    secret: str


def _quoted(path: Path, key: str) -> str:
    match = re.search(rf"^{key} = '([^']+)'", path.read_text(encoding="utf-8"), re.M)
    assert match is not None, f"{key} not in {path}"
    return match.group(1)


def _generated(prefix: str, n: int, seed: int) -> str:
    # Built at run time, as the corpus README asks: no realistic token is committed.
    rng = random.Random(seed)
    return prefix + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


#: Shaped like no provider's token: only the configured known-secret matcher finds it.
KNOWN = _generated("", 26, 11)


def _cases() -> dict[str, Case]:
    if not SECRETS.is_dir():
        return {}
    each = SECRETS / "detect-secrets" / "each_secret.py.txt"
    aws = _quoted(each, "aws_access_key")
    basic = _quoted(each, "basic_auth")
    dotenv = (SECRETS / "gitleaks" / "env.prod.txt").read_text(encoding="utf-8")
    password = re.search(r"^DB_PASSWORD=(\S+)", dotenv, re.M).group(1)  # type: ignore[union-attr]
    key_block = (SECRETS / "detect-secrets" / "private_key.txt").read_text(encoding="utf-8")
    github = _generated("ghp_", 36, 5)
    return {
        "aws-access-key-id": Case(aws, aws),
        "github-pat": Case(github, github),
        "url-credentials": Case(basic, basic.split(":")[2].split("@")[0]),
        "dotenv-password": Case(f"DB_PASSWORD={password}", password),
        "private-key": Case(key_block, key_block.splitlines()[1]),
        "known-secret": Case(KNOWN, KNOWN),
    }


CASES = _cases()
KINDS = sorted(CASES)


@pytest.fixture
def fresh_known() -> Iterator[None]:
    """Start from an empty known-secret set (the deck's config adds ``KNOWN``); restore it."""
    saved = redact._known
    redact._known = redact._KnownSecrets()
    yield
    redact._known = saved
    redact._clean.clear()


@tool(category="text")
def note(text: str) -> str:
    """Write a note about a text.

    Args:
        text: what to note
    """
    return "noted"


class Events:
    """Observers of every kind: one on the loop (``@nonblocking``), one on the observer thread."""

    def __init__(self) -> None:
        self.seen: list[Event] = []
        self._lock = threading.Lock()

        def on_loop(event: Event) -> None:
            self.seen.append(event)

        def on_thread(event: Event) -> None:
            with self._lock:
                self.seen.append(event)

        self.plugins = [
            inline_plugin(tooldeck_event=nonblocking(on_loop), name="observer-loop"),
            inline_plugin(tooldeck_event=on_thread, name="observer-thread"),
        ]


def _deck(*plugins: object, retriever: bool = False, **config: Any) -> Any:
    extra = list(plugins)
    if retriever:
        extra.append(inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever(),
                                   name="keywords"))
    return make_deck(*extra, load_entry_points=STAGES, tools=[note],
                     config={"policy": {"secrets": [KNOWN]}, **config})


def _assert_out(secret: str, *outputs: Any) -> None:
    for output in outputs:
        assert secret not in repr(output), output


# ------------------------------------------------------------------ a name no tool has


@pytest.mark.parametrize("kind", KINDS)
async def test_an_invented_tool_name_is_redacted_in_the_answer_metadata_and_events(
    kind: str, tmp_path: Path, fresh_known: None
) -> None:
    case = CASES[kind]
    events = Events()
    deck = _deck(*events.plugins)
    async with deck:
        session = deck.session(workdir=tmp_path)
        plain = await session.call(case.text, {})
        embedded = await session.call(f"fetch_{case.text}", {"q": 1})
        known = await session.call("note", {"text": "hello"})
    assert known.success and known.metadata["tool"] == "note"
    for result in (plain, embedded):
        assert result.error is not None and result.error.code is ErrorCode.TOOL_NOT_FOUND
        assert "[REDACTED:" in result.error.message and "[REDACTED:" in result.metadata["tool"]
    ends = [e for e in events.seen if e.kind == "call.end"]
    assert len(ends) == 6  # three calls, two observers
    assert sorted({e.tool for e in ends if e.tool != "note"}) == sorted(
        {plain.metadata["tool"], embedded.metadata["tool"]}
    )
    _assert_out(case.secret, plain, embedded, events.seen)


async def test_unparseable_arguments_of_an_invented_name_are_answered_redacted(
    tmp_path: Path, fresh_known: None
) -> None:
    case = CASES["github-pat"]
    response = {
        "role": "assistant",
        "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": f"push_{case.text}", "arguments": "{not json"}},
            {"id": "c2", "type": "function",
             "function": {"name": "note", "arguments": json.dumps({"text": "hi"})}},
        ],
    }
    async with _deck() as deck:
        messages = await deck.session(workdir=tmp_path).run_tool_calls("openai", response)
    assert [m["tool_call_id"] for m in messages] == ["c1", "c2"]
    assert "INVALID_ARGUMENTS" in messages[0]["content"] and "[REDACTED:" in messages[0]["content"]
    _assert_out(case.secret, messages)


async def test_a_closed_sessions_refusal_quotes_an_invented_name_redacted(
    tmp_path: Path, fresh_known: None
) -> None:
    case = CASES["aws-access-key-id"]
    async with _deck() as deck:
        session = deck.session(workdir=tmp_path)
        await session.aclose()
        result = await session.call(case.text, {})
    assert result.error is not None and result.error.code is ErrorCode.CANCELLED
    _assert_out(case.secret, result)


# ------------------------------------------------------------------ the task


def _quoting_filters() -> object:
    """Rule filters that quote the task back (a refusal and a preference reason)."""

    def tooldeck_filter_tools(query: str, candidates: Any, session: Any) -> list[Any]:
        return [
            verdict
            for t in candidates
            for verdict in (
                Exclusion(name=t.name, reason=f"not for a task like {query!r}")
                if t.name == "shred_notes" else Preference(
                    name=t.name, boost=0.1, reason=f"matches {query[-80:]}"
                ),
            )
        ]

    return inline_plugin(tooldeck_filter_tools, name="quoting-filter")


@tool(category="text")
def shred_notes(text: str) -> str:
    """Shred the notes of a text.

    Args:
        text: the notes
    """
    return "shredded"


@pytest.mark.parametrize("long", [False, True], ids=["short", "long"])
@pytest.mark.parametrize("kind", KINDS)
async def test_the_task_is_redacted_in_the_hand_and_the_select_event(
    kind: str, long: bool, tmp_path: Path, fresh_known: None
) -> None:
    case = CASES[kind]
    events = Events()
    # The long task is redacted off the event loop (it is over the inline budget); selection
    # reads 8,000 characters of a task by default, so this deployment lets it read more.
    padding = "please write a note about these notes " * (600 if long else 0)
    task = f"{padding}write a note and shred the notes; use {case.text}"
    deck = make_deck(
        _quoting_filters(), *events.plugins,
        inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever(), name="keywords"),
        load_entry_points=STAGES, tools=[note, shred_notes],
        config={"policy": {"secrets": [KNOWN]}, "hand": {"max_task_chars": 100_000}},
    )
    async with deck:
        session = deck.session(workdir=tmp_path)
        hand = await session.select(task)
        # The hand still works: its tools are dealt and callable.
        called = await session.call("note", {"text": "x"})
    assert hand.names == ["note"] and called.success
    assert [e.name for e in hand.exclusions] == ["shred_notes"]
    assert "[REDACTED:" in hand.query and (len(hand.query) > 16 * 1024) is long
    assert "[REDACTED:" in hand.exclusions[0].reason
    selects = [e for e in events.seen if e.kind == "select"]
    assert len(selects) == 2 and all(e.data["query"] == hand.query for e in selects)
    _assert_out(case.secret, hand, events.seen)


# ------------------------------------------------------------------ arguments and progress


@tool(category="text")
def strict_mode(mode: str, context: ToolContext) -> str:
    """Run in a mode, quoting a bad one back and reporting progress about it.

    Args:
        mode: the mode
    """
    context.emit({"progress": 1, "message": f"trying mode {mode}"})
    raise ValueError(f"unknown mode {mode!r}")


@pytest.mark.parametrize("kind", KINDS)
async def test_arguments_echoed_in_errors_and_progress_are_redacted(
    kind: str, tmp_path: Path, fresh_known: None
) -> None:
    case = CASES[kind]
    seen: list[dict[str, Any]] = []
    events = Events()
    deck = make_deck(*events.plugins, load_entry_points=STAGES, tools=[note, strict_mode],
                     config={"policy": {"secrets": [KNOWN]}})
    async with deck:
        session = deck.session(workdir=tmp_path)
        failed = await session.call("strict_mode", {"mode": case.text}, on_progress=seen.append)
        invalid = await session.call("note", {"text": 1, "extra": case.text})
        await trio.sleep(0.05)  # progress from a worker thread arrives on the loop soon after
    assert failed.error is not None and failed.error.code is ErrorCode.EXECUTION_ERROR
    assert invalid.error is not None and invalid.error.code is ErrorCode.INVALID_ARGUMENTS
    assert len(seen) == 1 and "[REDACTED:" in seen[0]["message"]
    _assert_out(case.secret, failed, invalid, seen, events.seen)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
async def test_progress_of_a_sandboxed_tool_is_redacted(
    tmp_path: Path, fresh_known: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(TESTS_DIR)  # the deck checks the entrypoint imports here too
    reporter = ToolDefinition(
        name="report_each",
        description="Report progress on each text.",
        category="text",
        parameters={
            "type": "object",
            "properties": {"texts": {"type": "array", "items": {"type": "string"}}},
            "required": ["texts"],
        },
        entrypoint="policy_outward_tools:report_each",
        security=SecurityConfig(sandbox=True),
    )
    seen: list[dict[str, Any]] = []
    deck = make_deck(
        load_entry_points=STAGES, tools=[reporter],
        config={"policy": {"secrets": [KNOWN]},
                "runner": {"sandbox": "bubblewrap", "python_path": [TESTS_DIR]}},
    )
    texts = [CASES[kind].text for kind in KINDS]
    async with deck:
        result = await deck.session(workdir=tmp_path).call(
            "report_each", {"texts": texts}, on_progress=seen.append
        )
        with trio.fail_after(10):  # a hang guard: frames arrive on the loop soon after
            while len(seen) < len(texts):
                await trio.sleep(0.01)
    assert result.success, result.error
    assert [e["progress"] for e in seen] == list(range(1, len(texts) + 1))
    assert all("[REDACTED:" in e["message"] for e in seen)
    for kind in KINDS:
        _assert_out(CASES[kind].secret, seen, result)


# ------------------------------------------------------------------ the mechanism


async def test_a_failing_redactor_withholds_rather_than_lets_out(tmp_path: Path) -> None:
    def tooldeck_redact(value: Any) -> Any:
        raise RuntimeError("redactor bug")

    events = Events()
    deck = make_deck(
        inline_plugin(tooldeck_redact, name="broken-redactor"), *events.plugins,
        inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever(), name="keywords"),
        load_entry_points=["schema", "runner"], tools=[note],
    )
    secret = CASES["github-pat"].text
    async with deck:
        session = deck.session(workdir=tmp_path)
        result = await session.call(secret, {})
        hand = await session.select(f"write a note with {secret}")
    assert result.error is not None and result.error.code is ErrorCode.PLUGIN_ERROR
    assert "broken-redactor" in result.error.message
    assert hand.names == ["note"] and "withheld" in hand.query
    _assert_out(secret, result, hand, events.seen)


async def test_calls_of_registered_tools_cost_the_redactor_nothing_without_observers(
    tmp_path: Path,
) -> None:
    asked: list[Any] = []

    def tooldeck_redact(value: Any) -> None:
        asked.append(value)

    deck = make_deck(inline_plugin(tooldeck_redact, name="counting-redactor"),
                     load_entry_points=["schema", "runner"], tools=[note])
    async with deck:
        session = deck.session(workdir=tmp_path)
        for _ in range(3):
            assert (await session.call("note", {"text": "x"})).success
        assert asked == []
        await session.call("no_such_tool", {})
    assert asked and all(not isinstance(v, dict) for v in asked)  # the answer and the name


def test_without_a_redacting_plugin_redact_returns_the_value_itself() -> None:
    deck = make_deck(load_entry_points=["schema", "runner"], tools=[note])
    value = {"task": CASES["github-pat"].text}
    assert deck.redact(value) is value


# ------------------------------------------------------------------ the command line


def _cli(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "TOOLDECK_DISABLE_PLUGINS": "faiss",
               "TOOLDECK_HISTORY_FILE": "off",
               "TOOLDECK_TRUST_FILE": str(tmp_path / "trust.json")}
    environ.pop("TOOLDECK_CONFIG", None)
    return subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kind", ["aws-access-key-id", "github-pat", "url-credentials"])
def test_tooldeck_call_json_of_an_invented_name_is_redacted(kind: str, tmp_path: Path) -> None:
    case = CASES[kind]
    proc = _cli(tmp_path, "import sys; from tooldeck.cli import main; "
                          f"sys.exit(main(['call', {case.text!r}, '{{}}']))")
    assert proc.returncode == 1, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["error"]["code"] == "TOOL_NOT_FOUND"
    assert "[REDACTED:" in answer["metadata"]["tool"]
    _assert_out(case.secret, proc.stdout, proc.stderr)


def test_tooldeck_select_json_redacts_the_task(tmp_path: Path) -> None:
    """``tooldeck select --json`` prints the hand (with a keyword retriever standing in for the
    embedding model, and a filter quoting the task)."""
    case = CASES["github-pat"]
    script = f"""
import sys
from tooldeck import cli
from tooldeck.testing import KeywordRetriever, inline_plugin, make_deck
from tooldeck_hookspecs import Exclusion

def tooldeck_filter_tools(query, candidates, session):
    return [Exclusion(name=t.name, reason="no: " + query) for t in candidates
            if t.name == "list_dir"]

cli._load_deck = lambda: make_deck(
    inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever(), name="keywords"),
    inline_plugin(tooldeck_filter_tools, name="quoting"),
    load_entry_points=["schema", "runner", "policy", "fs"])
sys.exit(cli.main(["select", "--json", "read the file and list the dir with " + {case.text!r}]))
"""
    proc = _cli(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert "[REDACTED:" in printed["query"]
    assert printed["tools"] and printed["excluded"][0]["name"] == "list_dir"
    _assert_out(case.secret, proc.stdout, proc.stderr)
