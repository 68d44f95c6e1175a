"""Testing helpers for tooldeck and plugin authors; also a pytest plugin (entry point ``pytest11``).

``make_deck`` builds a deck in isolation: no entry points are loaded unless asked for by name, no
configuration file or environment variable is read. ``inline_plugin`` turns plain functions into a
plugin::

    from tooldeck.testing import inline_plugin, make_deck

    def tooldeck_authorize_call(call, tool, session):
        return Decision.deny("no") if tool.name == "file_write" else None

    deck = make_deck(
        inline_plugin(tooldeck_authorize_call), load_entry_points=["schema", "runner", "fs"]
    )

As a pytest plugin it gives the fixtures ``make_tooldeck`` and, for tests that a sandboxed tool
is shut in, ``loopback_server`` (a port that accepts connections) and ``host_secret`` (a value in
the host's environment that must not reach the tool).
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from tooldeck_hookspecs import ScoredTool, ToolDefinition, hookimpl

from ._config import Config
from ._deck import Deck

__all__ = [
    "make_deck",
    "inline_plugin",
    "tools_plugin",
    "make_tooldeck",
    "loopback_server",
    "host_secret",
    "KeywordRetriever",
    "run_python",
    "marked_pids",
]


def inline_plugin(
    *functions: Callable[..., Any], name: str | None = None, **hooks: Callable[..., Any]
) -> object:
    """A plugin object from hook functions, named by their ``__name__`` or by keyword.

    ``inline_plugin(tooldeck_filter_tools)`` or ``inline_plugin(tooldeck_filter_tools=fn)``.
    Pass ``name=`` to choose the plugin name shown in denials and ``tooldeck plugins``.
    """
    namespace = types.SimpleNamespace()
    for function in functions:
        hooks.setdefault(function.__name__, function)
    for hook_name, function in hooks.items():
        setattr(namespace, hook_name, hookimpl(function))
    namespace.__tooldeck_name__ = name or "inline-" + "-".join(
        sorted(h.removeprefix("tooldeck_") for h in hooks)
    )
    return namespace


def tools_plugin(
    tools: Iterable[ToolDefinition | Callable[..., Any]],
    *,
    name: str = "inline-tools",
    **options: Any,
) -> object:
    """A tool pack registering ``tools``: definitions, or functions with ``options``."""
    tools = list(tools)

    def tooldeck_register_tools(register: Any) -> None:
        for tool in tools:
            if isinstance(tool, ToolDefinition):
                register(tool)
            else:
                register(tool, **options)

    return inline_plugin(tooldeck_register_tools, name=name)


def make_deck(
    *plugins: object,
    config: Mapping[str, Any] | Config | None = None,
    load_entry_points: bool | Iterable[str] = False,
    tools: Iterable[ToolDefinition | Callable[..., Any]] = (),
) -> Deck:
    """An isolated deck: only the given plugins, plus the named (or all) installed entry points.

    :param plugins: plugin objects (modules, instances, :func:`inline_plugin` results).
    :param config: settings (the ``[tool.tooldeck]`` table); the environment is not read.
    :param load_entry_points: False (default) loads none, True all installed, or a list of names.
    :param tools: tools registered by an extra inline pack.
    """
    if not isinstance(config, Config):
        config = Config.from_mapping(config or {})
    extra = list(plugins)
    tools = list(tools)
    if tools:
        extra.append(tools_plugin(tools))
    return Deck.load(config, plugins=extra, entry_points=load_entry_points)


try:
    import pytest
except ImportError:  # pragma: no cover - the helpers work without pytest installed
    pass
else:

    @pytest.fixture
    def make_tooldeck() -> Callable[..., Deck]:
        """Fixture: :func:`make_deck`, for tests of plugins and tool packs."""
        return make_deck

    @pytest.fixture
    def loopback_server() -> Iterator[int]:
        """Fixture: a TCP server on 127.0.0.1 that accepts and closes connections; its port.

        A tool without network access must fail to connect to it.
        """
        server = socket.create_server(("127.0.0.1", 0))
        server.settimeout(0.2)
        stop = threading.Event()

        def serve() -> None:
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                conn.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield server.getsockname()[1]
        finally:
            stop.set()
            thread.join(timeout=2)
            server.close()

    @pytest.fixture
    def host_secret(monkeypatch: pytest.MonkeyPatch) -> str:
        """Fixture: a value in the test process's environment that no sandboxed tool may see
        (``TOOLDECK_TEST_HOST_MARKER``).

        Named and shaped so that redaction does not know it as a secret: a leak shows up in the
        output as it is instead of being masked, so tests asserting its absence can fail."""
        value = "hostmarker-" + secrets.token_hex(6)
        monkeypatch.setenv("TOOLDECK_TEST_HOST_MARKER", value)
        return value


class KeywordRetriever:
    """A model-free retriever for tests: a tool scores the number of the query's words (longer
    than two letters) found in its name and description.

    It implements the retriever protocol (``warm_up``, ``index``, ``add``, ``remove``,
    ``search``), so ``inline_plugin(tooldeck_retriever=lambda settings: KeywordRetriever())``
    puts it in a deck in place of the FAISS retriever. Subclass it to gate or count calls.
    """

    def __init__(self) -> None:
        self.tools: dict[str, str] = {}

    @staticmethod
    def _text(tool: ToolDefinition) -> str:
        return f"{tool.name} {tool.description}".lower()

    async def warm_up(self) -> None:
        """Nothing to load."""

    async def index(self, tools: Sequence[ToolDefinition]) -> None:
        """Hold exactly ``tools``."""
        self.tools = {t.name: self._text(t) for t in tools}

    async def add(self, tools: Sequence[ToolDefinition]) -> None:
        """Add or replace ``tools``."""
        self.tools.update({t.name: self._text(t) for t in tools})

    async def remove(self, names: Sequence[str]) -> None:
        """Drop the tools named (unknown names are ignored)."""
        for name in names:
            self.tools.pop(name, None)

    async def search(self, query: str, k: int) -> list[ScoredTool]:
        """The ``k`` tools sharing most words with ``query``; tools sharing none are left out."""
        words = [w for w in query.lower().split() if len(w) > 2]
        scored = [
            ScoredTool(name=name, score=float(sum(w in text for w in words)))
            for name, text in self.tools.items()
        ]
        return sorted((s for s in scored if s.score > 0), key=lambda s: -s.score)[:k]


def run_python(
    code: str,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 120.0,
) -> str:
    """Run ``code`` (dedented) in a new interpreter and return what it printed.

    For checks that need a fresh process: what a module imports at load, start-up paths.
    ``env`` replaces the environment (default: this process's). Raises ``AssertionError``
    with the end of its stderr when the interpreter exits non-zero.
    """
    import subprocess
    import sys
    import textwrap

    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=timeout, check=False,
        env=dict(env) if env is not None else None, cwd=cwd,
    )
    if done.returncode != 0:
        raise AssertionError(f"exit {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def marked_pids(marker: str) -> list[int]:
    """Processes anywhere on the machine whose command line contains ``marker``.

    For tests that give what they start a unique marker (an argument, a private folder) and
    then check what is still running: a sandbox's children, a browser, daemons left behind.
    """
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if needle in fh.read():
                    found.append(int(entry))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found
