"""Redaction is linear in its input and can run off the event loop under a deadline.

Issue 13: one 1 MB line of ``aws_secret=<40 chars> `` took 40-56 s (per-finding copies and
searches of the whole line). Each family below packs a finding every few dozen bytes into one
line; before the fix the first took ~4 s at 256 kB and ~46 s at 1 MB. Nothing here is timed;
the figures are printed (``-s``).
"""

from __future__ import annotations

import random
import string
import time
from collections.abc import Callable

import pytest
import trio
from tooldeck_policy import plugin
from tooldeck_policy.redact import (
    OFFLOAD_CHARS,
    RedactionTimeout,
    needs_offload,
    redact_result,
    redact_text,
    result_size,
)

from tooldeck_hookspecs import ToolCall, ToolDefinition, ToolResult

_RNG = random.Random(13)
_ALNUM = string.ascii_letters + string.digits


def _r(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


# (unit generator, secret extractor): a unit holds one secret, units are joined on one line.
FAMILIES: dict[str, Callable[[], tuple[str, str]]] = {
    "aws_secret": lambda: (lambda s: (f"aws_secret={s} ", s))(_r(40, _ALNUM + "/+")),
    "password=": lambda: (lambda s: (f"password={s} ", s))(_r(18)),
    "json api_key": lambda: (lambda s: (f'"api_key": "{s}", ', s))(_r(32)),
    "url credentials": lambda: (lambda s: (f"https://u:{s}@h.example/ ", s))(_r(14)),
    "authorization": lambda: (lambda s: (f"Authorization: Bearer {s} ", s))(_r(30)),
    "github token": lambda: (lambda s: (f"ghp_{s} ", "ghp_" + s))(_r(36)),
    "stopword glued": lambda: (lambda s: (f"secret,API_KEY={s}example ", s))(_r(24)),
    "marker glued": lambda: (lambda s: (f"token={s}#gitleaks:allow ", s))(_r(24)),
    # gitleaks' curl rules read to the end of the line from every "curl" under Python's
    # engine: 80 kB of "curl " took 18 s before they searched their option part instead.
    "curl user": lambda: (lambda s: (f"curl -s https://h.example -u admin:{s} ", s))(_r(20)),
    "curl header": lambda: (lambda s: (f'curl h.example -H "X-Api-Key: {s}" ', s))(_r(24)),
    "cookie": lambda: (lambda s: (f"Cookie: sid={s}; ", s))(_r(24)),
    "mysql -p": lambda: (lambda s: (f"mysql -uroot -p{s} db; ", s))(_r(16)),
    "--token": lambda: (lambda s: (f"gh --token {s} ", s))(_r(28)),
}

# Keywords packed on one line with nothing to find: every rule tried at every occurrence.
NOTHING_TO_FIND = ["curl ", "curl -x ", "curl -u ", "mysql ", "login ", "Cookie: ", "--token ",
                   "sshpass -p ", " -u \""]


@pytest.mark.parametrize("unit", NOTHING_TO_FIND)
def test_dense_keywords_without_secrets_on_one_long_line(unit: str) -> None:
    text = unit * (256_000 // len(unit))
    start = time.perf_counter()
    redacted = redact_text(text)
    print(f"\n{unit!r}: {len(text) / 1e3:.0f} kB, {time.perf_counter() - start:.2f} s")
    assert redacted == text


def _line(unit: Callable[[], tuple[str, str]], size: int) -> tuple[str, list[str]]:
    parts, secrets, total = [], [], 0
    while total < size:
        text, secret = unit()
        parts.append(text)
        secrets.append(secret)
        total += len(text)
    return "".join(parts), secrets


@pytest.mark.parametrize("family", FAMILIES)
def test_dense_findings_on_one_long_line(family: str) -> None:
    text, secrets = _line(FAMILIES[family], 256_000)
    start = time.perf_counter()
    redacted = redact_text(text)
    print(f"\n{family}: {len(text) / 1e3:.0f} kB, {len(secrets)} secrets, "
          f"{time.perf_counter() - start:.2f} s")  # fmt: skip
    leaked = [s for s in secrets if s in redacted]
    assert leaked == []
    assert redacted.count("[REDACTED:") >= len(secrets)


def test_many_begin_markers_without_an_end() -> None:
    # Each BEGIN used to search 64 KiB ahead for its END and scan the body again.
    text = "-----BEGIN RSA PRIVATE KEY-----\n" * 20_000 + "MIIEow" + _r(64) + "\n"
    redacted = redact_text(text)
    assert "PRIVATE KEY" not in redacted and "[REDACTED:private-key]" in redacted


def test_issue_13_one_megabyte_line() -> None:
    text, secrets = _line(FAMILIES["aws_secret"], 1_000_000)
    start = time.perf_counter()
    redacted = redact_text(text)
    print(f"\nissue 13 line: 1 MB, {len(secrets)} secrets, {time.perf_counter() - start:.2f} s")
    assert not any(s in redacted for s in secrets)


def test_size_estimate_and_offload_predicate() -> None:
    small = ToolResult.ok({"path": "a.py", "size": 10, "lines": ["x = 1", "y = 2"]})
    assert not needs_offload(small)
    assert result_size(small) == len("a.py") + len("x = 1") * 2 + len("pathsizelines")
    assert needs_offload(ToolResult.ok({"text": "x" * (OFFLOAD_CHARS + 1)}))
    assert needs_offload(ToolResult.ok([f"line {i}" for i in range(5000)]))  # many strings
    failed = ToolResult.fail("EXECUTION_ERROR", "e" * (OFFLOAD_CHARS + 1))
    assert needs_offload(failed)
    # the core reads the predicate off the hook implementation
    assert plugin.tooldeck_process_result.tooldeck_offload is needs_offload  # type: ignore[attr-defined]


def test_deadline_stops_redaction_without_returning_anything() -> None:
    text, _ = _line(FAMILIES["aws_secret"], 200_000)
    with pytest.raises(RedactionTimeout):
        redact_result(ToolResult.ok({"out": text}), deadline=time.monotonic() - 1)
    # a deadline far away changes nothing
    out = redact_result(ToolResult.ok({"out": text}), deadline=time.monotonic() + 3600)
    assert out is not None and "[REDACTED:" in out.data["out"]


async def test_big_result_redacted_in_a_thread_while_the_loop_keeps_running() -> None:
    text, secrets = _line(FAMILIES["aws_secret"], 300_000)
    result = ToolResult.ok({"stdout": text})
    tool = ToolDefinition(
        name="cat_file", description="Print a file.", category="filesystem", execute=lambda: None
    )
    hook = plugin.tooldeck_process_result
    assert hook.tooldeck_offload(result)  # type: ignore[attr-defined]
    ticks = 0
    done = trio.Event()
    redacted: list[ToolResult | None] = []

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await trio.sleep(0.001)

    async def offload() -> None:
        redacted.append(
            await trio.to_thread.run_sync(hook, ToolCall(name="cat_file"), tool, result)
        )
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        nursery.start_soon(offload)
    (out,) = redacted
    assert out is not None and not any(s in out.data["stdout"] for s in secrets)
    assert ticks > 1  # other tasks ran while the redaction went on in the worker
