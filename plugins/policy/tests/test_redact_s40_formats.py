"""Credential formats that went out as they were (audit s40).

Found by a hostile audit: ``cat ~/.pgpass`` (``host:port:db:user:password``), htpasswd and
/etc/shadow lines (``user:$apr1$...``, ``user:{SHA}...``, ``user:$2y$...``: a hash is cracked
offline), a private key's body with neither its BEGIN nor its END line (``sed -n 5,20p
id_rsa``), and a wrapped base64 blob whose first line was cut (``tail -c``: only that line was
ever decoded) were read by no rule. Every secret, hash and key here is built at run time.
"""

from __future__ import annotations

import base64
import json
import os
import random
import string
import textwrap

import pytest
from tooldeck_policy.redact import redact_text, redact_value

_RNG = random.Random(40)
_ALNUM = string.ascii_letters + string.digits
_C64 = "./" + string.digits + string.ascii_uppercase + string.ascii_lowercase


def _r(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


PASSWORD = _r(6) + "7" + _r(12)  # letters and digits: no word, no placeholder


# ------------------------------------------------------------------------------ ~/.pgpass

PGPASS_LINES = {
    "plain": f"db.example.com:5432:appdb:app:{PASSWORD}",
    "wildcards": f"*:*:*:replicator:{PASSWORD}",
    "localhost": f"localhost:5433:*:postgres:{PASSWORD}",
    "escaped colon": f"db:5432:app:bob:x\\:{PASSWORD}",
    "ipv6 host": f"\\:\\:1:5432:app:bob:{PASSWORD}",
    "socket dir": f"/var/run/postgresql:5432:app:bob:{PASSWORD}",
    "cat with prompt": f"$ cat ~/.pgpass\n# prod\ndb:5432:app:bob:{PASSWORD}\n",
    "crlf": f"db:5432:app:bob:{PASSWORD}\r\n",
    "cat -n": f"     2\tdb:5432:app:bob:{PASSWORD}",
    "grep -H": f"/home/u/.pgpass:db:5432:app:bob:{PASSWORD}",
    "grep -Hn": f"/home/u/.pgpass:3:db:5432:app:bob:{PASSWORD}",
    "a field glued after": f"db:5432:app:bob:{PASSWORD}:x",
    "json string": json.dumps({"content": f"db:5432:app:bob:{PASSWORD}\nh2:1:d:u:{PASSWORD}\n"}),
}


@pytest.mark.parametrize("text", PGPASS_LINES.values(), ids=PGPASS_LINES.keys())
def test_pgpass_passwords_are_redacted(text: str) -> None:
    redacted = redact_text(text)
    assert PASSWORD not in redacted
    assert "[REDACTED:pgpass-password]" in redacted
    assert ":[REDACTED:pgpass-password]" in redacted  # the fields before it are kept


@pytest.mark.parametrize(
    "text",
    [
        "root:x:0:0:root:/root:/bin/bash",  # /etc/passwd: no port in second place
        "users.txt:1:root:x:0:0:root:/root:/bin/bash\n",
        "/etc/shadow:1:root:*:20228:0:99999:7:::",  # grep -Hn: more than five fields
        "/etc/group:38:nogroup:x:65534:",
        "2024-01-01 12:00:01 connect 10.0.0.1:5432 ok",
        "listening on http://example.com:8080/path and [::1]:5432",
        "hostname:port:database:username:password",  # the documented format itself
        "localhost:5432:mydb:myuser:mypassword",  # a word
        "app.log:3:ERROR:db:connection refused",
        "src/foo.py:12:5: E501 line too long",
        "00:11:22:33:44:55",
        "PATH=/usr/local/sbin:/usr/local/bin:/sbin:/bin",
    ],
)
def test_colon_separated_text_that_is_no_pgpass_line_is_left(text: str) -> None:
    assert redact_text(text) == text


# ------------------------------------------------------------------------------ password hashes


def _b64(n: int) -> str:
    return base64.b64encode(os.urandom(n)).decode()


HASHES = {
    "apr1": f"$apr1${_r(8, _C64)}${_r(22, _C64)}",
    "md5-crypt": f"$1${_r(8, _C64)}${_r(22, _C64)}",
    "bcrypt 2y": f"$2y$05${_r(53, _C64)}",
    "bcrypt 2b": f"$2b$12${_r(53, _C64)}",
    "sha": "{SHA}" + _b64(20),
    "ssha": "{SSHA}" + _b64(24),
    "sha512-crypt": f"$6${_r(16, _C64)}${_r(86, _C64)}",
    "sha256-crypt rounds": f"$5$rounds=5000${_r(16, _C64)}${_r(43, _C64)}",
    "yescrypt": f"$y$j9T${_r(22, _C64)}${_r(43, _C64)}",
    "argon2id": f"$argon2id$v=19$m=65536,t=3,p=4${_b64(16).rstrip('=')}${_b64(32).rstrip('=')}",
    "django pbkdf2": f"pbkdf2_sha256$870000${_r(22)}${_b64(32)}",
    "phpass": f"$P$B{_r(30, _C64)}",
    "ldap crypt": "{CRYPT}" + f"$6${_r(8, _C64)}${_r(86, _C64)}",
}
HASH_CONTEXTS = {
    "htpasswd": "alice:{h}",
    "shadow": "alice:{h}:19000:0:99999:7:::",
    "ldif": "userPassword: {h}",
    "json": '{{"username": "alice", "hash": "{h}"}}',
    "glued": "{h}x",
}


@pytest.mark.parametrize("context", HASH_CONTEXTS.values(), ids=HASH_CONTEXTS.keys())
@pytest.mark.parametrize("hashed", HASHES.values(), ids=HASHES.keys())
def test_password_hashes_are_redacted_whole(hashed: str, context: str) -> None:
    redacted = redact_text(context.format(h=hashed))
    assert "[REDACTED:" in redacted
    # Nothing of the salt or the hash is left (the scheme's prefix may be).
    assert hashed[-16:] not in redacted and hashed[len(hashed) // 2 :][:12] not in redacted


def test_an_htpasswd_file_keeps_its_user_names() -> None:
    text = "\n".join(f"user{i}:{h}" for i, h in enumerate(HASHES.values())) + "\n"
    redacted = redact_text(text)
    assert redacted == "".join(
        f"user{i}:[REDACTED:password-hash]\n" for i in range(len(HASHES))
    )


@pytest.mark.parametrize(
    "text",
    [
        "echo $1$2$3",
        "costs $5$ or $6$ per seat",
        "the {SHA} scheme is weak; use $2y$ (bcrypt) instead",
        "md5$ and sha1$ prefixes mark old Django hashes",
        "cost: $P$ and $H$",
    ],
)
def test_prose_about_hash_schemes_is_left(text: str) -> None:
    assert redact_text(text) == text


# ------------------------------------------------------------------------------ key bodies


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes([tag, n]) + content
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(size)]) + size + content


