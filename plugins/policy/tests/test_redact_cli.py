"""Credentials on command lines and in cookies (as ``ps``, shell history, CI logs, ``curl -v``
and HTTP logs show them) are redacted; ``--help`` output and prose are left alone.

Fake values are generated here (shared/data/security/README.md: no realistic tokens committed).
"""

from __future__ import annotations

import random
import string

import pytest
from tooldeck_policy.redact import redact_text

_RNG = random.Random(7)


def _secret(n: int = 20) -> str:
    # Letters and digits mixed, so that no value reads like a word or a metavar.
    return "".join(_RNG.choice(string.ascii_letters) for _ in range(n - 4)) + "7x9Q"


SECRET = _secret()

LEAKS = [
    f"mysql --password {SECRET} app",
    f"mysqldump -uroot -p{SECRET} app",
    f"mysql -h db -u root -p'{SECRET}' app",
    f"MariaDB-dump -p{SECRET}",
    f"sshpass -p {SECRET} ssh deploy@host",
    f"sshpass -p{SECRET} scp a host:",
    f"redis-cli -h cache -a {SECRET} ping",
    f"docker login -u bot -p {SECRET} registry.example",
    f"helm registry login reg -u bot -p {SECRET}",
    f"zip -r -P {SECRET} out.zip dir",
    f"unzip -P {SECRET} out.zip",
    f"7z a -p{SECRET} out.7z dir",
    f"openssl enc -aes-256-cbc -k {SECRET} -in f",
    f"gh auth login --with-token {SECRET}",
    f"tool --api-key {SECRET} run",
    f"tool --api_key={SECRET}",
    f"deploy --client-secret '{SECRET}'",
    f"wget --http-password {SECRET} https://h.example/f",
    f"--access-token {SECRET}",
    f"curl -u admin:{SECRET} https://h.example",
    f"curl --user=admin:{SECRET} https://h.example",
    f"Cookie: sid={SECRET}",
    f"Cookie: theme=dark; session={SECRET}; lang=en",
    f"Set-Cookie: session={SECRET}; Path=/; HttpOnly; Secure",
    f"set-cookie: auth_token={SECRET}; Max-Age=3600",
    f"curl --cookie 'session={SECRET}' https://h.example",
    f'{{"headers": {{"Cookie": "sid={SECRET}"}}}}',
    f"< Set-Cookie: JSESSIONID={SECRET}; Path=/app",
    f"root  1234  0.0 /usr/bin/mysql -u app -p{SECRET} --host db",
]


@pytest.mark.parametrize("text", LEAKS)
def test_credentials_on_command_lines_and_in_cookies_are_redacted(text: str) -> None:
    redacted = redact_text(text)
    assert SECRET not in redacted, redacted
    assert "[REDACTED:" in redacted


LEFT_ALONE = [
    "mysql -p app",  # a bare -p prompts for the password
    "mysql -u root -p",
    "mysql -P 3306 -h db",
    "docker login --password-stdin registry.example",
    "  -p, --password string   Password",
    "  --token TOKEN           the API token",
    "  --api-key API_KEY       your key",
    "use --password to set it",
    "the --token flag should be set",
    "--password $DB_PASSWORD",
    "--token ${GITHUB_TOKEN}",
    "--api-key <your-key>",
    "Cookie: theme=dark",
    "Set-Cookie: lang=en; Path=/",
    "the cookie jar is empty",
    "set-cookie handling is done by the client",
    "git commit -m 'fix login -p flag'",
    "curl -u user https://h.example",
    "curl -sSL https://h.example/install.sh",
]


@pytest.mark.parametrize("text", LEFT_ALONE)
def test_help_output_placeholders_and_prose_are_left_alone(text: str) -> None:
    assert redact_text(text) == text


def test_set_cookie_attributes_survive() -> None:
    redacted = redact_text(f"Set-Cookie: sid={SECRET}; Path=/api; Domain=h.example; HttpOnly")
    assert redacted == "Set-Cookie: sid=[REDACTED:cookie]; Path=/api; Domain=h.example; HttpOnly"


def test_curl_credentials_up_to_five_lines_after_the_command() -> None:
    # gitleaks' curl rules span continuation lines; the linear scan keeps that.
    text = f"curl -X POST https://h.example \\\n  -d @body.json \\\n  -u admin:{SECRET}\n"
    assert SECRET not in redact_text(text)
    header = f'curl https://h.example \\\n  -H "X-Api-Key: {SECRET}"\n'
    assert SECRET not in redact_text(header)
