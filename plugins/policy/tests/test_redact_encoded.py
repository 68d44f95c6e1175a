"""Secrets that leave in another form than their own: base64 and hex blobs, escapes, invisible
characters, bytes, content blocks, a cached result, a cut progress message.

Each family goes through a real deck (schema, runner, policy; cache where it matters), with a
tool returning what a hostile or careless tool would: the model asked for ``cat .env | base64``,
an MCP resource carries the file as a blob, a progress line was cut inside a token. Tokens are
built at run time (``ghp_`` + 36 alphanumerics), as the security corpus's README asks.
"""

from __future__ import annotations

import base64
import json
import random
import string
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import trio
from tooldeck_policy import redact
from tooldeck_policy.redact import find_secrets, redact_text, refresh_known_secrets

from tooldeck_hookspecs import ErrorCode, ExecutionConfig, ToolDefinition, ToolResult
from tooldeck_hookspecs.content import Image, Resource

tooldeck_testing = pytest.importorskip("tooldeck.testing")

_RNG = random.Random(2026)
TOKEN = "ghp_" + "".join(_RNG.choice(string.ascii_letters + string.digits) for _ in range(36))
ENV_FILE = f"DEBUG=1\nGITHUB_TOKEN={TOKEN}\nLOG_LEVEL=info\n"
ENV_B64 = base64.b64encode(ENV_FILE.encode()).decode()


