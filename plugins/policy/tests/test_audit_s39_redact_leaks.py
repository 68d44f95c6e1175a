"""Secrets that went out as they were, in formats tools print every day (audit s39).

Found by a hostile audit: a ``Cookie:`` header stopped being read at its first odd pair (a
quoted value, a flag, a comma) or after 64 pairs; YAML's ``password: |`` put the value on the
next line, out of every rule's sight; ``{"name": "DB_PASSWORD", "value": ...}`` printed as text
(``kubectl get -o json``, HAR, ``aws ssm``) and ``- name:``/``value:`` in YAML had the name in
another field; ``<password>...</password>`` and ``~/.netrc`` were read by no rule; a metadata
key holding a secret went out whenever the result's data and the key's value were plain. Fake
secrets are built at run time.
"""

from __future__ import annotations

import json
import random
import string

import pytest
from tooldeck_policy.redact import redact_result, redact_text

from tooldeck_hookspecs import ToolResult

_RNG = random.Random(39)


def _secret(n: int = 20) -> str:
    # Letters, digits and a '#': no placeholder, no plain word, random enough for any rule.
    body = "".join(_RNG.choice(string.ascii_letters + string.digits) for _ in range(n))
    return f"{body[:6]}#{body[6:]}"


SECRET = _secret()
SESSION = "".join(_RNG.choice("0123456789abcdef") for _ in range(32))
GITHUB = "ghp_" + "".join(_RNG.choice(string.ascii_letters + string.digits) for _ in range(36))


# ------------------------------------------------------------------------------ cookies

COOKIE_HEADERS = {
    "quoted value first": f'Cookie: theme="dark"; sessionid={SESSION}',
    "flag first": f"Cookie: consent; sessionid={SESSION}",
    "comma in a value": f"Cookie: prefs=a,b; sessionid={SESSION}",
    "70 pairs before": "Cookie: " + "; ".join(f"c{i}=v" for i in range(70))
    + f"; sessionid={SESSION}",
    "quoted session": f'Cookie: theme=dark; sessionid="{SESSION}"',
    "json header map": json.dumps({"Cookie": f'theme="dark"; sessionid={SESSION}'}),
    "set-cookie with expires": f"Set-Cookie: sid={SESSION}; Expires=Wed, 21 Oct 2026 07:28:00 GMT",
    "curl --cookie": f"curl --cookie 'theme=\"dark\"; sessionid={SESSION}' https://h.example",
}


@pytest.mark.parametrize("text", COOKIE_HEADERS.values(), ids=COOKIE_HEADERS.keys())
def test_every_pair_of_a_cookie_header_is_read(text: str) -> None:
    redacted = redact_text(text)
    assert SESSION not in redacted
    assert "[REDACTED:" in redacted


def test_cookie_header_ends_at_its_quote_and_leaves_what_follows() -> None:
    text = json.dumps({"Cookie": f"sid={SESSION}", "Accept": "level=debug12345"})
    redacted = redact_text(text)
    assert SESSION not in redacted and "level=debug12345" in redacted
    # Set-Cookie's attributes are left, and so is a cookie value too short to be a credential.
    assert redact_text("Cookie: theme=dark; lang=en") == "Cookie: theme=dark; lang=en"


# ------------------------------------------------------------------------------ YAML


YAML_VALUES_BELOW = {
    "literal block": f"db:\n  password: |\n    {SECRET}\n  user: bob\n",
    "folded strip": f"password: >-\n  {SECRET}\n",
    "keep with comment": f"api_token: |+ # from vault\n    {SECRET}\n",
    "plain on next line": f"secret_key:\n  {SECRET}\n",
    "crlf": f"password: |\r\n  {SECRET}\r\n",
    "in a list item": f"users:\n  - name: bob\n    password: |\n      {SECRET}\n",
}


@pytest.mark.parametrize("text", YAML_VALUES_BELOW.values(), ids=YAML_VALUES_BELOW.keys())
def test_yaml_values_written_below_their_name_are_redacted(text: str) -> None:
    redacted = redact_text(text)
    assert SECRET not in redacted
    assert "[REDACTED:keyword-assignment]" in redacted


def test_yaml_block_redaction_keeps_the_structure_around_it() -> None:
    text = f"db:\n  password: |\n    {SECRET}\n    {SECRET}\n  user: bob\nport: 5432\n"
    assert redact_text(text) == (
        "db:\n  password: |\n    [REDACTED:keyword-assignment]\n  user: bob\nport: 5432\n"
    )


@pytest.mark.parametrize(
    "text",
    [
        "credentials:\n  username: bob\n  region: eu-west-1\n",  # a nested mapping
        "tokens:\n  - first\n  - second\n",  # a list
        "password: |\nport: 5432\n",  # an empty block
        "auth_token:\n  ${AUTH_TOKEN}\n",  # a placeholder
    ],
)
def test_yaml_structures_and_placeholders_below_a_name_are_left(text: str) -> None:
    assert redact_text(text) == text


# ------------------------------------------------------------------------------ name/value


NAMED_VALUES = {
    "kubectl json": json.dumps(
        {"env": [{"name": "DB_PASSWORD", "value": SECRET}, {"name": "MODE", "value": "prod"}]},
        indent=2,
    ),
    "compact json": json.dumps([{"name": "API_TOKEN", "value": SECRET}], separators=(",", ":")),
    "har header": json.dumps({"name": "Authorization", "value": f"Bearer {SECRET}"}),
    "ssm parameter": json.dumps(
        {"Name": "/prod/db/password", "Type": "SecureString", "Value": SECRET}
    ),
    "cloudformation": json.dumps({"ParameterKey": "DbPassword", "ParameterValue": SECRET}),
    "yaml env": f"env:\n  - name: DB_PASSWORD\n    value: {SECRET}\n",
    "yaml env quoted": f'env:\n- name: API_TOKEN\n  value: "{SECRET}"\n',
    "json in json": json.dumps(json.dumps({"name": "API_KEY", "value": SECRET})),
}


