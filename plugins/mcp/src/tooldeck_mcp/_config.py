"""The ``[tool.tooldeck.mcp.servers.NAME]`` tables: one remote MCP server each."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from typing import Any

import attrs

from tooldeck_hookspecs import LEVEL_ORDER, ConfigError, SecurityLevel

__all__ = ["NEUTRAL_CWD", "McpServerConfig", "parse_servers", "slug", "tool_name"]

#: Where a stdio server starts when its table names no ``cwd``: the file system's root, as MCP
#: hosts such as Claude Desktop do. Not the deck's own current folder: that is usually the
#: project, the default workdir of every session, and what a server's launcher reads from the
#: folder it starts in (and its parents) decides what it runs: ``npx`` runs
#: ``node_modules/.bin/<name>`` from there, ``uv run`` reads ``uv.toml`` and
#: ``.python-version`` (which may name an interpreter's path), ``python -m`` imports from it,
#: ``deno`` reads ``deno.json``'s import map. A model that can write the workdir would choose
#: the program the deck starts on the host, outside every sandbox.
NEUTRAL_CWD = os.path.abspath(os.sep)

_NON_WORD = re.compile(r"[^a-z0-9]+")
#: The schema plugin's limit on tool names.
MAX_NAME_LENGTH = 64


def slug(text: str) -> str:
    """``"GitHub-Issues v2"`` -> ``"github_issues_v2"``: lowercase letters, digits and ``_``."""
    out = _NON_WORD.sub("_", text.lower()).strip("_")
    if not out:
        out = "x" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:6]
    if not out[0].isalpha():
        out = "t_" + out
    return out


def tool_name(server: str, remote: str) -> str:
    """The deck name of a remote tool: ``<server>__<tool>``, snake_case, at most 64 characters."""
    name = f"{slug(server)}__{slug(remote)}"
    if len(name) > MAX_NAME_LENGTH:
        digest = hashlib.sha1(f"{server}\0{remote}".encode()).hexdigest()[:8]
        name = name[: MAX_NAME_LENGTH - 9].rstrip("_") + "_" + digest
    return name


def _pairs(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(f"{where} must be a table of strings")
    return tuple(sorted(value.items()))


def _names(value: Any, where: str) -> frozenset[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of tool names")
    return frozenset(value)


@attrs.frozen(kw_only=True)
class McpServerConfig:
    """One remote MCP server: how to reach it and how far to trust its tools.

    Exactly one of ``command`` (a stdio server launched as a subprocess) or ``url`` (streamable
    HTTP) is set. Hashable, so that equal configurations share one connection per process.
    """

    name: str
    command: tuple[str, ...] | None = None
    #: Extra environment of a stdio server, over the SDK's safe default (HOME, PATH, ...).
    env: tuple[tuple[str, str], ...] = ()
    #: The stdio server's working directory; :data:`NEUTRAL_CWD` when unset (see
    #: :attr:`start_folder`). Relative: to the deck's current folder.
    cwd: str | None = None
    url: str | None = None
    #: HTTP headers sent with every request (e.g. an Authorization header).
    headers: tuple[tuple[str, str], ...] = ()
    category: str = ""
    #: No tool of this server is ever below this level.
    level_floor: SecurityLevel = attrs.field(default=SecurityLevel.SAFE, converter=SecurityLevel)
    #: Believe ``readOnlyHint``: such tools become ``safe`` (otherwise they stay ``moderate``).
    trust_annotations: bool = False
    timeout_s: float = 30.0
    startup_timeout_s: float = 20.0
    #: Consecutive failed starts or crashes before the bridge pauses restarts for
    #: ``backoff_max_s``.
    max_restarts: int = 5
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    #: A server that cannot be reached at start-up stops the deck from loading (else: a warning).
    required: bool = False
    #: Remote tool names to register (all when unset) and to leave out.
    include: frozenset[str] | None = None
    exclude: frozenset[str] = frozenset()
    #: Where a stdio server's stderr goes: "inherit" (ours) or "discard".
    stderr: str = "inherit"

    @property
    def category_name(self) -> str:
        """The category of this server's tools (``mcp_<server>`` unless configured)."""
        return self.category or f"mcp_{slug(self.name)}"

    @property
    def start_folder(self) -> str:
        """The folder a stdio server starts in: ``cwd`` as configured, else :data:`NEUTRAL_CWD`
        (never the deck's own current folder by default)."""
        return self.cwd or NEUTRAL_CWD

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command else "http"

    def level_for(self, *, read_only: bool | None, destructive: bool | None) -> SecurityLevel:
        """The security level of a tool with these MCP annotations.

        ``destructiveHint`` raises a tool to ``dangerous``; ``readOnlyHint`` lowers it to ``safe``
        only when ``trust_annotations`` is on (a server could claim anything); everything else is
        ``moderate``. ``level_floor`` then applies.
        """
        if destructive:
            level = SecurityLevel.DANGEROUS
        elif read_only and self.trust_annotations:
            level = SecurityLevel.SAFE
        else:
            level = SecurityLevel.MODERATE
        if LEVEL_ORDER[self.level_floor] > LEVEL_ORDER[level]:
            level = self.level_floor
        return level

    @classmethod
    def from_table(cls, name: str, table: Mapping[str, Any]) -> McpServerConfig:
        """Build from one ``[mcp.servers.NAME]`` table.

        :raises ConfigError: naming the server and the key.
        """
        where = f"mcp.servers.{name}"
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where} must be a table")
        known = {f.name for f in attrs.fields(cls)} - {"name"}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}; expected {sorted(known)}")
        command = table.get("command")
        url = table.get("url")
        if (command is None) == (url is None):
            raise ConfigError(f"{where}: set exactly one of 'command' (stdio) or 'url' (HTTP)")
        if command is not None:
            if isinstance(command, str):
                command = [command]
            if (
                not isinstance(command, list)
                or not command
                or not all(isinstance(c, str) and c for c in command)
            ):
                raise ConfigError(f"{where}.command must be a non-empty list of strings")
        if url is not None and (
            not isinstance(url, str) or not url.startswith(("http://", "https://"))
        ):
            raise ConfigError(f"{where}.url must be an http(s) URL")
        options: dict[str, Any] = {}
        for key in ("category", "cwd"):
            if key in table:
                if not isinstance(table[key], str) or not table[key]:
                    raise ConfigError(f"{where}.{key} must be a non-empty string")
                options[key] = table[key]
        if "level_floor" in table:
            try:
                options["level_floor"] = SecurityLevel(table["level_floor"])
            except ValueError:
                raise ConfigError(
                    f"{where}.level_floor must be safe, moderate or dangerous"
                ) from None
        for key in ("trust_annotations", "required"):
            if key in table:
                if not isinstance(table[key], bool):
                    raise ConfigError(f"{where}.{key} must be true or false")
                options[key] = table[key]
        for key in ("timeout_s", "startup_timeout_s", "backoff_initial_s", "backoff_max_s"):
            if key in table:
                value = table[key]
                if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                    raise ConfigError(f"{where}.{key} must be a number of seconds > 0")
                options[key] = float(value)
        if "max_restarts" in table:
            value = table["max_restarts"]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{where}.max_restarts must be an integer >= 0")
            options["max_restarts"] = value
        if "stderr" in table:
            if table["stderr"] not in ("inherit", "discard"):
                raise ConfigError(f"{where}.stderr must be 'inherit' or 'discard'")
            options["stderr"] = table["stderr"]
        return cls(
            name=name,
            command=tuple(command) if command is not None else None,
            url=url,
            env=_pairs(table.get("env"), f"{where}.env"),
            headers=_pairs(table.get("headers"), f"{where}.headers"),
            include=_names(table.get("include"), f"{where}.include"),
            exclude=_names(table.get("exclude"), f"{where}.exclude") or frozenset(),
            **options,
        )


def parse_servers(settings: Mapping[str, Any]) -> list[McpServerConfig]:
    """The remote servers of the whole tooldeck configuration (``mcp.servers``), in order.

    :raises ConfigError: a table is malformed.
    """
    mcp = settings.get("mcp", {})
    if not isinstance(mcp, Mapping):
        raise ConfigError("'mcp' must be a table")
    servers = mcp.get("servers", {})
    if not isinstance(servers, Mapping):
        raise ConfigError("mcp.servers must be a table of server names")
    configs = [McpServerConfig.from_table(name, table) for name, table in servers.items()]
    slugs: dict[str, str] = {}
    for config in configs:
        other = slugs.setdefault(slug(config.name), config.name)
        if other != config.name:
            raise ConfigError(
                f"mcp.servers: {other!r} and {config.name!r} give the same tool prefix "
                f"{slug(config.name)!r}; rename one"
            )
    return configs