def _der_int(nbytes: int) -> bytes:
    # A random positive number of ``nbytes`` bytes, its top bit set (DER then adds a 0 byte).
    value = bytes([0x80 | _RNG.randrange(128)]) + os.urandom(nbytes - 1)
    return _der(0x02, b"\x00" + value)


def _rsa_like_der(bits: int) -> bytes:
    """An RSA private key's DER layout (PKCS#1) holding random numbers: what the detector
    reads is the structure, which needs no real key."""
    full, half = bits // 8, bits // 16
    numbers = [_der(0x02, b"\x00"), _der_int(full), _der(0x02, b"\x01\x00\x01"), _der_int(full),
               _der_int(half), _der_int(half), _der_int(half), _der_int(half), _der_int(half)]
    return _der(0x30, b"".join(numbers))


def _public_like_der(bits: int) -> bytes:
    """A certificate's or public key's numbers: one modulus, a short exponent, then a
    signature (random bytes in a BIT STRING)."""
    key = _der(0x30, _der_int(bits // 8) + _der(0x02, b"\x01\x00\x01"))
    return _der(0x30, key + _der(0x03, b"\x00" + os.urandom(bits // 8)))


def _pem_lines(data: bytes, width: int = 64) -> list[str]:
    return textwrap.wrap(base64.b64encode(data).decode(), width)


@pytest.mark.parametrize("bits", [1024, 2048, 4096])
@pytest.mark.parametrize("cut", ["whole body", "middle", "from line 2"])
def test_a_key_body_without_begin_or_end_is_redacted(bits: int, cut: str) -> None:
    lines = _pem_lines(_rsa_like_der(bits))
    part = {"whole body": lines, "middle": lines[2:-2], "from line 2": lines[1:]}[cut]
    # (A word on the line after a blob reads as its short last line: "(done)" does not.)
    text = "key material follows:\n" + "\n".join(part) + "\n(done)\n"
    redacted = redact_text(text)
    assert "[REDACTED:private-key]" in redacted
    assert not any(line in redacted for line in part)
    assert redacted.startswith("key material follows:\n") and redacted.endswith("\n(done)\n")


@pytest.mark.parametrize(
    "data",
    [
        _public_like_der(2048),
        _public_like_der(4096),
        os.urandom(20_000),  # an image or a compressed file: as random, no structure
        bytes(5000) + os.urandom(64) + bytes(5000),  # a sparse file
        b"\x02\x81\x80" * 3000,  # headers without numbers
        (b"\x00\x00\x00\x80" + bytes(range(128))) * 100,  # lengths and a pattern
    ],
    ids=["certificate 2048", "certificate 4096", "random", "sparse", "headers", "pattern"],
)
@pytest.mark.parametrize("width", [64, 76])
def test_other_base64_bodies_are_left_whole(data: bytes, width: int) -> None:
    text = "\n".join(_pem_lines(data, width)) + "\n"
    assert redact_text(text) == text


def test_real_keys_without_markers_are_redacted_and_certificates_left() -> None:
    crypto = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")
    ec = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ec")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    formats = [crypto.PrivateFormat.TraditionalOpenSSL, crypto.PrivateFormat.PKCS8,
               crypto.PrivateFormat.OpenSSH]
    for private_format in formats:
        pem = key.private_bytes(crypto.Encoding.PEM, private_format, crypto.NoEncryption())
        body = [line for line in pem.decode().splitlines() if not line.startswith("-----")]
        for part in (body, body[1:-1], body[3:]):  # OpenSSH's 70-wide lines: misaligned
            redacted = redact_text("\n".join(part) + "\n")
            assert "[REDACTED:private-key]" in redacted
            assert not any(line in redacted for line in part)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    pem = ec_key.private_bytes(crypto.Encoding.PEM, crypto.PrivateFormat.TraditionalOpenSSL,
                               crypto.NoEncryption())
    body = "\n".join(line for line in pem.decode().splitlines() if not line.startswith("-----"))
    assert "[REDACTED:private-key]" in redact_text(body + "\n")
    public = key.public_key().public_bytes(crypto.Encoding.PEM,
                                           crypto.PublicFormat.SubjectPublicKeyInfo)
    body = "\n".join(line for line in public.decode().splitlines() if not line.startswith("-"))
    assert redact_text(body + "\n") == body + "\n"


def test_a_der_key_file_read_as_base64_bytes_is_withheld() -> None:
    blob = base64.b64encode(_rsa_like_der(2048)).decode()
    value = {"content": blob, "encoding": "base64"}
    redacted = redact_value(value)
    assert redacted["content"].startswith("[REDACTED:base64:private-key]")
    assert redact_value({"content": base64.b64encode(os.urandom(2000)).decode(),
                         "encoding": "base64"})["encoding"] == "base64"


# ------------------------------------------------------------------------------ cut base64


def test_a_wrapped_base64_blob_whose_first_line_was_cut_is_still_decoded() -> None:
    token = "ghp_" + _r(36)
    env = "# settings\n" + "".join(f"OPTION_{i}=value{i}\n" for i in range(8))
    lines = _pem_lines(f"{env}GITHUB_TOKEN={token}\n".encode())
    for cut in (3, 4, 17):  # ``tail -c``: the first line loses a few characters
        text = "\n".join([lines[0][cut:], *lines[1:]]) + "\n"
        redacted = redact_text(text)
        assert "[REDACTED:base64:github-pat]" in redacted
        assert not any(line in redacted for line in lines[1:])
