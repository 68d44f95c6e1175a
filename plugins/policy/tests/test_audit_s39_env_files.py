"""Files of environment variables loaded for a command: the refused assignments (LD_PRELOAD,
NODE_OPTIONS, ...) out of the guard's sight. A named file is refused; the wrappers that load
one are looked through to the command they run."""

from __future__ import annotations

import pytest
from tooldeck_policy._shell import analyze_command


@pytest.mark.parametrize("line", [
    "uv run --env-file .env ls",
    "uv run --env-file=.env python app.py",
    "node --env-file=.env app.js",
    "node --env-file .env app.js",
    "node --env-file-if-exists=.env app.js",
    "nodejs --env-file=x app.js",
    "bun --env-file .env x.ts",
    "deno run --env-file=.env main.ts",
    "dotenv -f x.env run ls",
    "dotenv --file=x.env run ls",
    "dotenvx run -f .env -- ls",
    "dotenvx run --env-file=.env -- ls",
    "nice uv run --env-file .env ls",
])
def test_a_named_env_file_is_refused(line: str) -> None:
    verdict = analyze_command(line)
    assert len(verdict.injection) == 1, verdict
    assert "loads environment variables from a file" in verdict.injection[0]


@pytest.mark.parametrize("line", [
    "dotenv run rm -rf ~",
    "dotenvx run -- rm -rf ~",
    "dotenvx run -f .env -- rm -rf ~",
])
def test_the_command_an_env_loader_runs_is_judged(line: str) -> None:
    assert analyze_command(line).destructive, line


@pytest.mark.parametrize("line", [
    "node app.js", "uv run ls", "dotenv run ls", "dotenvx run -- ls", "bun x.ts",
    "dotenv list",
])
def test_everyday_lines_pass(line: str) -> None:
    verdict = analyze_command(line)
    assert not verdict.injection and not verdict.destructive, verdict
