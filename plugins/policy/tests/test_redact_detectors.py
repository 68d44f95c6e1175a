"""Our own detectors: keyword assignments, URL credentials, AWS keys, private keys; and what they
must leave alone (code, type hints, placeholders, paths, ids)."""

from __future__ import annotations

import pytest
from tooldeck_policy.redact import find_secrets, redact_text, shannon_entropy


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("password = 'hunter2'", "hunter2"),
        ('{"password": "hunter2"}', "hunter2"),
        ('{\\"password\\": \\"s3cr3t-value\\"}', "s3cr3t-value"),
        ("DB_PASSWORD=8ae31cacf141669ddfb5da", "8ae31cacf141669ddfb5da"),
        ("export API_KEY=AbCd1234EfGh5678", "AbCd1234EfGh5678"),
        ("auth_token: tok_9f8e7d6c5b4a", "tok_9f8e7d6c5b4a"),
        ("client_secret => 'zzq1-22x-4rt'", "zzq1-22x-4rt"),
        ("db_pass = Winter2026!", "Winter2026!"),
        (
            "  private_key: 'MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu'",
            "MIIBOgIB",
        ),
        ("mysql://root:Sup3rS3cret@db.internal:3306/app", "Sup3rS3cret"),
        ("postgresql://app:p%40ss-w0rd@127.0.0.1/app", "p%40ss-w0rd"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzzzzzzzzz", "wJalrXUtnFEMI"),
        ("key: AKIAZZZZZZZZZZZZZZZZ", "AKIAZZZZZZZZZZZZZZZZ"),
        ("Authorization: Bearer abc123.def456-ghi", "abc123.def456-ghi"),
        ('{"headers": {"Authorization": "Basic Ym9iOmh1bnRlcjI="}}', "Ym9iOmh1bnRlcjI="),
        ("< proxy-authorization: Token zzzzzzzz1", "zzzzzzzz1"),
    ],
)
def test_positive(text: str, secret: str) -> None:
    redacted = redact_text(text)
    assert secret not in redacted, redacted
    assert "[REDACTED:" in redacted


@pytest.mark.parametrize(
    "text",
    [
        "password = get_password()",
        "password = self.password",
        "token: str",
        "secret: SecretStr",
        "password: Optional[str] = None",
        "def login(user: str, password: str) -> Token:",
        "api_key = os.environ['API_KEY']",
        "password = password",
        "if password == '':",
        "max_tokens=4096",
        '"max_tokens": 4096, "token_count": 12, "prompt_tokens": 100',
        "token_type: Bearer",
        "secret_name = 'prod-db-credentials'",
        "password: ${DB_PASSWORD}",
        "password: '{{ vault_db_password }}'",
        "password = '<your password here>'",
        "password=********",
        "PWD=/home/bob/project",
        "OLDPWD=/work/main",
        "token: expired",
        "Invalid password for user bob",
        "https://example.com/path?token=",
        "git clone git@github.com:owner/repo.git",
        "http://localhost:8080/api/v1/items",
        "hash = '8b1118b376c313ed420e5133ba91307817ed52c2'",
        "user_id = '203db13e-70c7-462b-9a3d-bf32640cb0be'",
        "integrity: sha512-Q2y6OZ3qq2h0oZc9bS1f5aLr2bfQq0xWQy0WHTxY8Jk0pHCt0hQpY0n1dE0p",
        'x = "-----BEGIN RSA PRIVATE KEY-----"',
        "keyboard = 'qwertyuiopasdfghjkl'",
    ],
)
def test_negative(text: str) -> None:
    assert find_secrets(text) == [], redact_text(text)


def test_truncated_private_key_is_redacted_to_its_last_key_line() -> None:
    text = (
        "-----BEGIN RSA PRIVATE KEY-----\n"
        "Proc-Type: 4,ENCRYPTED\n"
        "MIIEowIBAAKCAQEAzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\n"
        "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=\n"
        "[output truncated at 1000 bytes]\n"
    )
    redacted = redact_text(text)
    assert redacted == "[REDACTED:private-key]\n[output truncated at 1000 bytes]\n"


def test_json_escaped_private_key_block() -> None:
    text = (
        '{"key": "-----BEGIN EC PRIVATE KEY-----\\nMHcCAQEEIzzzz\\n'
        '-----END EC PRIVATE KEY-----\\n"}'
    )
    assert redact_text(text) == '{"key": "[REDACTED:private-key]\\n"}'


def test_findings_have_rule_ids_and_spans() -> None:
    text = "a\nDB_PASSWORD=8ae31cacf141669ddfb5da\n"
    (finding,) = find_secrets(text)
    assert text[finding.start : finding.end] == "8ae31cacf141669ddfb5da"
    assert finding.rule_id == "keyword-assignment"


def test_shannon_entropy() -> None:
    assert shannon_entropy("") == 0.0
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("ab") == 1.0
    assert shannon_entropy("0123456789abcdef") == 4.0


def test_fallback_without_aho_corasick_finds_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    from importlib import resources

    from tooldeck_policy import redact

    document = json.loads(
        resources.files("tooldeck_policy").joinpath("rules", "gitleaks_rules.json").read_text()
    )
    monkeypatch.setattr(redact, "_ahocorasick", None)
    plain = redact._Redactor(document)
    assert plain.automaton is None
    text = (
        "DB_PASSWORD=8ae31cacf141669ddfb5da\nkey: AKIAZZZZZZZZZZZZZZZZ\n"
        "see https://bob:Sup3rS3cret@db.example.invalid/x and token refresh\n"
    )
    assert plain.find(text) == find_secrets(text)
    assert len(plain.find(text)) == 3
