"""``format`` checks against huge strings: never a regex run over more than the format allows.

fastjsonschema's format regexes are Python's ``re``, which holds the GIL while it matches (so
even a worker thread freezes every session), and the ``email`` / ``idn-email`` ones backtrack
quadratically: ``"a.." * 20_000`` took seconds. Values longer than their format can be are
refused unread.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

import pytest
from tooldeck_schema._compile import compile_schema

FORMATS = {
    "email": ("ada@example.com", "a.." * 40_000),
    "idn-email": ("ada@example.com", "a@" + "b." * 40_000 + "@"),
    "hostname": ("api.example.com", "a." * 40_000 + "-"),
    "idn-hostname": ("example.com", "a" * 100_000),
    "ipv4": ("10.0.0.1", "1" * 100_000),
    "ipv6": ("::1", "1:" * 50_000),
    "date-time": ("2024-01-02T03:04:05Z", "1" * 100_000),
    "date": ("2024-01-02", "1" * 100_000),
    "time": ("03:04:05Z", "1" * 100_000),
    "json-pointer": ("/a/b", "/a" * 40_000 + "~"),
    "relative-json-pointer": ("0/a", "0" + "/a" * 40_000 + "~"),
    "uri-template": ("/a/{b}", "{" + "a" * 100_000),
}


def _regex_inputs(validate: Callable[[Any], Any], value: Any) -> list[re.Pattern[str]]:
    """The ``re`` patterns whose ``match`` ran while ``validate(value)`` did (this thread)."""
    ran: list[re.Pattern[str]] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and isinstance(getattr(arg, "__self__", None), re.Pattern):
            ran.append(arg.__self__)

    sys.setprofile(profile)
    try:
        try:
            validate(value)
        except Exception:  # fastjsonschema's JsonSchemaValueException: the value is refused
            pass
    finally:
        sys.setprofile(None)
    return ran


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_value_longer_than_its_format_is_refused_unread(fmt: str) -> None:
    good, huge = FORMATS[fmt]
    validate = compile_schema({"type": "string", "format": fmt})
    validate(good)  # real values still pass
    with pytest.raises(Exception, match=f"must be {fmt}"):
        validate(huge)
    assert _regex_inputs(validate, good)  # the format's regex does check normal values
    assert _regex_inputs(validate, huge) == []  # and never reads the huge one


def test_long_uris_are_still_checked() -> None:
    validate = compile_schema({"type": "string", "format": "uri"})
    validate("https://example.com/" + "a" * 100_000)
    with pytest.raises(Exception, match="must be uri"):
        validate("no scheme " + "a" * 100_000)


def test_format_regex_compiles_only_what_a_pattern_can_be() -> None:
    # fastjsonschema's own check is re.compile(value): ~1.2 s per MB of the model's text in a
    # pure-Python parser. Past MAX_REGEX_FORMAT_CHARS the value is refused without compiling.
    from tooldeck_schema._compile import MAX_REGEX_FORMAT_CHARS

    validate = compile_schema({"type": "string", "format": "regex"})
    validate("^a+(b|c)$")
    with pytest.raises(Exception, match="must be regex"):
        validate("(unclosed")
    compiled: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name == "_compile" and "re" in frame.f_globals.get(
            "__name__", ""
        ):
            compiled.append(frame.f_code.co_filename)

    huge = "a" * (MAX_REGEX_FORMAT_CHARS + 1)
    refused: Exception | None = None
    sys.setprofile(profile)
    try:
        validate(huge)
    except Exception as exc:  # fastjsonschema's JsonSchemaValueException
        refused = exc
    finally:
        sys.setprofile(None)
    assert refused is not None and "must be regex" in str(refused)
    assert compiled == []
    validate("a" * MAX_REGEX_FORMAT_CHARS)  # at the bound: compiled and valid
