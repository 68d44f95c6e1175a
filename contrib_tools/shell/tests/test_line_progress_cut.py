"""A progress message keeps the end of a long output line: it says so, and it drops the word
the cut went through (it may be the tail of a secret whose name fell before the cut)."""

from __future__ import annotations

from collections.abc import Mapping

from tooldeck_policy.redact import redact_text
from tooldeck_tools_process import LineProgress


def _last_message(*chunks: bytes) -> str:
    seen: list[Mapping[str, object]] = []
    progress = LineProgress(seen.append, interval_s=0.0)
    for chunk in chunks:
        progress("stdout", chunk)
    assert seen, "no progress was reported"
    return str(seen[-1]["message"])


def test_a_long_line_is_cut_visibly_at_a_word_boundary() -> None:
    secret = "Zq7" + "x" * 40 + "K9"
    # The secret's name and its first characters fall before the last 500 bytes.
    line = b"db_password=" + secret.encode() + b" " + b"filler " * 69 + b"end\n"
    assert len(line) > 500
    message = _last_message(line)
    assert message.startswith("[stdout] [...] ")
    assert message.endswith("end")
    # No fragment of the secret survives into the message (nothing redaction could not see).
    assert "xxxx" not in message and "K9" not in message
    assert "K9" not in redact_text(message)


def test_a_line_cut_while_still_partial_is_marked_too() -> None:
    # More than the 4096 bytes kept of an unfinished line, then its end.
    message = _last_message(b"a" * 5000, b"b" * 600 + b" tail\n")
    assert message == "[stdout] [...] tail"


def test_a_short_line_is_reported_whole() -> None:
    assert _last_message(b"building step 3 of 7\n") == "[stdout] building step 3 of 7"

