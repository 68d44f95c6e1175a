"""Secrets the deck knows (its environment, ``[policy] secrets``) are redacted exactly and in
their encodings: base64 (both alphabets, padded or not, at every alignment inside a blob), hex,
percent-encoding and JSON escapes."""

from __future__ import annotations

import base64
import json
import random
import string
import urllib.parse
from collections import namedtuple
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tooldeck_policy import redact
from tooldeck_policy.redact import (
    KNOWN_SECRET_RULE,
    add_known_secrets,
    encoded_forms,
    find_secrets,
    redact_text,
    redact_value,
    refresh_known_secrets,
    secret_env_name,
)

from tooldeck_hookspecs import ExecutionConfig, ToolDefinition


def _value(rng: random.Random, n: int = 24, extra: str = "") -> str:
    # Not shaped like any provider's token: only the known-secret matcher can find it.
    return "".join(rng.choice(string.ascii_letters + string.digits + extra) for _ in range(n))


@pytest.fixture
def fresh_known(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Start each test from an empty known-secret set and restore it afterwards."""
    saved = redact._known
    monkeypatch.setattr(redact, "_known", redact._KnownSecrets())
    yield
    monkeypatch.setattr(redact, "_known", saved)
    redact._clean.clear()


def _encodings(secret: str) -> dict[str, str]:
    raw = secret.encode()
    return {
        "raw": secret,
        "json": json.dumps({"v": secret}),
        "json-ascii": json.dumps([secret], ensure_ascii=True),
        "json-slash": json.dumps(secret).replace("/", "\\/"),
        "quote": urllib.parse.quote(secret, safe=""),
        "quote-slash": urllib.parse.quote(secret),
        "quote-plus": urllib.parse.quote_plus(secret),
        "quote-lower": urllib.parse.quote(secret, safe="")
        .replace("%2F", "%2f")
        .replace("%2B", "%2b"),
        "percent-all": "".join(f"%{b:02x}" for b in raw),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "b64": base64.b64encode(raw).decode(),
        "b64-nopad": base64.b64encode(raw).decode().rstrip("="),
        "b64url": base64.urlsafe_b64encode(raw).decode(),
        "b64url-nopad": base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "b64-newline": base64.b64encode(raw + b"\n").decode(),  # echo "$SECRET" | base64
    }


# Values chosen so that every byte length mod 3 and the characters that base64, JSON and
# percent-encoding treat specially are covered.
SECRET_SHAPES = [
    ("alnum-24", lambda rng: _value(rng, 24)),
    ("alnum-25", lambda rng: _value(rng, 25)),
    ("alnum-26", lambda rng: _value(rng, 26)),
    ("symbols", lambda rng: _value(rng, 20, "/+=-_~.!$&'()*,;:@?#[]%") + '"\\ é'),
    ("short-8", lambda rng: _value(rng, 8)),
]


@pytest.mark.parametrize(("shape", "make"), SECRET_SHAPES, ids=[s for s, _ in SECRET_SHAPES])
def test_env_secret_is_redacted_in_every_encoding(
    shape: str,
    make: Callable[[random.Random], str],
    monkeypatch: pytest.MonkeyPatch,
    fresh_known: None,
) -> None:
    secret = make(random.Random(shape))
    monkeypatch.setenv("DEPLOY_API_TOKEN", secret)
    refresh_known_secrets()
    for name, encoded in _encodings(secret).items():
        text = f"output: {encoded} (done)"
        redacted = redact_text(text)
        assert encoded not in redacted, (name, redacted)
        assert f"[REDACTED:{KNOWN_SECRET_RULE}]" in redacted, name
        assert redacted.startswith("output: ") and redacted.endswith(" (done)")


@pytest.mark.parametrize(("shape", "make"), SECRET_SHAPES, ids=[s for s, _ in SECRET_SHAPES])
def test_env_secret_inside_a_longer_base64_blob_is_redacted_at_every_alignment(
    shape: str,
    make: Callable[[random.Random], str],
    monkeypatch: pytest.MonkeyPatch,
    fresh_known: None,
) -> None:
    secret = make(random.Random(shape))
    monkeypatch.setenv("SERVICE_PASSWORD", secret)
    refresh_known_secrets()
    for before in range(6):
        for after in (0, 1, 2, 7):
            payload = b"A" * before + secret.encode() + b"Z" * after
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                blob = encode(payload).decode()
                redacted = redact_text(f"blob={blob}")
                assert KNOWN_SECRET_RULE in redacted, (before, after)
                # Nothing left that decodes to the secret: every 4-character-aligned window of
                # what remains of the blob decodes to less than the whole secret.
                assert blob not in redacted
                rest = redacted.replace(f"[REDACTED:{KNOWN_SECRET_RULE}]", " ")
                for piece in rest.split():
                    for start in range(4):
                        chunk = piece[start:]
                        chunk = chunk[: len(chunk) - len(chunk) % 4]
                        try:
                            decoded = base64.b64decode(chunk, altchars=b"-_", validate=False)
                        except ValueError:
                            continue
                        assert secret.encode() not in decoded


def test_which_environment_variables_count(
    monkeypatch: pytest.MonkeyPatch, fresh_known: None
) -> None:
    rng = random.Random(9)
    secret_names = [
        "GITHUB_TOKEN", "HF_TOKEN", "NPM_AUTH_TOKEN", "NPM_AUTH", "CLIENT_SECRET",
        "MY_SECRET_VALUE", "STRIPE_KEY", "OPENAI_API_KEY", "DB_PASSWORD", "PGPASSWORD",
        "MYSQL_ROOT_PASSWD", "GITLAB_PAT", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
        "SIGNING_KEY", "SENTRY_DSN", "SLACK_WEBHOOK_URL", "SESSION_COOKIE",
    ]  # fmt: skip
    plain_names = [
        "HOME", "LANG", "AWS_REGION", "AWS_PROFILE", "TOKEN_FILE", "KEYBOARD", "GIT_AUTHOR_EMAIL",
        "COOKIE_DOMAIN", "TOKENIZERS_PARALLELISM", "SSH_AUTH_SOCK", "AUTH_URL", "XAUTHORITY",
    ]  # fmt: skip
    assert not secret_env_name("PWD") and not secret_env_name("OLDPWD")  # paths, by name
    for name in secret_names:
        assert secret_env_name(name), name
    for name in plain_names:
        assert not secret_env_name(name), name
    values = {name: _value(rng) for name in secret_names + plain_names}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SHORT_TOKEN", "abc1234")  # < 8 characters: not registered
    monkeypatch.setenv("KEY_PATH_TOKEN", "/run/secrets/key")  # a path, not a secret
    refresh_known_secrets()
    text = " ".join(values.values()) + " abc1234 /run/secrets/key"
    redacted = redact_text(text)
    for name in secret_names:
        assert values[name] not in redacted, name
    for name in plain_names:
        assert values[name] in redacted, name
    assert "abc1234" in redacted and "/run/secrets/key" in redacted


def test_url_with_credentials_in_any_variable(
    monkeypatch: pytest.MonkeyPatch, fresh_known: None
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://app:Pa%40ss-w0rd-42@db.internal:5432/app")
    monkeypatch.setenv("CACHE", "redis://:r3disPassw0rd@cache:6379/0")
    refresh_known_secrets()
    redacted = redact_text(
        "connecting to postgres://app:Pa%40ss-w0rd-42@db.internal:5432/app; password Pa@ss-w0rd-42;"
        " cache r3disPassw0rd"
    )
    assert "Pa%40ss-w0rd-42" not in redacted and "Pa@ss-w0rd-42" not in redacted
    assert "r3disPassw0rd" not in redacted


def test_environment_changes_are_seen(monkeypatch: pytest.MonkeyPatch, fresh_known: None) -> None:
    secret = _value(random.Random(2))
    text = f"value {secret}"
    assert redact_text(text) == text  # not a secret yet; remembered as clean
    monkeypatch.setenv("LATE_API_KEY", secret)  # a new variable: noticed on the next call
    assert secret not in redact_text(text)
    assert secret not in redact_value({"out": text})["out"]


def test_configured_secrets_and_secret_env(
    monkeypatch: pytest.MonkeyPatch, fresh_known: None
) -> None:
    rng = random.Random(3)
    literal, odd_name_value = _value(rng, 12), _value(rng, 16)
    monkeypatch.setenv("INTERNAL_THING", odd_name_value)  # a name no pattern calls secret
    refresh_known_secrets()
    assert odd_name_value in redact_text(odd_name_value + " x")
    redact.configure({"secrets": [literal], "secret_env": ["INTERNAL_THING"]})
    for text in (literal, odd_name_value, base64.b64encode(literal.encode()).decode()):
        assert find_secrets(f"x {text} y")[0].rule_id == KNOWN_SECRET_RULE
    with pytest.raises(ValueError, match="shorter than"):
        redact.configure({"secrets": ["abc"]})
    with pytest.raises(ValueError, match="list of strings"):
        redact.configure({"secrets": "notalist"})
    add_known_secrets("another-literal-1")
    assert "another-literal-1" not in redact_text("see another-literal-1")


def test_many_secrets_one_matcher(fresh_known: None) -> None:
    rng = random.Random(4)
    values = [_value(rng, 20) for _ in range(300)]
    add_known_secrets(*values)
    # every form of every value sits in one automaton (or one alternation without it)
    assert redact._known.count == 300
    forms = set().union(*(encoded_forms(v) for v in values))
    if redact._ahocorasick is not None:
        assert len(redact._known.automaton) == len(forms)
    text = "\n".join(f"line {i}: {v}" for i, v in enumerate(values))
    redacted = redact_text(text)
    assert not any(v in redacted for v in values)
    assert redacted.count(KNOWN_SECRET_RULE) == 300


async def test_deck_redacts_configured_and_environment_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_known: None
) -> None:
    tooldeck_testing = pytest.importorskip("tooldeck.testing")
    rng = random.Random(5)
    configured, from_env = _value(rng, 18), _value(rng, 30)
    monkeypatch.setenv("PAYMENTS_SECRET", from_env)

    def dump(arguments: Any, context: Any) -> dict[str, Any]:
        raw = configured.encode()
        return {
            "text": f"cfg={configured} env={from_env}",
            "b64": base64.b64encode(raw).decode(),
            "hex": from_env.encode().hex(),
            "nested": json.dumps({"k": from_env}),
        }

    tool = ToolDefinition(
        name="dump",
        description="Dump things.",
        category="api",
        execution=ExecutionConfig(cacheable=False),
        execute=dump,
    )
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy"],
        tools=[tool],
        config={"policy": {"secrets": [configured]}},
    )
    async with deck:
        result = await deck.session(workdir=tmp_path).call("dump", {})
    assert result.success, result.error
    flat = json.dumps(result.data)
    for leaked in (configured, from_env, base64.b64encode(configured.encode()).decode()):
        assert leaked not in flat
    assert from_env.encode().hex() not in flat
    assert flat.count(KNOWN_SECRET_RULE) >= 5


def test_malformed_policy_table_fails_the_deck_at_start_up(fresh_known: None) -> None:
    tooldeck_testing = pytest.importorskip("tooldeck.testing")
    with pytest.raises(Exception, match="policy.secrets"):
        tooldeck_testing.make_deck(
            load_entry_points=["schema", "runner", "policy"], config={"policy": {"secrets": 5}}
        )


def test_secrets_in_keys_sets_tuples_and_bytes(fresh_known: None) -> None:
    secret = _value(random.Random(8), 20)
    add_known_secrets(secret)
    Pair = namedtuple("Pair", "name value")
    value = {
        secret: "as a key",
        "set": {secret, "plain"},
        "frozen": frozenset({secret}),
        "pair": Pair("x", secret),
        "stdout": f"out {secret}\n".encode() + b"\xff",
        "buffer": bytearray(secret.encode()),
    }
    out = redact_value(value)
    assert secret not in repr(out)
    assert list(out)[0] == f"[REDACTED:{KNOWN_SECRET_RULE}]" and out["set"] >= {"plain"}
    assert isinstance(out["pair"], Pair) and isinstance(out["frozen"], frozenset)
    assert out["stdout"].endswith(b"\n\xff") and isinstance(out["buffer"], bytearray)
    clean = {"a": [1, "x"], "b": {"y"}, "c": b"z"}
    assert redact_value(clean) is clean