@pytest.mark.parametrize("text", NAMED_VALUES.values(), ids=NAMED_VALUES.keys())
def test_values_named_by_a_sibling_field_are_redacted_in_text(text: str) -> None:
    redacted = redact_text(text)
    assert SECRET not in redacted
    assert "[REDACTED:" in redacted


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"name": "Content-Type", "value": "application/json"}),
        json.dumps([{"name": "MODE", "value": "production-eu-west-1"}]),
        # valueFrom is a reference, and the next item's value is not this name's
        "env:\n  - name: API_TOKEN\n    valueFrom:\n      secretKeyRef: {name: t, key: k}\n"
        "  - name: REGION\n    value: eu-west-1-b\n",
        # a value in another object is not this name's
        '[{"name": "api_token", "note": "rotated"}, {"value": "plainvalue12"}]',
    ],
)
def test_values_of_other_names_are_left(text: str) -> None:
    assert redact_text(text) == text


# ------------------------------------------------------------------------------ XML, netrc


@pytest.mark.parametrize(
    "text",
    [
        f"<server><id>repo</id><password>{SECRET}</password></server>",  # Maven settings.xml
        f"<ns:Password>{SECRET}</ns:Password>",
        f'<apiKey type="string">{SECRET}</apiKey>',
        f"<client_secret>{SECRET}</client_secret>",
    ],
)
def test_credential_elements_of_xml_are_redacted(text: str) -> None:
    redacted = redact_text(text)
    assert SECRET not in redacted and "[REDACTED:keyword-assignment]" in redacted


@pytest.mark.parametrize(
    "text",
    ["<token>expired</token>", "<keyStore>conf/keystore.jks</keyStore>",
     "<password></password>", "<tokenCount>12345678</tokenCount>"],
)
def test_other_xml_elements_are_left(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "text",
    [
        f"machine api.example.com login bob password {SECRET}",
        f"machine git.example.com\n  login bob\n  password {SECRET}\n",
        f"default login anonymous password {SECRET}",
    ],
)
def test_netrc_passwords_are_redacted(text: str) -> None:
    redacted = redact_text(text)
    assert SECRET not in redacted and "[REDACTED:netrc-password]" in redacted


def test_netrc_words_in_prose_are_left() -> None:
    text = "the default password is required; set one with --password"
    assert redact_text(text) == text


# ------------------------------------------------------------------------------ metadata keys


@pytest.mark.parametrize("data", [1, None, True, 2.5])
def test_a_secret_in_a_metadata_key_is_redacted_when_everything_else_is_plain(data: object) -> None:
    result = ToolResult.ok(data).with_metadata(**{GITHUB: 1, "elapsed": 0.5})
    redacted = redact_result(result)
    assert redacted is not None
    assert GITHUB not in json.dumps(redacted.metadata)
    assert redacted.metadata["elapsed"] == 0.5


def test_clean_plain_metadata_still_costs_nothing() -> None:
    result = ToolResult.ok(1).with_metadata(elapsed_ms=3, attempts=1)
    assert redact_result(result) is None
    assert redact_result(result) is None  # the keys are now remembered as clean


# ------------------------------------------------------------------------------ cut-off keys

_KEY_LINES = ["".join(_RNG.choice(string.ascii_letters + string.digits + "+/") for _ in range(64))
              for _ in range(6)]
_PEM = ("-----BEGIN PRIVATE KEY-----\n" + "\n".join(_KEY_LINES) + "\nAb3d==\n"
        "-----END PRIVATE KEY-----\n")


@pytest.mark.parametrize(
    "text",
    [
        _PEM[60:],  # ``tail``: the BEGIN line and a bit of the key are gone
        json.dumps({"email": "sa@p.iam", "private_key": _PEM})[-250:],  # a JSON line, cut
        "[stdout] " + json.dumps({"private_key": _PEM})[-300:],  # a progress message's tail
        _PEM[60:].replace("\n", "\r\n"),
        "    " + _PEM[60:].replace("\n", "\n    "),  # indented (YAML)
    ],
    ids=["tail", "json line", "progress", "crlf", "indented"],
)
def test_the_rest_of_a_key_whose_begin_line_was_cut_off_is_redacted(text: str) -> None:
    redacted = redact_text(text)
    assert "[REDACTED:private-key]" in redacted
    for line in _KEY_LINES:
        assert line[-20:] not in redacted
    assert "-----END" not in redacted


@pytest.mark.parametrize(
    "text",
    [
        'f.write("-----END PRIVATE KEY-----\\n")',
        'footer = "\\n-----END RSA PRIVATE KEY-----\\n"',
        "data\n-----END PRIVATE KEY-----\n",
    ],
)
def test_an_end_marker_alone_is_left(text: str) -> None:
    assert redact_text(text) == text


def test_many_end_markers_are_each_read_back_to_the_previous_one() -> None:
    block = "\n".join(_KEY_LINES[:2]) + "\n-----END PRIVATE KEY-----\n"
    text = block * 3000 + "-----END PRIVATE KEY-----\n" * 3000
    redacted = redact_text(text)
    assert redacted.count("[REDACTED:private-key]") == 3000
    assert not any(line in redacted for line in _KEY_LINES[:2])
