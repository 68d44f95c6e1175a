"""Remote MCP tools as deck tools: definitions, levels, results.

The MCP SDK is imported only once a server is configured: installing this plugin must not cost
every deck the SDK's import time (about 0.6 s).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tooldeck_hookspecs import (
    LEVEL_ORDER,
    ErrorCode,
    ExecutionConfig,
    RegisterFn,
    RegistrationError,
    SecurityConfig,
    SecurityLevel,
    ToolContext,
    ToolDefinition,
    ToolFailure,
    ToolResult,
    hookimpl,
)

from ._config import McpServerConfig, parse_servers, slug, tool_name

if TYPE_CHECKING:
    from mcp import types

    from ._client import RemoteServer

__all__ = ["McpBridge", "definitions_for", "convert_result", "time_safe_schema"]

log = logging.getLogger("tooldeck.mcp")

#: Extra seconds the executor waits beyond the bridge's own timeout, so that the bridge's
#: message (which names the server) is the one the model reads.
_TIMEOUT_GRACE_S = 2.0

#: Longest description of a remote tool kept, in characters (longer: cut, with a warning). The
#: description is shown to the model on every turn the tool is dealt: a remote server must not
#: be able to fill the model's context (or the deck's memory) with one tool.
MAX_DESCRIPTION_CHARS = 8192
#: Longest ``description`` or ``title`` kept inside a remote input schema (annotations only:
#: cutting them changes no constraint).
MAX_SCHEMA_TEXT_CHARS = 2048
#: Longest error text of a remote tool kept in the result's message (longer: cut, logged).
MAX_ERROR_CHARS = 4096
#: Control characters other than tab and newline (ESC of ANSI sequences, NUL, C1 controls).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: Results of more content blocks than this are converted in a worker thread.
_INLINE_BLOCKS = 64
#: Largest remote input schema registered, as compact JSON; a larger one leaves its tool out
#: (cutting constraints would change what the tool accepts).
MAX_SCHEMA_BYTES = 256 * 1024


def _content_item(block: Any) -> Any:
    """A remote content block as tooldeck data: text as a string; images, audio, resources and
    links as :mod:`tooldeck_hookspecs.content` objects (so that they reach the deck's own
    clients as native blocks again, not as base64 text); anything else as its JSON."""
    from mcp import types

    from tooldeck_hookspecs.content import Audio, Image, Resource, ResourceLink

    try:
        if isinstance(block, types.TextContent):
            return block.text
        if isinstance(block, types.ImageContent):
            return Image(block.data, block.mime_type)
        if isinstance(block, types.AudioContent):
            return Audio(block.data, block.mime_type)
        if isinstance(block, types.EmbeddedResource):
            inner = block.resource
            if isinstance(inner, types.TextResourceContents):
                return Resource(str(inner.uri), text=inner.text, mime_type=inner.mime_type)
            return Resource(str(inner.uri), data=inner.blob, mime_type=inner.mime_type)
        if isinstance(block, types.ResourceLink):
            return ResourceLink(str(block.uri), block.name, mime_type=block.mime_type,
                                description=block.description)
    except (ValueError, TypeError):  # a malformed block (bad base64): kept as its JSON
        pass
    dump = getattr(block, "model_dump", None)
    return dump(mode="json", by_alias=True, exclude_none=True) if callable(dump) else block


def convert_result(server: str, tool: str, result: types.CallToolResult) -> ToolResult:
    """An MCP ``CallToolResult`` as a ToolResult.

    Data is the ``structuredContent`` when the server sent one (and no image, audio or
    resource, which would be lost), else the text of a single text block, else the list of
    blocks (text as strings, media and resources as content objects, others as their JSON).
    ``isError`` becomes ``EXECUTION_ERROR`` carrying the server's text.
    """
    items = [_content_item(b) for b in result.content]
    if result.is_error:
        text = "; ".join(i for i in items if isinstance(i, str)) or "the tool reported an error"
        # The message is what the model (and a terminal) reads of the failure: bounded, and
        # without the control characters of ANSI sequences (a carriage return, an ESC[2J).
        text = _cut(_CONTROL.sub("", text[: MAX_ERROR_CHARS * 4]), MAX_ERROR_CHARS,
                    f"the error message of {tool!r} (MCP server {server!r})")
        return ToolResult.fail(
            ErrorCode.EXECUTION_ERROR,
            f"{tool} (MCP server {server!r}) failed: {text}",
            details={
                "server": server,
                "tool": tool,
                **({"structured": result.structured_content} if result.structured_content else {}),
            },
        )
    rich = any(not isinstance(i, str | dict) for i in items)
    if result.structured_content is not None and not rich:
        data: Any = result.structured_content
    elif len(items) == 1 and isinstance(items[0], str):
        data = items[0]
    else:
        data = items
    return ToolResult.ok(data, mcp_server=server)


def _pattern_problem(pattern: str) -> str | None:
    """Why a remote ``pattern`` cannot be kept (None: RE2 and Python's parser both take it)."""
    import re

    import re2  # type: ignore[import-untyped]

    options = re2.Options()
    options.log_errors = False
    try:
        re2.compile(pattern, options=options)
    except Exception as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        return f"RE2 cannot run it ({reason})"
    try:  # the register stage's metaschema checks `pattern` with Python's parser
        re.compile(pattern)
    except re.error as exc:
        return f"it is not a Python regex ({exc})"
    return None


def time_safe_schema(schema: Any, *, where: str) -> Any:
    """A copy of a remote schema whose every regex runs on RE2 (linear time).

    The deck checks arguments against a remote tool's schema as a courtesy (the server checks
    them again) and never lets the remote server make that check hang: a ``pattern`` RE2
    cannot run (backreferences, lookaround) or that Python cannot parse is dropped with a
    warning; so is a ``patternProperties`` entry with such a key, together with the object's
    ``additionalProperties`` (the keys that entry admitted must not turn into unknown fields).
    Every constraint that stays is enforced on RE2 by the register stage.
    """
    if isinstance(schema, list):
        return [time_safe_schema(item, where=where) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    loosen = False
    for key, value in schema.items():
        if key in ("properties", "definitions", "$defs", "dependentSchemas") and isinstance(
            value, Mapping
        ):  # names -> schemas (a property may well be called "enum" or "pattern")
            out[key] = {k: time_safe_schema(v, where=where) for k, v in value.items()}
        elif key in ("enum", "const", "default", "examples"):
            out[key] = value  # data, not schema
        elif key in ("description", "title") and isinstance(value, str):
            out[key] = _cut(value, MAX_SCHEMA_TEXT_CHARS, f"{where}: schema {key}")
        elif key == "pattern" and isinstance(value, str):
            problem = _pattern_problem(value)
            if problem is None:
                out[key] = value
            else:
                log.warning("%s: pattern %r dropped: %s", where, value, problem)
        elif key == "patternProperties" and isinstance(value, Mapping):
            kept: dict[str, Any] = {}
            for pattern, sub in value.items():
                problem = _pattern_problem(str(pattern))
                if problem is None:
                    kept[str(pattern)] = time_safe_schema(sub, where=where)
                else:
                    loosen = True
                    log.warning(
                        "%s: patternProperties %r dropped (and additionalProperties with it): %s",
                        where, pattern, problem,
                    )
            out[key] = kept
        else:
            out[key] = time_safe_schema(value, where=where)
    if loosen:
        out.pop("additionalProperties", None)
    return out


def _cut(text: str, limit: int, what: str) -> str:
    """``text`` within ``limit`` characters; a cut one ends with a marker and is logged."""
    if len(text) <= limit:
        return text
    log.warning("%s is %d characters; cut to %d", what, len(text), limit)
    marker = " [... cut by tooldeck]"
    return text[: limit - len(marker)] + marker


def _schema_size(schema: Any) -> int:
    """Size of ``schema`` as compact JSON (anything not JSON counts as its repr)."""
    import json

    return len(json.dumps(schema, separators=(",", ":"), default=repr))


def _parameters(schema: Mapping[str, Any] | None, *, where: str = "MCP tool") -> dict[str, Any]:
    parameters = dict(time_safe_schema(dict(schema or {}), where=where))
    parameters.pop("$schema", None)  # a draft marker is not part of the tool's contract
    if parameters.get("type") is None:
        parameters["type"] = "object"
    parameters.setdefault("properties", {})
    return parameters


def own_timeout_s(config: McpServerConfig) -> float:
    """The ``execution.timeout_s`` the bridge gives the tools of a server: the remote call's
    ``timeout_s``, a (re)start of the server and the grace."""
    return config.timeout_s + config.startup_timeout_s + _TIMEOUT_GRACE_S


def remote_deadline(config: McpServerConfig, context: ToolContext) -> float | None:
    """When the remote call must have answered (a ``time.monotonic()`` instant), or None for
    the server's own ``timeout_s``.

    The bridge bounded every remote call by its server's ``timeout_s``, and that alone: a tool
    the deployment gave 8 s (``[tools.NAME.execution] timeout_s``), of a server with
    ``timeout_s = 3``, was stopped at 3 s. When the call's configured time is not the one the
    bridge gave the tool (``ToolContext.limits["timeout_s"]``), it is the deployment's, and
    the remote call runs until the call's deadline, less a moment so that the bridge's answer
    (which names the server) comes before the executor's.
    """
    configured = context.limits.get("timeout_s")
    deadline = context.deadline
    if (
        deadline is None
        or not isinstance(configured, int | float)
        or isinstance(configured, bool)
        or not math.isfinite(configured)
        or configured == own_timeout_s(config)
    ):
        return None
    return deadline - min(_TIMEOUT_GRACE_S, configured / 10)


def _make_execute(remote: RemoteServer, remote_name: str, pinned: str | None = None) -> Any:
    server = remote.config.name

    async def execute(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        result = await remote.call(
            remote_name, dict(arguments), progress=context.emit, pinned=pinned,
            deadline=remote_deadline(remote.config, context),
        )
        if len(result.content) <= _INLINE_BLOCKS:
            return convert_result(server, remote_name, result)
        # Linear in the blocks (a remote server picks how many): not on the deck's loop.
        import trio

        return await trio.to_thread.run_sync(convert_result, server, remote_name, result)

    execute.__name__ = f"mcp_{slug(server)}_{slug(remote_name)}"
    execute.__qualname__ = execute.__name__
    return execute


def definitions_for(
    config: McpServerConfig, tools: Sequence[types.Tool], remote: RemoteServer | None = None
) -> list[ToolDefinition]:
    """Deck definitions of a server's tools (``remote`` executes them; None: no execute)."""
    if remote is not None:
        from ._client import fingerprint
    definitions: list[ToolDefinition] = []
    seen: dict[str, str] = {}
    # A remote name listed more than once is one remote tool: registered once, at the
    # strictest level any of its entries asks for (an innocuous twin must not be a way round
    # the confirmation its destructive entry needs).
    levels: dict[str, SecurityLevel] = {}
    entries: dict[str, list[types.Tool]] = {}
    for tool in tools:
        entries.setdefault(tool.name, []).append(tool)
        hints = tool.annotations
        level = config.level_for(
            read_only=hints.read_only_hint if hints else None,
            destructive=hints.destructive_hint if hints else None,
        )
        if LEVEL_ORDER[level] > LEVEL_ORDER[levels.get(tool.name, level)]:
            levels[tool.name] = level
        else:
            levels.setdefault(tool.name, level)
    registered: set[str] = set()
    for tool in tools:
        if config.include is not None and tool.name not in config.include:
            continue
        if tool.name in config.exclude:
            continue
        if tool.name in registered:
            log.warning(
                "MCP server %r lists the tool %r more than once; only its first entry is "
                "registered", config.name, tool.name,
            )
            continue
        registered.add(tool.name)
        name = tool_name(config.name, tool.name)
        index = len(definitions)
        while name in seen:
            # Two remote names that slug alike ("a-b", "a_b"): keep both, tell them apart.
            name = tool_name(config.name, f"{tool.name} {index}")
            index += 1
        seen[name] = tool.name
        hints = tool.annotations
        level = levels[tool.name]
        where = f"tool {tool.name!r} of MCP server {config.name!r}"
        description = _cut(
            (tool.description or "").strip()
            or f"{tool.title or tool.name} (tool {tool.name!r} of MCP server {config.name!r})",
            MAX_DESCRIPTION_CHARS,
            f"the description of {where}",
        )
        parameters = _parameters(tool.input_schema, where=where)
        size = _schema_size(parameters)
        if size > MAX_SCHEMA_BYTES:
            log.warning(
                "%s: its input schema is %d bytes, over %d; the tool is not registered",
                where, size, MAX_SCHEMA_BYTES,
            )
            continue
        tags = ["mcp", f"mcp_server:{config.name}", f"mcp_tool:{tool.name}"]
        if hints is not None and hints.open_world_hint:
            tags.append("open_world")
        definitions.append(
            ToolDefinition(
                name=name,
                description=description,
                category=config.category_name,
                parameters=parameters,
                security=SecurityConfig(level=level, network=config.transport == "http"),
                # Never retried by the executor: a remote tool may not be idempotent, and a
                # crash is the model's to retry (the error says retryable).
                # The bridge bounds the remote call by timeout_s and a (re)start of the server
                # by startup_timeout_s; the executor waits for both. With timeout_s alone, the
                # first call after a crash lost the restart's seconds from its own: a 3 s call
                # of a server given 4 s, after a 3 s restart, was stopped at 6 s by the executor
                # ("did not finish within 6s"), before its promised 4 s had run.
                execution=ExecutionConfig(
                    timeout_s=own_timeout_s(config),
                    retryable=False,
                ),
                # Pinned to the listing it was built from: the server cannot change the tool
                # (a destructive twin, a new description) under the level and the approvals
                # the user gave to this definition.
                execute=(
                    _make_execute(remote, tool.name, fingerprint(entries[tool.name], tool.name))
                    if remote is not None
                    else None
                ),
                tags=tuple(tags),
            )
        )
    return definitions


class McpBridge:
    """The plugin: registers the tools of every configured MCP server.

    :param servers: explicit server configurations (tests, programmatic use); when None, they are
        read from the deck's settings (``mcp.servers``) as the deck loads.

    Usable as a plugin object: ``make_deck(McpBridge([McpServerConfig(...)]))``; the ``mcp``
    entry point (:mod:`tooldeck_mcp.plugin`) drives one configured from the settings.
    """

    def __init__(self, servers: Sequence[McpServerConfig] | None = None) -> None:
        self._explicit = list(servers) if servers is not None else None
        self._configured: list[McpServerConfig] = []

    def configure(self, settings: Mapping[str, Any]) -> None:
        """Read ``mcp.servers`` from the whole tooldeck configuration."""
        self._configured = parse_servers(settings)

    @property
    def servers(self) -> list[McpServerConfig]:
        """The servers this bridge registers."""
        return self._explicit if self._explicit is not None else self._configured

    def remotes(self) -> list[RemoteServer]:
        """The connection managers of the configured servers."""
        from ._client import remote_server

        return [remote_server(c) for c in self.servers]

    def register_tools(self, register: RegisterFn) -> None:
        """Connect to each configured server, list its tools and register them."""
        if not self.servers:
            return
        from ._client import remote_server

        problems: list[str] = []
        for config in self.servers:
            remote = remote_server(config)
            try:
                tools = remote.list_tools_blocking()
            except Exception as exc:  # a broken server is reported, not a crash of the deck
                reason = (
                    exc.message
                    if isinstance(exc, ToolFailure)
                    else f"{type(exc).__name__}: {exc}"
                )
                message = f"MCP server {config.name!r}: {reason}"
                if config.required:
                    problems.append(message + " (required = true)")
                else:
                    log.warning("%s; its tools are not registered", message)
                continue
            for definition in definitions_for(config, tools, remote):
                # A remote catalog is not ours to fix: a schema or name strict registration
                # refuses is repaired by the deck, and each change reported as a warning.
                register(definition, lenient=True)
        if problems:
            raise RegistrationError(problems)

    # ------------------------------------------------------------------ hooks

    @hookimpl
    def tooldeck_register_tools(self, register: RegisterFn, settings: Mapping[str, Any]) -> None:
        """Connect to every configured MCP server and register its tools as ``<server>__<tool>``.

        Servers given to the constructor win; otherwise they come from ``mcp.servers``.
        """
        if self._explicit is None:
            self.configure(settings)
        self.register_tools(register)