@pytest.fixture
def fresh_known(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Known secrets of this test only (the process's set is restored afterwards)."""
    monkeypatch.setattr(redact, "_known", redact._KnownSecrets())
    yield


def _deck(produce: Callable[[Mapping[str, Any], Any], Any], *, cache: bool = False) -> Any:
    tool = ToolDefinition(
        name="produce",
        description="Produce an output.",
        category="api",
        execution=ExecutionConfig(cacheable=cache, cache_ttl_s=60),
        execute=produce,
    )
    names = ["schema", "runner", "policy", *(["cache"] if cache else [])]
    return tooldeck_testing.make_deck(load_entry_points=names, tools=[tool])


async def _call(produce: Callable[[Mapping[str, Any], Any], Any]) -> ToolResult:
    async with _deck(produce) as deck:
        return await deck.session().call("produce", {})


def _shown(result: ToolResult) -> str:
    """Everything of a result that leaves the deck, as one text."""
    error = result.error
    return json.dumps(
        [result.data, result.metadata, error and [error.message, error.suggestion, error.details]],
        default=str,
    )


def _assert_no_token(shown: str) -> None:
    """No form of the token: plain, or any base64 run of the output decoding to it."""
    assert TOKEN not in shown and ENV_B64[8:48] not in shown, shown
    for run in shown.split('"'):
        try:
            decoded = base64.b64decode(run + "=" * (-len(run) % 4), validate=False)
        except ValueError:
            continue
        assert TOKEN.encode() not in decoded, run


# --- base64 -----------------------------------------------------------------------------------


async def test_base64_of_an_env_file_in_command_output_is_replaced_whole() -> None:
    wrapped = "\n".join(ENV_B64[i : i + 76] for i in range(0, len(ENV_B64), 76))
    before = "$ base64 .env\n"

    result = await _call(lambda a, c: {"stdout": before + wrapped + "\n", "exit_code": 0})

    _assert_no_token(_shown(result))
    assert result.data["stdout"] == before + "[REDACTED:base64:github-pat]\n"


@pytest.mark.parametrize(
    "shape",
    [
        lambda b: {"contents": [{"uri": "file:///srv/.env", "blob": b}]},  # an MCP resource
        lambda b: {"data": b, "mimeType": "text/plain"},
        lambda b: [f"data:text/plain;base64,{b}"],
        lambda b: {"line": f"GITHUB_TOKEN_B64={base64.urlsafe_b64encode(TOKEN.encode()).decode()}"},
    ],
    ids=["resource-blob", "data-field", "data-url", "urlsafe-assignment"],
)
async def test_base64_fields_anywhere_in_the_data_are_decoded_and_scanned(
    shape: Callable[[str], Any],
) -> None:
    result = await _call(lambda a, c: shape(ENV_B64))

    shown = _shown(result)
    _assert_no_token(shown)
    assert "[REDACTED:base64:github-pat]" in shown


async def test_base64_in_a_failure_s_details_is_scanned() -> None:
    # A TIMEOUT carries the partial output in details: `base64 .env` that did not finish.
    result = await _call(
        lambda a, c: ToolResult.fail(ErrorCode.TIMEOUT, "timed out", details={"partial": ENV_B64})
    )

    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
    _assert_no_token(_shown(result))


async def test_content_blocks_whose_bytes_hold_a_secret_are_withheld_whole() -> None:
    clean_png = b"\x89PNG\r\n\x1a\n" + bytes(_RNG.getrandbits(8) for _ in range(2000))
    # A picture with the token in a text chunk: bytes, not text, but the token is readable.
    tainted_png = clean_png + b"tEXtComment\0" + ENV_FILE.encode()

    result = await _call(
        lambda a, c: [
            "Here are the files.",
            Resource("file:///srv/.env", data=ENV_FILE.encode(), mime_type="text/plain"),
            Image(tainted_png, "image/png"),
            Image(clean_png, "image/png"),
        ]
    )

    _assert_no_token(_shown(result))
    text, resource, image, clean = result.data
    assert text == "Here are the files."
    # Still a resource block (clients expect one), its text saying what happened.
    assert resource["$content"] == "resource" and resource["uri"] == "file:///srv/.env"
    assert "blob" not in resource and resource["text"].startswith("[REDACTED:base64:github-pat]")
    assert isinstance(image, str) and image.startswith("[REDACTED:base64:github-pat]")
    assert "withheld" in image
    # A picture without a secret is left byte for byte.
    assert clean["data"] == base64.b64encode(clean_png).decode()


async def test_bytes_returned_by_a_tool_are_scanned_after_the_deck_encodes_them() -> None:
    # The deck turns bytes into {"$bytes_base64": ...} before the result processors see them.
    result = await _call(lambda a, c: {"stdout": ENV_FILE.encode(), "raw": [ENV_FILE.encode()]})

    _assert_no_token(_shown(result))
    assert result.data["stdout"].startswith("[REDACTED:base64:github-pat]")


async def test_bytes_declared_base64_are_scanned_even_when_they_are_not_text() -> None:
    # file_read's and shell_exec's base64 modes: a binary file (a credentials database).
    binary = bytes(range(256)) * 2 + b"\0\x01" + ENV_FILE.encode() + b"\0" + bytes(range(256))
    blob = base64.b64encode(binary).decode()
    innocent = base64.b64encode(bytes(range(256)) * 3).decode()

    result = await _call(
        lambda a, c: {
            "file": {"path": "creds.db", "content": blob, "encoding": "base64"},
            "run": {"stdout": blob, "stdout_encoding": "base64", "exit_code": 0},
            "other": {"content": innocent, "encoding": "base64"},
        }
    )

    _assert_no_token(_shown(result))
    assert result.data["file"]["encoding"] == "redacted"
    assert result.data["file"]["content"].startswith("[REDACTED:base64:github-pat]")
    assert result.data["run"]["stdout_encoding"] == "redacted"
    assert result.data["other"] == {"content": innocent, "encoding": "base64"}


def test_random_base64_digests_and_hex_are_left_alone() -> None:
    # Runs that decode to binary (keys, hashes, ids) are not text a rule could read: untouched.
    rng = random.Random(3)
    text = "\n".join(
        [
            "sha256-" + base64.b64encode(rng.randbytes(32)).decode(),
            "commit " + rng.randbytes(20).hex(),
            "id " + base64.urlsafe_b64encode(rng.randbytes(24)).decode(),
            "nonce=" + base64.b64encode(rng.randbytes(48)).decode(),
            "an_identifier_long_enough_to_look_like_base64_text_to_a_pattern",
            base64.b64encode(b"Hello, this is plain text with nothing secret in it.").decode(),
        ]
    )
    assert redact_text(text) == text


# --- hex, escapes, invisible characters ---------------------------------------------------------


def _percent_all(s: str) -> str:
    return "".join(f"%{b:02X}" for b in s.encode())


ESCAPED = {
    "hex": lambda s: s.encode().hex(),
    "percent-every-byte": _percent_all,
    "percent-quote": lambda s: urllib.parse.quote(s, safe=""),  # (caught before too)
    "json-u-escapes": lambda s: "".join(f"\\u{ord(c):04x}" for c in s),
    "backslash-x": lambda s: "".join(f"\\x{ord(c):02x}" for c in s),
    "html-references": lambda s: "".join(f"&#{ord(c)};" for c in s),
    "zero-width-spaces": lambda s: "\u200b".join(s),
    # No name before the token: only the token's own pattern can find it.
    "soft-hyphen-in-token": lambda s: TOKEN[:9] + "\u00ad" + TOKEN[9:],
    "word-joiner-in-token": lambda s: TOKEN[:20] + "\u2060" + TOKEN[20:],
    "base64-of-percent": lambda s: base64.b64encode(_percent_all(s).encode()).decode(),
}


@pytest.mark.parametrize("encode", ESCAPED.values(), ids=ESCAPED.keys())
async def test_a_secret_in_another_encoding_is_redacted(encode: Callable[[str], str]) -> None:
    line = f"GITHUB_TOKEN={TOKEN}"
    shown = encode(line)

    result = await _call(lambda a, c: {"text": f"output:\n{shown}\n(done)"})

    text = result.data["text"]
    assert text.startswith("output:\n") and text.endswith("\n(done)")
    assert "[REDACTED:" in text
    for form in (TOKEN, TOKEN[4:24], encode(TOKEN)[6:40]):
        assert form not in text, (form, text)


def test_an_escaped_secret_is_replaced_exactly_where_it_was() -> None:
    # Escapes map back to the characters they came from: the rest of the line stays.
    line = "url=https://api.example/v1?q=caf%C3%A9&key=" + _percent_all(TOKEN) + "&page=2"

    redacted = redact_text(line)

    assert redacted == "url=https://api.example/v1?q=caf%C3%A9&key=[REDACTED:github-pat]&page=2"
    [finding] = find_secrets(line)
    assert line[finding.start : finding.end] == _percent_all(TOKEN)


# --- what leaves besides the result's text ------------------------------------------------------


async def test_a_cached_result_is_redacted_again_with_the_secrets_known_now(
    monkeypatch: pytest.MonkeyPatch, fresh_known: None
) -> None:
    # Stored before the value was known as a secret (another process sharing the cache, or the
    # environment changed since): served again, it must be redacted with today's secrets.
    value = "rel-" + "".join(_RNG.choice(string.hexdigits) for _ in range(20))
    async with _deck(lambda a, c: {"text": f"release {value}"}, cache=True) as deck:
        session = deck.session()
        first = await session.call("produce", {})
        monkeypatch.setenv("RELEASE_SIGNING_TOKEN", value)
        refresh_known_secrets()
        second = await session.call("produce", {})

    assert first.data == {"text": f"release {value}"}
    assert second.metadata["cached"] is True
    assert second.data == {"text": "release [REDACTED:known-secret]"}


async def test_a_progress_message_cut_inside_a_secret_does_not_show_its_first_half() -> None:
    # clean_progress cuts messages at 1000 characters before redaction sees them: a token cut
    # in two is no longer recognised, and a tool echoing its input could shift the cut.
    seen: list[Mapping[str, Any]] = []

    def produce(arguments: Mapping[str, Any], context: Any) -> str:
        for pad in (960, 975, 985):  # the cut falls 33, 18 and 8 characters into the token
            context.emit({"progress": pad, "message": "x" * pad + " token " + TOKEN})
        return "done"

    async with _deck(produce) as deck:
        await deck.session().call("produce", {}, on_progress=seen.append)
        await trio.sleep(0.05)  # progress reaches the listener through the loop

    assert len(seen) == 3
    for event in seen:
        message = event["message"]
        assert TOKEN[:8] not in message, message
        assert message.endswith(" token [REDACTED:cut-token]…[+" + message.rsplit("…[+")[-1])


def test_a_cut_marker_withholds_only_the_word_it_cut() -> None:
    assert redact_text("see the file at /srv/app/config/sett…[+40 chars]") == (
        "see the file at [REDACTED:cut-token]…[+40 chars]"
    )
    assert redact_text("a short cut…[+4 chars]") == "a short cut…[+4 chars]"


# --- bounded work -------------------------------------------------------------------------------


def test_decoding_is_bounded_by_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every character is decoded at most once per level and the decoded texts are scanned in one
    # pass per level: count the scans of a text of many base64 lines and escapes.
    calls: list[int] = []
    original = redact._Redactor.find

    def counting(self: Any, text: str, depth: int = 0) -> Any:
        calls.append(len(text))
        return original(self, text, depth)

    monkeypatch.setattr(redact._Redactor, "find", counting)
    line = base64.b64encode(b"just some words that decode to text, " * 2).decode()
    text = "\n".join([line, "caf%C3%A9 x\u200by"] * 2000)

    redact_text(text)

    assert len(calls) <= 1 + redact._DECODE_DEPTH
    assert sum(calls) <= 3 * len(text)
