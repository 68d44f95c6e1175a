"""Sessions: dev (a .venv with everything editable), tests, lint, typing, bench; and installing
like a user: wheels (every distribution into dist/), user_install (fresh venvs outside the repo,
`tooldeck[default]` / `tooldeck[all]`), isolated (each distribution alone against the core).

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
    "pytest-xdist>=3.6",  # the tests session runs on two workers (TESTS_PARALLEL below)
    "hypothesis>=6",
    "openai>=1.40",
    "anthropic>=0.34",
    "mcp>=2.3,<3",
    "hypercorn>=0.17",
    "google-genai>=1.0",
    "psutil>=5.9",
    "opentelemetry-sdk>=1.25",  # the otel plugin's tests use the SDK's in-memory exporters
    "hatchling>=1.18",  # tests/test_docs_snippets.py builds the docs' example pack
    # tests/integrations drive each framework adapter (the core's extras of the same names)
    "langchain>=1.0,<2",
    "langgraph>=1.0,<2",
    "openai-agents>=0.24,<1",
    "pydantic-ai-slim>=2.0,<3",
    "llm>=0.36",
]
BENCH_DEPS = ["langchain-core>=0.3"]
#: pytest-xdist for the tests session. Two workers: the machines (CI's included) have two cores,
#: and much of the suite waits (sandboxes, Chromium, servers, subprocesses), so two workers
#: nearly halve the run; more than the cores would squeeze the tests with timeouts of their
#: own. worksteal: test durations range from milliseconds to half a minute (a page answering
#: after 30.8 s), and a worker that runs out steals from the other instead of idling at the end.
#: `nox -s tests -- -n 0` runs serially (the last -n wins).
TESTS_PARALLEL = ["-n", "2", "--dist", "worksteal"]
ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # Test and check runs never read or write a real deployment's selection history.
    "TOOLDECK_HISTORY_FILE": "off",
}


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
    session.run("pytest", *TESTS_PARALLEL, *(session.posargs or []), env=ENV)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff")
    session.run("ruff", "check", ".")


@nox.session
def typing(session: nox.Session) -> None:
    """mypy (strict) on the contract and the core."""
    session.install("mypy", "pytest", "numpy", "-e", "hookspecs", "-e", "core")
    session.run("mypy")


@nox.session
def bench(session: nox.Session) -> None:
    """`tooldeck bench`: pipeline vs direct call vs LangChain, cache, sandbox, selection."""
    install_all(session, *BENCH_DEPS)
    session.run("tooldeck", "bench", *(session.posargs or []), env={**ENV, **os.environ})


# ---------------------------------------------------------------------- installing like a user

DIST = ROOT / "dist"
#: What pip sees of the repository once the wheels are built: dist/ plus the mirror.
FIND_LINKS = ["--find-links", str(DIST)]


def _project_dirs() -> list[Path]:
    """Every distribution's folder: the contract, the core, the stage plugins, the tool packs."""
    return [ROOT / "hookspecs", ROOT / "core"] + [
        p.parent
        for pattern in ("plugins/*/pyproject.toml", "contrib_tools/*/pyproject.toml")
        for p in sorted(ROOT.glob(pattern))
    ]


def _dist_name(folder: Path) -> str:
    import tomllib

    with open(folder / "pyproject.toml", "rb") as file:
        return str(tomllib.load(file)["project"]["name"])


def _fresh_venv(session: nox.Session, where: Path) -> Path:
    """A new virtual environment at ``where`` (outside the repository), its python returned."""
    import shutil

    shutil.rmtree(where, ignore_errors=True)
    session.run(sys.executable, "-m", "venv", str(where), external=True)
    python = where / "bin" / "python"
    session.run(str(python), "-m", "pip", "install", "-q", "-U", "pip", external=True)
    return python


