"""The guard's tokenizer agrees with real shells on every line it lets through.

For plain command lines the guard finds clean, the words it computes must be the argv that dash
(``/bin/sh`` on Debian) and bash really pass to the program. The lines are fixed, benign ``printf``
calls written here (no payload from the corpora runs in a shell); they run inside
``bwrap --unshare-all`` (no network, read-only root) when bubblewrap works, else directly, which
the test reports.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from tooldeck_policy import analyze_command
from tooldeck_policy._shell import _Findings, _Lexer, _Word

# Quoting and escaping the guard must model exactly. Each line: printf '<%s>' WORDS.
LINES = [
    "'it''s'",
    "a\\ b c",
    '"a\\"b"',
    '"a\\b"',
    "'a\\b'",
    '"$"',
    "a$",
    "'x'\"y\"z",
    "\\'",
    "\"it's\"",
    "a\\\nb",
    "'' \"\" x",
    "\"a'b\" '\"'",
    '"\\$HOME"',
    "'`'",
    '"\\`"',
    "a#b '#'",
    "x=1",
    "'*' \"?\" \\[",
    '"{a,b}" \\{c,d\\} {}',
    "'$(id)' \"\\$(id)\"",
    '"a\\\nb"',
    "'a\nb'",
    "\\\\ '\\\\' \"\\\\\"",
    "caf\u00e9",
    '"$\'x\'"',
    "-n -- --x",
]


def _words(line: str) -> list[str]:
    tokens = _Lexer(line, _Findings()).tokens()
    assert all(isinstance(t, _Word) for t in tokens), tokens
    return [t.value for t in tokens if isinstance(t, _Word)]


def _runner() -> tuple[list[str], str]:
    bwrap = shutil.which("bwrap")
    if bwrap:
        prefix = [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
                  "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--"]
        probe = subprocess.run([*prefix, "/bin/true"], capture_output=True, check=False)
        if probe.returncode == 0:
            return prefix, "bwrap --unshare-all"
    return [], "directly (bubblewrap unavailable)"


@pytest.fixture(scope="module")
def runner() -> list[str]:
    prefix, how = _runner()
    print(f"\n[policy] tokenizer differential: shells run {how}")
    return prefix


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_policy_shell_tokenizer_matches_real_shells(shell: str, runner: list[str]) -> None:
    path = shutil.which(shell)
    assert path, f"{shell} must be installed for this test"
    mismatches = []
    for words in LINES:
        line = "printf '<%s>' " + words
        verdict = analyze_command(line)
        assert verdict.clean, (line, verdict)
        expected = "".join(f"<{w}>" for w in _words(line)[2:])
        done = subprocess.run(
            [*runner, path, "-c", line], capture_output=True, check=False,
            env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
        )
        got = done.stdout.decode("utf-8", "replace")
        if done.returncode != 0 or got != expected:
            mismatches.append((line, expected, got, done.stderr[-200:]))
    assert mismatches == []


def test_policy_shell_tokenizer_words_by_hand() -> None:
    # The line: the backtick inside single quotes is a plain character, the one outside
    # starts a substitution.
    tokens = _Lexer("echo '`'x", _Findings()).tokens()
    assert [t.value for t in tokens if isinstance(t, _Word)] == ["echo", "`x"]
    assert _words("a\\\nb") == ["ab"]
    assert _words("'a'\"b\"\\c") == ["abc"]
    word = _Lexer('"*"x*', _Findings()).tokens()[0]
    assert isinstance(word, _Word) and word.glob and word.path == "\x02x*"
    assert not _Lexer("'*'", _Findings()).tokens()[0].glob  # type: ignore[union-attr]
