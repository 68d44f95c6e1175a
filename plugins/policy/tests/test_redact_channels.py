"""Secrets stay out of every channel besides a result's data: failures the core words itself
around a tool's exception, refusals quoting plugins' reasons, log records' ``extra=`` fields, and
credentials that sit in other plugins' settings tables."""

from __future__ import annotations

import json
import logging
import random
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tooldeck_policy import (
    plugin,  # noqa: F401  (importing the plugin installs the log hook)
    redact,
)
from tooldeck_policy.redact import KNOWN_SECRET_RULE, redact_record, settings_secrets

from tooldeck_hookspecs import Exclusion, ToolDefinition, hookimpl

tooldeck_testing = pytest.importorskip("tooldeck.testing")


def _value(seed: int, n: int = 26) -> str:
    # Shaped like no provider's token: only the known-secret matcher can find it.
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


@pytest.fixture
def fresh_known(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Start from an empty known-secret set and restore it afterwards."""
    saved = redact._known
    monkeypatch.setattr(redact, "_known", redact._KnownSecrets())
    yield
    monkeypatch.setattr(redact, "_known", saved)
    redact._clean.clear()


class _Abort(BaseException):
    """Not an Exception: a tool's own control-flow exception, or a library's."""


async def test_a_tool_raising_a_base_exception_has_its_message_redacted(
    tmp_path: Path, fresh_known: None
) -> None:
    secret = _value(1)

    def abort(arguments: Any, context: Any) -> None:
        raise _Abort(f"connection string had password={secret}")

    tool = ToolDefinition(
        name="abort_tool", description="Raise a BaseException.", category="api", execute=abort
    )
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy"],
        tools=[tool],
        config={"policy": {"secrets": [secret]}},
    )
    async with deck:
        result = await deck.session(workdir=tmp_path).call("abort_tool", {})
    assert not result.success and result.error is not None
    assert str(result.error.code) == "EXECUTION_ERROR"
    assert "_Abort" in result.error.message  # still says what happened
    assert secret not in repr(result)
    assert "[REDACTED:" in result.error.message


async def test_a_filter_plugins_refusal_reason_is_redacted(
    tmp_path: Path, fresh_known: None
) -> None:
    secret = _value(2)

    class TenantFilter:
        @hookimpl
        def tooldeck_filter_tools(self, query: str, candidates: Any, session: Any) -> list[Any]:
            # A filter quoting what it checked, the session's credential included.
            return [
                Exclusion(
                    name=t.name, reason=f"tenant key {session.attributes['key']} is read-only"
                )
                for t in candidates
                if t.name == "write_thing"
            ]

    def write_thing(arguments: Any, context: Any) -> str:
        return "written"

    tool = ToolDefinition(
        name="write_thing", description="Write a thing.", category="api", execute=write_thing
    )
    deck = tooldeck_testing.make_deck(
        TenantFilter(),
        load_entry_points=["schema", "runner", "policy"],
        tools=[tool],
        config={"policy": {"secrets": [secret]}},
    )
    async with deck:
        session = deck.session(workdir=tmp_path, attributes={"key": secret})
        result = await session.call("write_thing", {})
    assert not result.success and result.error is not None
    assert str(result.error.code) == "PERMISSION_DENIED"
    assert "read-only" in result.error.message
    assert secret not in repr(result)


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    """Every record of the ``tooldeck`` loggers, as a structured (JSON) handler receives it."""
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    handler = Keep()
    logger = logging.getLogger("tooldeck")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def _json_line(record: logging.LogRecord) -> str:
    """What a JSON log formatter writes: the message and every attribute of the record."""
    fields = {k: v for k, v in record.__dict__.items() if k not in ("args", "exc_info", "msg")}
    fields["message"] = record.getMessage()
    return json.dumps(fields, default=repr)


def test_extra_fields_of_a_log_record_are_redacted(
    records: list[logging.LogRecord], fresh_known: None
) -> None:
    secret = _value(3)
    redact.add_known_secrets(secret)
    log = logging.getLogger("tooldeck.tool.fetch")
    log.warning(
        "request failed",
        extra={
            "url": f"https://api.example.invalid/v1?key={secret}",
            "headers": {"Authorization": f"Bearer {secret}", "Accept": "text/plain"},
            "attempts": 3,
            "body": b"token=" + secret.encode(),
        },
    )
    (record,) = records
    line = _json_line(record)
    assert secret not in line
    assert line.count(KNOWN_SECRET_RULE) >= 2 or "[REDACTED:" in line
    assert record.attempts == 3  # type: ignore[attr-defined]  # not text: untouched
    assert record.headers["Accept"] == "text/plain"  # type: ignore[attr-defined]
    assert isinstance(record.body, bytes)  # type: ignore[attr-defined]


def test_huge_extra_fields_are_cut_before_redaction(fresh_known: None) -> None:
    secret = _value(4)
    redact.add_known_secrets(secret)
    record = logging.LogRecord("tooldeck.tool.x", logging.INFO, __file__, 1, "output", (), None)
    record.output = secret + "x" * 5_000_000  # type: ignore[attr-defined]
    record.lines = [secret] + ["y" * 100] * 100_000  # type: ignore[attr-defined]
    redact_record(record)
    assert secret not in record.output  # type: ignore[attr-defined]
    assert len(record.output) < redact.LOG_TEXT_CAP + 200  # type: ignore[attr-defined]
    assert secret not in repr(record.lines)  # type: ignore[attr-defined]
    assert len(repr(record.lines)) < redact.LOG_TEXT_CAP + 200  # type: ignore[attr-defined]


def test_clean_extra_fields_are_left_as_they_are(fresh_known: None) -> None:
    record = logging.LogRecord("tooldeck.tool.x", logging.INFO, __file__, 1, "done", (), None)
    tags = ["alpha", "beta"]
    record.tags = tags  # type: ignore[attr-defined]
    record.user = "alice"  # type: ignore[attr-defined]
    redact_record(record)
    assert record.tags is tags  # type: ignore[attr-defined]
    assert record.user == "alice"  # type: ignore[attr-defined]


SETTINGS_SECRETS = {
    "mcp-env": {"mcp": {"servers": {"gh": {"env": {"GITHUB_TOKEN": "SECRET"}}}}},
    "mcp-header": {"mcp": {"servers": {"api": {"headers": {"Authorization": "Bearer SECRET"}}}}},
    "api-key": {"search": {"api_key": "SECRET"}},
    "redis-url": {"redis": {"url": "redis://:SECRET@127.0.0.1:6379/0"}},
    "list-under-a-key": {"pool": {"password": ["SECRET"]}},
}


@pytest.mark.parametrize("case", sorted(SETTINGS_SECRETS))
def test_credentials_in_any_settings_table_are_known_secrets(case: str) -> None:
    secret = _value(5)
    settings = json.loads(json.dumps(SETTINGS_SECRETS[case]).replace("SECRET", secret))
    assert secret in settings_secrets(settings)


def test_names_placeholders_paths_and_the_policy_table_are_not_secrets() -> None:
    settings = {
        "policy": {"secret_env": ["PAYMENTS_TOKEN"], "secrets": ["abcd1234efgh"]},
        "search": {
            "token_env": "BRAVE_TOKEN",
            "api_key": "${BRAVE_API_KEY}",
            "password_file": "/run/secrets/db",
            "password": "<password>",
            "max_tokens": 4000,
        },
        "mcp": {"servers": {"gh": {"env": {"HOME": "/root", "PATH": "/usr/bin:/bin"}}}},
    }
    assert settings_secrets(settings) == []


async def test_a_plugin_quoting_a_settings_credential_is_redacted(
    tmp_path: Path, fresh_known: None
) -> None:
    secret = _value(6)

    def connect(arguments: Any, context: Any) -> str:
        # A tool (or a child process) that echoes its configuration when it fails.
        raise RuntimeError(f"upstream refused the key {context.settings['api_key']}")

    tool = ToolDefinition(
        name="connect_upstream", description="Connect.", category="api", execute=connect
    )
    deck = tooldeck_testing.make_deck(
        load_entry_points=["schema", "runner", "policy"],
        tools=[tool],
        config={"inline-tools": {"api_key": secret}},
    )
    async with deck:
        result = await deck.session(workdir=tmp_path).call("connect_upstream", {})
    assert not result.success and result.error is not None
    assert "upstream refused the key" in result.error.message
    assert secret not in repr(result)


def test_make_log_record_still_works_with_the_redaction_installed() -> None:
    # logging.makeLogRecord() calls the factory with name=None (socket log servers use it).
    record = logging.makeLogRecord({"name": "tooldeck.remote", "msg": "hello"})
    assert record.getMessage() == "hello"
