"""redact_value / redact_result: nested structures, JSON inside strings, cheap no-change path."""

from __future__ import annotations

import json
import random
import string

import attrs
from tooldeck_policy.redact import redact_result, redact_text, redact_value

from tooldeck_hookspecs import ToolError, ToolResult


def fake_pat(seed: int = 3) -> str:
    rng = random.Random(seed)
    return "ghp_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(36))


def test_secret_inside_json_string_inside_dict_is_redacted() -> None:
    token = fake_pat()
    inner = json.dumps({"config": {"headers": {"Authorization": f"token {token}"}}})
    value = {"status": 200, "body": json.dumps({"response": inner}), "tags": ("a", token)}
    redacted = redact_value(value)
    assert token not in json.dumps(redacted)
    # the body is still JSON, with the structure preserved around the marker
    body = json.loads(redacted["body"])
    headers = json.loads(body["response"])["config"]["headers"]
    assert headers["Authorization"].startswith("[REDACTED:")
    assert redacted["tags"] == ("a", "[REDACTED:github-pat]")
    assert isinstance(redacted["tags"], tuple)
    assert redacted["status"] == 200


def test_credential_key_in_a_mapping_redacts_its_value() -> None:
    value = {
        "user": "bob",
        "password": "hunter2!x",
        "db": {"DB_PASSWORD": "correct horse battery", "port": 5432},
        "api_key": "not-a-known-format-but-a-key",
        "max_tokens": "4096",
        "token_type": "Bearer",
        "password_placeholder": "<your password>",
        "secret": "${SECRET_FROM_ENV}",
        "headers": {"Authorization": "Bearer abc", "Cookie": "sid=1f2e3d", "Accept": "*/*"},
    }
    redacted = redact_value(value)
    assert redacted["password"] == "[REDACTED:keyword-assignment]"
    assert redacted["db"]["DB_PASSWORD"] == "[REDACTED:keyword-assignment]"
    assert redacted["api_key"] == "[REDACTED:keyword-assignment]"
    assert redacted["headers"] == {
        "Authorization": "[REDACTED:keyword-assignment]",
        "Cookie": "[REDACTED:keyword-assignment]",
        "Accept": "*/*",
    }
    for kept in ("user", "max_tokens", "token_type", "password_placeholder", "secret"):
        assert redacted[kept] == value[kept], kept
    assert redacted["db"]["port"] == 5432


def test_unchanged_values_are_returned_as_the_same_object() -> None:
    value = {"lines": ["hello", "world"], "n": 3, "nested": ({"a": "b"},)}
    assert redact_value(value) is value
    assert redact_value("plain text") == "plain text"
    text = '{"not": "a secret"}'
    assert redact_value(text) is text


def test_string_that_looks_like_json_but_is_not() -> None:
    token = fake_pat(4)
    text = "[1, 2, oops " + token + "]"
    assert redact_value(text) == "[1, 2, oops [REDACTED:github-pat]]"


def test_redact_result_returns_none_when_clean() -> None:
    result = ToolResult.ok({"files": ["a.txt", "b.txt"]}, duration_s=0.1)
    assert redact_result(result) is None
    failed = ToolResult.fail("EXECUTION_ERROR", "file not found: a.txt")
    assert redact_result(failed) is None


def test_redact_result_covers_data_error_and_metadata() -> None:
    token = fake_pat(5)
    result = ToolResult(
        success=False,
        data={"stdout": f"export GITHUB_TOKEN={token}\n"},
        error=ToolError.of(
            "EXECUTION_ERROR",
            f"git push failed for https://bob:s3cr3tPassw0rd@example.invalid/repo.git ({token})",
            details={"env": {"GITHUB_TOKEN": token}, "argv": ["git", "push"]},
        ),
        metadata={"duration_s": 0.5, "debug": f"token={token}"},
    )
    redacted = redact_result(result)
    assert redacted is not None
    dumped = json.dumps(attrs.asdict(redacted), default=str)
    assert token not in dumped
    assert "s3cr3tPassw0rd" not in dumped
    assert redacted.error is not None
    assert "https://bob:[REDACTED:url-credentials]@example.invalid" in redacted.error.message
    assert redacted.error.details["argv"] == ["git", "push"]
    assert redacted.error.code == result.error.code
    assert redacted.metadata["duration_s"] == 0.5
    # the chain passes the redacted result on; running it again finds nothing new
    assert redact_result(redacted) is None


def test_redaction_is_idempotent() -> None:
    token = fake_pat(6)
    text = f"api_key = '{token}'\npassword: hunter2hunter2\n"
    once = redact_text(text)
    assert redact_text(once) == once
    assert token not in once and "hunter2hunter2" not in once


def test_the_memo_of_clean_strings_never_holds_a_secret_and_stays_bounded() -> None:
    from tooldeck_policy import redact

    token = fake_pat(11)
    line = f"token={token}"
    for _ in range(3):  # redacted every time, however often it repeats
        assert token not in redact_text(line)
        assert redact_value({"out": line})["out"] != line
    assert not any(token in clean for clean in redact._clean)
    assert "in-process" == redact_text("in-process") and "in-process" in redact._clean
    # Bounded: filling it past its size empties it rather than growing.
    for i in range(redact._CLEAN_MAX_ENTRIES + 10):
        redact_text(f"plain value {i}")
    assert len(redact._clean) <= redact._CLEAN_MAX_ENTRIES
    # Long strings are never memoized (hashing them would cost more than it saves).
    long_text = "x " * redact._CLEAN_MAX_LENGTH
    redact_text(long_text)
    assert long_text not in redact._clean


def test_a_mapping_with_one_change_keeps_every_other_key_in_order() -> None:
    token = fake_pat(12)
    value = {"a": 1, "b": "plain", "c": f"token {token}", "d": None, "e": 2.5}
    redacted = redact_value(value)
    assert list(redacted) == list(value)
    assert redacted["c"].startswith("token [REDACTED:")
    assert {k: v for k, v in redacted.items() if k != "c"} == {
        k: v for k, v in value.items() if k != "c"
    }
    assert value["c"] == f"token {token}"  # the input is not modified