@nox.session
def wheels(session: nox.Session) -> None:
    """Build every distribution (hookspecs, core, plugins/*, contrib_tools/*) into dist/."""
    DIST.mkdir(exist_ok=True)
    for old in DIST.glob("tooldeck*.whl"):
        old.unlink()
    folders = [str(p) for p in _project_dirs()]
    # One build environment for all (every distribution builds with hatchling), instead of
    # pip's isolated one per wheel; --no-deps: only our own wheels land in dist/.
    session.install("hatchling>=1.18")
    wheel = ["python", "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    session.run(*wheel, "-w", str(DIST), *folders)
    built = sorted(p.name for p in DIST.glob("tooldeck*.whl"))
    if len(built) != len(folders):
        session.error(f"{len(folders)} distributions but {len(built)} wheels: {built}")
    session.log(f"{len(built)} wheels in {DIST}")


#: A user's check of an installed deck, run from an empty directory (so that no repository
#: configuration applies): the safe stages are there and select works.
_USER_CHECK = """
import sys, trio
from tooldeck import Deck, ErrorCode
extra = sys.argv[1]
deck = Deck.load()
names = {info.name for info in deck.plugin_infos() if info.error is None}
need = {"schema", "policy", "faiss", "cache", "ratelimit", "runner", "fs"}
if extra == "all":
    need |= {"mcp", "redis", "otel", "shell", "code", "browser", "search"}
    import tooldeck_mcp.server  # noqa: F401  (`tooldeck serve mcp` has its SDK)
missing = need - names
assert not missing, f"plugins missing: {sorted(missing)} (loaded: {sorted(names)})"
assert not deck.failed_plugins, deck.failed_plugins

async def main():
    async with deck:
        session = deck.session(workdir=".")
        hand = await session.select("read a text file")
        assert "file_read" in hand.names, hand.names
        written = await session.call("file_write", {"path": "x.txt", "content": "hi"})
        # policy: a moderate tool needs a grant (or an approval), it does not just run
        assert written.error is not None, written
        session.grant("filesystem")
        assert (await session.call("file_write", {"path": "x.txt", "content": "hi"})).success
        read = await session.call("file_read", {"path": "x.txt"})
        assert read.success and "hi" in str(read.data), read

trio.run(main)
print("user check ok:", extra, sorted(names))
"""


@nox.session(venv_backend="none", requires=["wheels"])
@nox.parametrize("extra", ["default", "all"])
def user_install(session: nox.Session, extra: str) -> None:
    """A fresh venv outside the repo: CPU torch, then `pip install "tooldeck[EXTRA]"` from dist/.

    `nox -s wheels` runs first. Then `tooldeck demo`, `tooldeck call file_read` and a check of
    the safe stages run from an empty directory.
    """
    import tempfile
    import time

    if not list(DIST.glob("tooldeck-*.whl")):
        session.error("no wheels in dist/: run `nox -s wheels` first")
    base = Path(tempfile.gettempdir()) / f"tooldeck-user-{extra}"
    python = _fresh_venv(session, base / "venv")
    pip = [str(python), "-m", "pip", "install", "-q"]
    started = time.perf_counter()
    session.run(*pip, TORCH, external=True)
    session.run(*pip, *FIND_LINKS, f"tooldeck[{extra}]", external=True)
    session.log(f"install of tooldeck[{extra}] took {time.perf_counter() - started:.1f} s")
    work = base / "work"
    work.mkdir(exist_ok=True)
    (work / "notes.txt").write_text("hello from a user\n")
    session.chdir(str(work))
    env = {**ENV, "TOOLDECK_CONFIG": ""}
    bindir = python.parent
    session.run(str(python), "-c", _USER_CHECK, extra, env=env, external=True)
    read = ["call", "file_read", '{"path": "notes.txt"}']
    session.run(str(bindir / "tooldeck"), *read, env=env, external=True)
    session.run(str(bindir / "tooldeck"), "demo", env=env, external=True)


# ---------------------------------------------------------------------- each distribution alone

#: The smoke check of one distribution installed alone with the core: its entry points load
#: strictly (no unknown hook), and a tool pack registers tools with its declared imports only.
_SMOKE = """
import importlib, importlib.metadata as md, sys
from tooldeck._plugins import TooldeckPluginManager
dist = md.distribution(sys.argv[1])
eps = [ep.name for ep in dist.entry_points if ep.group == "tooldeck"]
for module in sys.argv[2:]:
    importlib.import_module(module)
manager = TooldeckPluginManager()
manager.load_entry_points(lambda name: True, only=eps, strict=True)
manager.check_pending(strict=True)
tools = []
manager.pm.hook.tooldeck_register_tools(
    register=lambda tool, /, **options: tools.append(tool) or tool, settings={}
)
hooks = sorted({h for i in manager.plugin_infos() if i.name in eps for h in i.hooks})
print(f"smoke ok: {sys.argv[1]}: entry points {eps}, {len(tools)} tools, hooks {hooks}")
"""

ISOLATED = [
    str(p.parent.relative_to(ROOT))
    for pattern in ("plugins/*/pyproject.toml", "contrib_tools/*/pyproject.toml")
    for p in sorted(ROOT.glob(pattern))
]


@nox.session(reuse_venv=False, requires=["wheels"])
@nox.parametrize("dist", ISOLATED)
def isolated(session: nox.Session, dist: str) -> None:
    """One distribution installed alone against the core, from dist/ wheels: its declared
    dependencies only, then a smoke check and its own tests (pluggy's downstream style).

    `nox -s wheels` runs first. The tests' own needs are the distribution's ``test`` dependency
    group. Arguments after `--` go to pytest (default: `-q -m "not slow"`).
    """
    import tempfile
    import tomllib

    if not list(DIST.glob("tooldeck-*.whl")):
        session.error("no wheels in dist/: run `nox -s wheels` first")
    folder = ROOT / dist
    name = _dist_name(folder)
    with open(folder / "pyproject.toml", "rb") as file:
        project = tomllib.load(file)
    module = "tooldeck_" + name.removeprefix("tooldeck-").replace("-", "_")
    # Not session.create_tmp(): it points TMPDIR into .nox/, whose long paths break the tests'
    # Unix sockets and put their temporary files inside the repository.
    scratch = Path(tempfile.mkdtemp(prefix="tooldeck-isolated-"))
    # Pinned if pulled in at all (faiss -> sentence-transformers -> torch): the CPU build on disk.
    pins = scratch / "pins.txt"
    pins.write_text(TORCH + "\n")
    pip = ["-q", "-c", str(pins), *FIND_LINKS]
    session.install("-q", "-U", "pip")  # --group needs pip >= 25.1
    # This distribution's wheel is built afresh, so that its tests (from the working tree) meet
    # its current code; the core and the others come from dist/.
    fresh = scratch / "wheel"
    session.run("python", "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(fresh), str(folder))
    session.install(*pip, "tooldeck", *map(str, fresh.glob("*.whl")))
    session.run("python", "-m", "pip", "check")
    smoke = scratch / "smoke.py"
    smoke.write_text(_SMOKE)
    session.run("python", str(smoke), name, module, env=ENV)
    tests = folder / "tests"
    if not any(tests.glob("test_*.py")):
        session.log(f"{name}: no tests of its own; the smoke check is its check")
        return
    test_deps = ["pytest>=8", "pytest-trio>=0.8"]
    if project.get("dependency-groups", {}).get("test"):
        test_deps += ["--group", f"{folder}/pyproject.toml:test"]
    session.install(*pip, *test_deps)
    # The repository's pytest configuration (trio_mode, markers), the installed wheels.
    pytest = ["pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), str(tests)]
    session.run(*pytest, *(session.posargs or ["-q", "-m", "not slow"]), env={**ENV, **os.environ})


# ---------------------------------------------------------------------- MCP conformance


@nox.session
def conformance(session: nox.Session) -> None:
    """The official MCP conformance suite against `tooldeck serve mcp --transport http`.

    Node 22 and @modelcontextprotocol/conformance are installed with npm into a cache directory
    (~/.cache/tooldeck-conformance, or TOOLDECK_CONFORMANCE_CACHE), never into the repository;
    the server serves the suite's reference tools (tests/mcp/conformance) on 127.0.0.1 and the
    run fails on any failure not in tests/mcp/conformance/baseline.yml (or a stale entry there).
    `nox -s conformance -- --scenario tools-call-with-logging` runs one scenario.
    """
    # Only what the reference deck loads: the contract, the core, tooldeck-mcp (it adds
    # `serve mcp`) and the required stages (no retriever, no torch).
    stages = [arg for p in ("mcp", "policy", "runner", "schema") for arg in ("-e", f"plugins/{p}")]
    session.install("-e", "hookspecs", "-e", "core", *stages)
    session.run("python", "tests/mcp/conformance/run_suite.py", *session.posargs,
                env={**ENV, **os.environ})
