"""Sessions: dev (a .venv with everything editable), tests, lint, typing, bench.

Every distribution of the repository is installed together in editable mode; torch comes first,
pinned, because an unpinned torch (pulled in by sentence-transformers) downloads GBs of CUDA builds.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "lint", "typing"]

ROOT = Path(__file__).parent
TORCH = "torch==2.13.0"

# Order matters only for readability: pip resolves the local packages as one set.
DISTRIBUTIONS = [
    "hookspecs",
    "core[mcp]",
    *sorted(
        f"plugins/{p.name}" for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists()
    ),
    *sorted(
        f"contrib_tools/{p.name}"
        for p in (ROOT / "contrib_tools").iterdir()
        if (p / "pyproject.toml").exists()
    ),
]
TEST_DEPS = [
    "pytest>=8",
    "pytest-trio>=0.8",
    "hypothesis>=6",
    "openai>=1.40",
    "anthropic>=0.34",
    "mcp>=2.3,<3",
    "hypercorn>=0.17",
    "google-genai>=1.0",
    "psutil>=5.9",
    "opentelemetry-sdk>=1.25",  # the otel plugin's tests use the SDK's in-memory exporters
    # tests/integrations drive each framework adapter (the core's extras of the same names)
    "langchain>=1.0,<2",
    "langgraph>=1.0,<2",
    "openai-agents>=0.24,<1",
    "pydantic-ai-slim>=2.0,<3",
    "llm>=0.36",
]
BENCH_DEPS = ["langchain-core>=0.3"]
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _editable_args() -> list[str]:
    args: list[str] = []
    for dist in DISTRIBUTIONS:
        args += ["-e", dist]
    return args


def install_all(session: nox.Session, *extra: str) -> None:
    """Install torch (pinned, CPU wheel from local disk) and then every distribution editable."""
    session.install(TORCH)
    session.install(*_editable_args(), *extra)


@nox.session(venv_backend="none")
def dev(session: nox.Session) -> None:
    """Create .venv in the repository root with every distribution editable and the CLI on PATH."""
    venv = ROOT / ".venv"
    if not (venv / "bin" / "python").exists():
        session.run(sys.executable, "-m", "venv", str(venv))
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    session.run(*pip, "-U", "pip")
    session.run(*pip, TORCH)
    session.run(*pip, *_editable_args(), *TEST_DEPS, *BENCH_DEPS, "ruff", "mypy", "nox")
    session.log(f"ready: {venv}/bin/tooldeck  (source {venv}/bin/activate)")


@nox.session
def tests(session: nox.Session) -> None:
    """Every distribution's tests and the cross-distribution tests, in one pytest run."""
    install_all(session, *TEST_DEPS)
    session.run("pytest", *(session.posargs or []), env=ENV)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff")
    session.run("ruff", "check", ".")


@nox.session
def typing(session: nox.Session) -> None:
    """mypy (strict) on the contract and the core."""
    session.install("mypy", "pytest", "numpy", "-e", "hookspecs", "-e", "core[mcp]")
    session.run("mypy")


@nox.session
def bench(session: nox.Session) -> None:
    """`tooldeck bench`: pipeline vs direct call vs LangChain, cache, sandbox, selection."""
    install_all(session, *BENCH_DEPS)
    session.run("tooldeck", "bench", *(session.posargs or []), env={**ENV, **os.environ})
