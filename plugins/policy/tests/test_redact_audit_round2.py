"""Redaction under an attacker's second round: work per keyword, crashes, names beside values.

An audit found, on this machine: one 60 KB line of a Slack bot token's shape repeated took 45 s
(quadratic: the rule's open tail ran to the end of the line from every "xoxb", and each refused
match slid entropy windows over all of it); gitleaks' nuget-config-password pattern backtracked
to the end of the line from every ``<add key=`` (63 s per MB); short prefixes such as ``ABSK/``
repeated cost 56-92 s per MB. Nothing here is timed: work is counted (calls of the entropy
check, per occurrence of a keyword), and the figures of the slow families are printed (``-s``).
Fake secrets are built at run time.
"""

from __future__ import annotations

import json
import random
import re
import string
import time

import pytest
from tooldeck_policy import redact
from tooldeck_policy.redact import redact_result, redact_text, redact_value

from tooldeck_hookspecs import ErrorCode, ToolError, ToolResult

_RNG = random.Random(2026)
_ALNUM = string.ascii_letters + string.digits


def _r(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def _slack() -> str:
    return f"xoxb-{_r(11, string.digits)}-{_r(12, string.digits)}-{_r(24)}"


# Text a rule reads at every occurrence of its keyword: low-entropy runs in each token's
# alphabet, some with ten digits to pass the distinct-characters bound of the entropy check.
PADDED = {
    "slack zeros": "xoxb-0000000000-0000000000",
    "slack digits": "xoxb-0123456789-0123456789",
    "bedrock": "ABSK/",
    "sendgrid": "SG.",
    "gitlab": "gloas-",
    "square": "EAAA-",
    "github": "ghp_0123456789",
    "nuget": '<add key="Password" value="',
}


@pytest.fixture
def entropy_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = redact._entropic

    def counting(value: str, threshold: float) -> bool:
        calls.append(len(value))
        return real(value, threshold)

    monkeypatch.setattr(redact, "_entropic", counting)
    redact._clean.clear()
    return calls


@pytest.mark.parametrize("family", PADDED)
def test_a_refused_match_is_not_read_again_from_every_keyword_inside_it(
    family: str, entropy_calls: list[int]
) -> None:
    unit = PADDED[family]
    work = []
    for size in (16_000, 64_000):
        entropy_calls.clear()
        text = (unit * (size // len(unit) + 1))[:size]
        start = time.perf_counter()
        redact_text(text)  # ten distinct digits make a Slack run "secret" enough: either way
        print(f"\n{family}: {size // 1000} kB, {time.perf_counter() - start:.3f} s, "
              f"{len(entropy_calls)} entropy checks of {sum(entropy_calls)} characters")
        work.append(sum(entropy_calls))
    # Characters read by the entropy check grow with the text, not with its square.
    assert work[1] <= 4 * work[0] + 1000, work


def test_a_real_token_after_a_refused_run_is_still_found() -> None:
    for pad in ("xoxb-0000000000-0000000000" * 400, "xoxb-0123456789-0123456789" * 400):
        secret = _slack()
        for text in (f"{pad} {secret} done", f"{pad}\n{secret}\n", f"{pad}{secret}"):
            redacted = redact_text(text)
            assert secret not in redacted and secret[-24:] not in redacted, text[-80:]


def test_no_rule_runs_any_character_to_a_quote() -> None:
    """The nuget rule's shape, '.{8,}' then a quote, backtracked from the end of the line."""
    shape = re.compile(r"(?<![\\\[])\.(\*|\+|\{\d+,\d*\})\??\)*\\?[\"']")
    for rule in redact._redactor().rules:
        if isinstance(getattr(rule, "_regex", None), str):  # a gitleaks rule
            pattern = rule.pattern.pattern
            assert not shape.search(pattern), (rule.id, pattern)


@pytest.mark.parametrize(
    ("regex", "expected"),
    [
        (r'value=\"(.{8,})\"\s*/>', r'value=\"([^"\n]{8,})\"\s*/>'),
        (r"x'.*'", r"x'[^'\n]*'"),
        (r"a.+?\"b", r'a[^"\n]+?\"b'),
        (r'[.*"]', r'[.*"]'),  # a class: its dot is a dot
        (r'\.*"', r'\.*"'),  # an escaped dot
        (r'[^]."].{2,}"', r'[^]."][^"\n]{2,}"'),  # ']' first in a class is a member
        (r'(.{8,})\s"', r'(.{8,})\s"'),  # not right before the quote
    ],
)
def test_quote_bounded_dots(regex: str, expected: str) -> None:
    assert redact._quote_bounded_dots(regex) == expected


def test_the_nuget_rule_still_finds_its_passwords() -> None:
    password = _r(20)
    for text in (f'<add key="ClearTextPassword" value="{password}" />',
                 f'<add key="Password" value="{password}"/>\n<add key="x" value="y" />'):
        assert password not in redact_text(text)


# -- crashes ------------------------------------------------------------------------------------


def test_json_nested_deeper_than_the_stack_is_redacted_as_text() -> None:
    token = "ghp_" + _r(36)
    text = "[" * 2000 + f'"say \\"hi\\" {token}"' + "]" * 2000
    out = redact_result(ToolResult.ok(text))
    assert out is not None and token not in json.dumps(out.data)
    assert out.data.startswith("[" * 2000)  # the rest is kept as it was


def test_a_tuple_subclass_with_another_constructor() -> None:
    class Pair(tuple):  # type: ignore[type-arg]
        def __new__(cls, a: str, b: str) -> Pair:
            return super().__new__(cls, (a, b))

    token = "ghp_" + _r(36)
    out = redact_value(Pair("x", token))
    assert token not in str(out) and out[0] == "x"


@pytest.mark.parametrize("kind", ["bytes", "exception", "none", "number", "list"])
def test_an_error_message_that_is_not_text(kind: str) -> None:
    token = "ghp_" + _r(36)
    message = {"bytes": f"failed: {token}".encode(), "exception": ValueError(token),
               "none": None, "number": 42, "list": [token]}[kind]
    result = ToolResult(success=False, error=ToolError(code=ErrorCode.EXECUTION_ERROR,
                                                       message=message))  # type: ignore[arg-type]
    out = redact_result(result)
    shown = str((out or result).error.message)  # type: ignore[union-attr]
    assert token not in shown


@pytest.mark.parametrize("value", [None, b"ghp_x", 42, ["a"]])
def test_redact_text_says_what_it_takes(value: object) -> None:
    with pytest.raises(TypeError, match="takes a string"):
        redact_text(value)  # type: ignore[arg-type]


# -- a credential named beside its value ----------------------------------------------------------


def _named(secret: str) -> list[object]:
    return [
        [["Authorization", f"Bearer {secret}"]],  # a header list
        [("X-Api-Key", secret)],
        [("DB_PASSWORD", secret)],  # list(os.environ.items())
        {"name": "Authorization", "value": f"Bearer {secret}"},  # HAR
        {"name": "Cookie", "value": f"sid={secret}"},
        {"name": "DB_PASSWORD", "value": secret},  # a Kubernetes env entry
        {"ParameterKey": "DbPassword", "ParameterValue": secret},  # CloudFormation
        {"Key": "api_key", "Value": secret},
        {"key": "client_secret", "value": secret, "type": "text"},  # Postman
        {"password": [secret]},
        {"password": secret.encode()},
        {"password": {"value": secret}},
        {"headers": [{"name": "authorization", "value": f"token {secret}"}]},
    ]


@pytest.mark.parametrize("index", range(len(_named("x"))))
def test_a_credential_named_in_a_sibling_field_is_redacted(index: int) -> None:
    secret = _r(24)
    value = _named(secret)[index]
    out = redact_value(value)
    assert secret not in repr(out), out
    assert "[REDACTED:" in repr(out)


@pytest.mark.parametrize(
    "value",
    [
        {"name": "color", "value": "blue"},
        {"name": "token", "value": "${TOKEN}"},
        {"name": "password", "value": "<your password>"},
        ["password", "username"],  # two field names
        ["Authorization", "Cookie"],
        {"key": "api_key", "value": "api_key"},
        {"name": "Authorization", "required": True, "type": "string"},  # a schema, no value
        [{"name": "id", "value": "42"}, {"name": "title", "value": "Hello"}],
    ],
)
def test_names_and_values_that_are_no_credential_stay(value: object) -> None:
    assert redact_value(value) == value


@pytest.mark.parametrize(
    "template",
    ['{{"password": "{s}"}}', '{{"a": 1, "db_password": "{s}", "b": [2]}}',
     '{{"config": {{"secret": "{s}"}}}}'],
)
def test_redacted_json_text_still_parses(template: str) -> None:
    """A rule whose secret takes its quotes along ('"[^"]*"') left JSON that no longer parsed:
    the quotes stay now."""
    secret = _r(20)
    text = template.format(s=secret)
    out = redact_text(text)
    assert secret not in out and "[REDACTED:" in out
    json.loads(out)
