"""Findings of the redactor audit: decorated private keys with no END line, the cost of dense
keywords, the cost of huge log records, and values padded past the length caps.

Every secret here is made at run time from a seeded generator (no realistic token is committed).
The timing tests use generous bounds (several times the measured figure) so that they catch the
old quadratic-ish behaviour (5 s per MB) without flaking on a busy machine; the figures are
printed (``-s``).
"""

from __future__ import annotations

import base64
import io
import logging
import os
import random
import string
from pathlib import Path

import pytest
from tooldeck_policy.redact import (
    LOG_TEXT_CAP,
    RedactingFilter,
    find_secrets,
    redact_record,
    redact_text,
)

_RNG = random.Random(2024)
_ALNUM = string.ascii_letters + string.digits


def _r(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def _key_lines() -> tuple[list[str], str]:
    """A PEM-shaped dummy block (random bytes, not a key): its lines and its base64 body."""
    body = base64.b64encode(bytes(_RNG.randrange(256) for _ in range(600))).decode()
    lines = [
        "-----BEGIN RSA PRIVATE KEY-----",
        *(body[i : i + 64] for i in range(0, len(body), 64)),
        "-----END RSA PRIVATE KEY-----",
    ]
    return lines, body


def _body_left(body: str, redacted: str) -> list[str]:
    """16-character pieces of the key body still in ``redacted``."""
    return [body[i : i + 16] for i in range(0, len(body) - 15, 8) if body[i : i + 16] in redacted]


# How a command can print a key's lines (head -n cuts the END line off).
DECORATIONS = {
    "cat -n": lambda lines: "\n".join(f"{i + 1:6d}\t{line}" for i, line in enumerate(lines)),
    "grep -n": lambda lines: "\n".join(f"{i + 1}:{line}" for i, line in enumerate(lines)),
    "grep -Hn": lambda lines: "\n".join(f"k.pem:{i + 1}:{line}" for i, line in enumerate(lines)),
    "cat -A": lambda lines: "\n".join(line + "$" for line in lines),
    "suffix #": lambda lines: "\n".join(line + "#" for line in lines),
    "suffix allow marker": lambda lines: "\n".join(line + "  # gitleaks:allow" for line in lines),
    "prefix |": lambda lines: "\n".join("|" + line for line in lines),
    "quoted > ": lambda lines: "\n".join("> " + line for line in lines),
    "table": lambda lines: "\n".join("| " + line + " |" for line in lines),
    "CRLF": lambda lines: "\r\n".join(lines),
    "one line": lambda lines: " ".join(lines),
    "one line ;": lambda lines: " ; ".join(lines),
    "plain": lambda lines: "\n".join(lines),
}


@pytest.mark.parametrize("decoration", DECORATIONS)
def test_decorated_private_key_without_end_line_is_redacted(decoration: str) -> None:
    lines, body = _key_lines()
    text = DECORATIONS[decoration](lines[:-1]) + "\n[output truncated]\n"
    redacted = redact_text(text)
    assert _body_left(body, redacted) == [], redacted
    assert "[REDACTED:private-key]" in redacted
    assert "[output truncated]" in redacted  # what follows the key is kept


@pytest.mark.parametrize("decoration", DECORATIONS)
def test_decorated_private_key_with_end_line_is_redacted(decoration: str) -> None:
    lines, body = _key_lines()
    redacted = redact_text(DECORATIONS[decoration](lines))
    assert _body_left(body, redacted) == [], redacted
    assert body[-8:] not in redacted  # the short last line too


def _security_data() -> Path:
    """$TOOLDECK_SECURITY_DATA, /work/shared/data/security, or shared/ beside the repository."""
    candidates = [
        os.environ.get("TOOLDECK_SECURITY_DATA", ""),
        "/work/shared/data/security",
        str(Path(__file__).resolve().parents[4] / "shared" / "data" / "security"),
    ]
    return next((Path(c) for c in candidates if c and Path(c).is_dir()), Path(candidates[1]))


_PRIVATE_KEY_FIXTURE = _security_data() / "secrets" / "detect-secrets" / "private_key.txt"


@pytest.mark.skipif(not _PRIVATE_KEY_FIXTURE.is_file(), reason="security corpora not available")
def test_head_of_the_detect_secrets_fixture_with_line_numbers() -> None:
    fixture = _PRIVATE_KEY_FIXTURE
    lines = fixture.read_text(encoding="utf-8").splitlines()
    text = "\n".join(f"{i + 1:6d}\t{line}" for i, line in enumerate(lines[:-1]))
    redacted = redact_text(text)
    assert lines[1] not in redacted and "[REDACTED:private-key]" in redacted


@pytest.mark.parametrize(
    "text",
    [
        'x = "-----BEGIN RSA PRIVATE KEY-----"',
        "-----BEGIN RSA PRIVATE KEY-----\nThis marker starts a PEM key; a base64 body follows.",
        "if line == '-----BEGIN PRIVATE KEY-----':\n    inside = True\n",
        "1:-----BEGIN PRIVATE KEY-----\n2:# no key here, see the docs\n",
        "-----BEGIN OPENSSH PRIVATE KEY----- is the first line of an OpenSSH key",
    ],
)
def test_bare_begin_marker_in_code_or_prose_is_left(text: str) -> None:
    assert find_secrets(text) == [], redact_text(text)


# The cost of hostile inputs (many BEGIN markers without END, dense keywords) is reported by
# `tooldeck bench`'s redaction figures and the audit's note, not asserted here (no timed tests).


@pytest.mark.parametrize(
    "template",
    [
        "{pad}_db_password = '{s}'",  # a long name: the keyword sits 100 characters in
        "config.{pad}.api_key: {s}",
        "keykeykey{pad}password={s}",  # keywords earlier in the same identifier
        '"client_secret": "{s}"',
        "export AUTH_TOKEN={s}",
    ],
)
def test_keyword_assignments_in_long_identifiers_are_still_found(template: str) -> None:
    secret = _r(24)
    text = "x " + template.format(pad="a" * 60, s=secret) + "\n"
    assert secret not in redact_text(text)


def test_huge_log_message_is_cut_before_redaction() -> None:
    token = "ghp_" + _r(36)
    straddling = "ghp_" + _r(36)
    head = f"token {token} " + "k" * 100
    filler = "key" * ((LOG_TEXT_CAP - len(head) - 10) // 3)
    message = head + filler
    message = (
        message + " " * (LOG_TEXT_CAP - 10 - len(message)) + straddling + " " + "key" * 400_000
    )
    record = logging.LogRecord(
        "tooldeck.tool.x", logging.WARNING, __file__, 1, "%s", (message,), None
    )
    redact_record(record)
    text = record.getMessage()
    assert token not in text and straddling[:8] not in text
    assert text.count("[REDACTED:github-pat]") == 2
    # the token across the cut is replaced whole: the cut moves to its end
    kept = message.index(straddling) + len(straddling)
    assert kept > LOG_TEXT_CAP
    assert text.endswith(
        f"[REDACTED:github-pat]... [truncated {len(message) - kept} chars before redaction]"
    )
    assert len(text) < LOG_TEXT_CAP + 200


def test_huge_exception_is_cut_before_redaction() -> None:
    token = "ghp_" + _r(36)
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.addFilter(RedactingFilter())
    log = logging.getLogger("someapp.huge")
    log.addHandler(handler)
    log.propagate = False
    try:
        raise RuntimeError(f"login refused for {token} " + "key" * 400_000)
    except RuntimeError:
        log.exception("call failed")
    finally:
        log.removeHandler(handler)
        log.propagate = True
    written = buffer.getvalue()
    assert token not in written and "[REDACTED:github-pat]" in written
    assert "chars before redaction]" in written and len(written) < 2 * LOG_TEXT_CAP


def test_small_log_records_are_not_cut() -> None:
    record = logging.LogRecord("tooldeck.x", logging.INFO, __file__, 1, "%s", ("key" * 1000,), None)
    redact_record(record)
    assert record.getMessage() == "key" * 1000 and record.args == ("key" * 1000,)


@pytest.mark.parametrize(
    "template",
    [
        'DB_PASSWORD="{s}{pad}"',
        'DB_PASSWORD="{pad}{s}"',
        '{{"password": "{s}{pad}"}}',
        '{{"password": "{pad}{s}"}}',
        "api_key = '{s}{pad}'",
        'cfg = {{\\"client_secret\\": \\"{s}{pad}\\"}}',
    ],
)
def test_quoted_credentials_longer_than_the_cap_are_redacted(template: str) -> None:
    secret = _r(22)
    text = template.format(s=secret, pad="x" * 600) + "\nnext line stays\n"
    redacted = redact_text(text)
    assert secret not in redacted, redacted[:120]
    assert "[REDACTED:" in redacted and "next line stays" in redacted


@pytest.mark.parametrize(
    "template",
    [
        "db_pass = '{s}\nDB_NAME=x",
        'DB_PASSWORD="{s}\nDB_NAME=x',
        '{{"password": "{s}',
        "password: '{s}",
    ],
)
def test_credentials_with_a_cut_off_closing_quote_are_redacted(template: str) -> None:
    secret = _r(22)
    redacted = redact_text(template.format(s=secret))
    assert secret not in redacted and "[REDACTED:" in redacted


@pytest.mark.parametrize(
    "text",
    [
        "password = '<your password here>",
        'token: "${GITHUB_TOKEN}',
        "password = '" + "*" * 600 + "'",
    ],
)
def test_placeholders_with_a_cut_off_or_far_quote_are_left(text: str) -> None:
    assert find_secrets(text) == [], redact_text(text)
