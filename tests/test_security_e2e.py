"""The security corpora end to end: through the whole deck with every default stage plugin.

Follows shared/data/security/README.md: payloads are never run in a shell (the tool below only
records what it was given), and traversal canaries live in the test's own tmp dir.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tooldeck import ErrorCode, SecurityConfig, ToolDefinition
from tooldeck.testing import make_deck

DATA = Path(
    os.environ.get("TOOLDECK_SECURITY_DATA")
    or Path(__file__).resolve().parents[2] / "shared" / "data" / "security"
)


def breaks_out(command: str) -> bool:
    """Independent check: shell syntax that acts outside quotes (or substitution inside "")."""
    quote = None
    for index, char in enumerate(command):
        ahead = command[index : index + 2]
        if quote == "'":
            quote = None if char == "'" else quote
        elif quote == '"':
            if char == '"':
                quote = None
            elif char == "`" or ahead == "$(":
                return True
        elif char in "'\"":
            quote = char
        elif char in ";&|<>`\n\r" or ahead in ("$(", "${", "() "):
            return True
    return quote is not None


received: list[str] = []


def _lines(path: Path) -> list[str]:
    lines = [line.rstrip("\r\n") for line in path.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line.strip()]


def record_command(arguments, context):
    # Stands in for an executor: it records, it never runs anything.
    received.append(arguments["command"])
    return "recorded"


RECORDER = ToolDefinition(
    name="run_command",
    description="Run a command line (test double that only records).",
    category="shell",
    parameters={
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
    security=SecurityConfig(level="safe", command_params=("command",)),
    execute=record_command,
)


async def test_every_command_injection_payload_is_refused_before_the_executor():
    payloads = _lines(DATA / "command-injection" / "command_exec.sanitized.txt")
    payloads += _lines(DATA / "command-injection" / "command-execution-unix.txt")
    received.clear()
    deck = make_deck(load_entry_points=["schema", "runner", "policy"], tools=[RECORDER])
    outcomes: dict[str, int] = {}
    async with deck:
        session = deck.session()
        for payload in payloads:
            result = await session.call("run_command", {"command": payload})
            code = "ran" if result.success else str(result.error.code)
            outcomes[code] = outcomes.get(code, 0) + 1
    print(f"\ncommand-injection payloads: {len(payloads)} tried, outcomes {outcomes}")
    # Whatever reached the tool cannot break out of an argument: no shell syntax at all.
    leaked = [p for p in received if breaks_out(p)]
    assert leaked == []
    assert outcomes.get(str(ErrorCode.COMMAND_INJECTION), 0) >= 0.85 * len(payloads)


@pytest.mark.parametrize(
    "corpus",
    [
        "directory_traversal.txt",
        "deep_traversal.txt",
        "linux-sensitive-files.txt",
        "proc-self-fd-check.txt",
        "lfi-simple-check.txt",
    ],
)
async def test_traversal_payloads_never_read_the_canary_through_the_deck(tmp_path, corpus):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "inside.txt").write_text("inside")
    outside = tmp_path / "outside"
    outside.mkdir()
    marker = "CANARY-7f3a9c-" + corpus
    canary = outside / "canary.txt"
    canary.write_text(marker)
    relative_canary = str(canary).lstrip("/")
    payloads = [
        line.replace("{FILE}", relative_canary) for line in _lines(DATA / "path-traversal" / corpus)
    ]
    deck = make_deck(load_entry_points=["schema", "runner", "policy", "cache", "fs"])
    blocked = 0
    async with deck:
        session = deck.session(workdir=allowed, grants={"filesystem"})
        for payload in payloads:
            for tool, arguments in (
                ("file_read", {"path": payload}),
                ("list_dir", {"path": payload}),
            ):
                result = await session.call(tool, arguments)
                assert marker not in repr(result), (tool, payload)
                if not result.success and result.error.code is ErrorCode.PATH_NOT_ALLOWED:
                    blocked += 1
    print(f"\n{corpus}: {len(payloads)} payloads x 2 tools, {blocked} refused as PATH_NOT_ALLOWED")
    assert canary.read_text() == marker
    assert sorted(p.name for p in tmp_path.iterdir()) == ["allowed", "outside"]


def test_the_independent_breakout_check_itself():
    assert breaks_out("ls; id") and breaks_out("a | b") and breaks_out('echo "$(id)"')
    assert breaks_out("echo `id`") and breaks_out("cat x > y") and breaks_out("a\nb")
    assert not breaks_out("ls -la") and not breaks_out("echo 'a;b|c'") and not breaks_out("{{4+8}}")
