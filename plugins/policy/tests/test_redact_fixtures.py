"""Redaction against the gitleaks and detect-secrets fixtures in shared/data/security/secrets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tooldeck_policy.redact import find_secrets, redact_text


def _security_data() -> Path:
    """$TOOLDECK_SECURITY_DATA, /work/shared/data/security, or shared/ beside the repository."""
    candidates = [
        os.environ.get("TOOLDECK_SECURITY_DATA", ""),
        "/work/shared/data/security",
        str(Path(__file__).resolve().parents[4] / "shared" / "data" / "security"),
    ]
    return next((Path(c) for c in candidates if c and Path(c).is_dir()), Path(candidates[1]))


SECRETS = _security_data() / "secrets"
DS = SECRETS / "detect-secrets"

pytestmark = pytest.mark.skipif(not SECRETS.is_dir(), reason="security corpora not available")


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# (fixture, secret that must disappear) — the positives of the detect-secrets and gitleaks fixtures.
POSITIVES = [
    ("config.env", "gX69YO4CvBsVjzAwYxdGyDd30t5+9ez31gKATtj4"),
    ("config.ini", "123456789a1234"),
    ("config.ini", "23456789a1"),
    (
        "config.ini",
        "real_secret_which_isnt_an_i_d = vh987tyw9ehy8ghis7vwyhiwbwitefy7w3ASDGYDGUASDG",
    ),
    ("config.md", "ToCynx5Se4e2PtoZxEhW7lUJcOX15c54"),
    ("config.yaml", "AKIATESTTESTTESTTEST"),
    ("config.yaml", "MjNjcnh1IDJieXJpdXYyeXJpaTJidnl1MnI4OXkyb3UwMg=="),
    ("config2.yaml", "MmIwMDA0MmY3NDgxYzdiMDU2YzRiNDEwZDI4ZjMzY2Y="),
    ("each_secret.py.txt", "c2VjcmV0IG1lc3NhZ2Ugc28geW91J2xsIG5ldmVyIGd1ZXNzIG15IHBhc3N3b3Jk"),
    ("each_secret.py.txt", "8b1118b376c313ed420e5133ba91307817ed52c2"),
    ("each_secret.py.txt", "whywouldyouusehttpforpasswords"),
    ("each_secret.py.txt", "AKIAIOSFODNN7EXAMPLE"),
    ("each_secret.py.txt", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("file_with_secrets.py.txt", "c3VwZXIgbG9uZyBzdHJpbmcgc2hvdWxkIGNhdXNlIGVub3VnaCBlbnRyb3B5"),
    ("sample.diff", "a2480a72004fc40d124495fd59f5b482034fbadd"),  # "hashed_secret": ...
]


@pytest.mark.parametrize(("name", "secret"), POSITIVES, ids=[f"{n}:{s[:8]}" for n, s in POSITIVES])
def test_detect_secrets_positives_are_redacted(name: str, secret: str) -> None:
    text = read(DS / name)
    assert secret in text
    redacted = redact_text(text)
    assert secret not in redacted
    assert "[REDACTED:" in redacted


def test_gitleaks_env_password_is_redacted() -> None:
    text = read(SECRETS / "gitleaks" / "env.prod.txt")
    redacted = redact_text(text)
    assert "8ae31cacf141669ddfb5da" not in redacted
    assert "DB_PASSWORD=[REDACTED:" in redacted
    # Everything else in the file is configuration, not secrets.
    for line in ("DB_HOST=example.com", "DB_PORT=443", "DB_USERNAME=postgres", "DB_SSL=true"):
        assert line in redacted


def test_file_without_secrets_is_unchanged() -> None:
    text = read(DS / "file_with_no_secrets.py.txt")
    assert find_secrets(text) == []
    assert redact_text(text) == text


# Negatives inside positive fixtures: ids, UUIDs, red herrings and allowlisted lines survive.
NEGATIVES = [
    ("each_secret.py.txt", "DEADBEEF"),
    (
        "each_secret.py.txt",
        "YW1pYWx3YXlzZ2VuZXJhdGluZ3BheWxvYWRzd2hlbmltaHVuZ3J5b3JhbWlhbHdheXNodW5ncnk",
    ),
    ("config.yaml", "allowlisted_id: 'ToCynx5Se4e2PtoZxEhW7lUJcOX15c54'"),
    ("config.yaml", "203db13e-70c7-462b-9a3d-bf32640cb0be"),
    ("config.yaml", "some_value_here: not_secret"),
    ("config.ini", "foreign_key_id = vh987tyw9ehy8ghis7vwyhiwbwitefy7w3ASDGYDGUASDG"),
    ("config.ini", "keyA = 678912345"),
    ("config.md", "[guides](http://localhost/guilds)"),
    ("sample.diff", 'regex.search(subdir[len("012345678a") + 1:])'),
    ("sample.diff", '"2b00042f7481c7b056c4b410d28f33cf"'),
]


@pytest.mark.parametrize(("name", "kept"), NEGATIVES, ids=[f"{n}:{k[:12]}" for n, k in NEGATIVES])
def test_non_secrets_in_fixtures_survive(name: str, kept: str) -> None:
    text = read(DS / name)
    assert kept in text
    assert kept in redact_text(text)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("config.ini", "12345678901234"),
        ("config.yaml", "ToCynx5Se4e2PtoZxEhW7lUJcOX15c54"),
        ("file_with_secrets.py.txt", "f6CGV4aMM9zedoh3OUNbSakBymo7yplB"),
    ],
)
def test_pragma_allowlist_secret_in_tool_output_is_not_honoured(name: str, secret: str) -> None:
    # In a repository the pragma is the author's word; in tool output it is the data's, and a
    # command can append it to every line. The fixture's own pragma lines are redacted too.
    text = read(DS / name)
    assert any(secret in line and "pragma: allowlist secret" in line for line in text.splitlines())
    redacted = redact_text(text).splitlines()
    pragma_lines = [line for line in redacted if "pragma: allowlist secret" in line]
    assert pragma_lines  # the comment stays, only the secret goes
    assert not any(secret in line for line in pragma_lines)
    assert any("[REDACTED:" in line for line in pragma_lines)


def test_private_key_block_is_removed_whole() -> None:
    text = read(DS / "private_key.txt")
    redacted = redact_text(text)
    assert redacted.strip() == "[REDACTED:private-key]"
    assert "OPENSSH" not in redacted and "somethingSuperRandom" not in redacted


def test_uuids_and_git_shas_survive_in_prose() -> None:
    text = (
        "commit 8b1118b376c313ed420e5133ba91307817ed52c2\n"
        "Merge: 2b00042f 796dbb3\n"
        "request id 203db13e-70c7-462b-9a3d-bf32640cb0be failed; retry with token refresh\n"
        "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n"
        "git checkout 796dbb3 && git log -1 --format=%H\n"
        "uuid = '203db13e-70c7-462b-9a3d-bf32640cb0be'\n"
    )
    assert find_secrets(text) == []
