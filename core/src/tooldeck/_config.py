"""Configuration: ``tooldeck.toml``, ``[tool.tooldeck]`` in pyproject.toml, environment variables.

Precedence: ``TOOLDECK_CONFIG`` names a file explicitly; otherwise the nearest ``tooldeck.toml`` or
``pyproject.toml`` with a ``[tool.tooldeck]`` table, searched from the current directory upwards.
``TOOLDECK_DISABLE_PLUGINS`` adds to the disabled plugins; ``TOOLDECK_PLUGINS`` replaces the
allow-list.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from tooldeck_hookspecs import ConfigError

__all__ = ["Config", "load_config"]

_KNOWN_TOOL_KEYS = {"security", "execution", "description", "category"}


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


@attrs.frozen(kw_only=True)
class Config:
    """The tooldeck configuration: the ``[tool.tooldeck]`` table plus what the environment says.

    ``settings`` is handed as is to the provider hooks; each plugin reads its own table.
    """

    settings: Mapping[str, Any] = attrs.field(factory=dict)
    #: Entry-point names that must not load.
    disabled: frozenset[str] = frozenset()
    #: When set, only these entry-point names load.
    enabled: frozenset[str] | None = None
    #: Where the settings came from (a file path), for error messages and ``tooldeck plugins``.
    source: str | None = None

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any], *, source: str | None = None) -> Config:
        """Build a configuration from an already parsed ``tooldeck`` table (no environment)."""
        disabled = settings.get("disable", [])
        enabled = settings.get("plugins")
        if not isinstance(disabled, list) or not all(isinstance(x, str) for x in disabled):
            raise ConfigError(f"{source or 'config'}: 'disable' must be a list of plugin names")
        if enabled is not None and (
            not isinstance(enabled, list) or not all(isinstance(x, str) for x in enabled)
        ):
            raise ConfigError(f"{source or 'config'}: 'plugins' must be a list of plugin names")
        tools = settings.get("tools", {})
        if not isinstance(tools, Mapping):
            raise ConfigError(f"{source or 'config'}: 'tools' must be a table of tool names")
        for name, override in tools.items():
            if not isinstance(override, Mapping):
                raise ConfigError(f"{source or 'config'}: tools.{name} must be a table")
            unknown = set(override) - _KNOWN_TOOL_KEYS
            if unknown:
                raise ConfigError(
                    f"{source or 'config'}: tools.{name}: unknown key(s) {sorted(unknown)}; "
                    f"expected {sorted(_KNOWN_TOOL_KEYS)}"
                )
        return cls(
            settings=dict(settings),
            disabled=frozenset(disabled),
            enabled=None if enabled is None else frozenset(enabled),
            source=source,
        )

    def with_environment(self, environ: Mapping[str, str]) -> Config:
        """Apply ``TOOLDECK_DISABLE_PLUGINS`` and ``TOOLDECK_PLUGINS``."""
        disabled = set(self.disabled) | set(_split(environ.get("TOOLDECK_DISABLE_PLUGINS", "")))
        enabled = self.enabled
        if environ.get("TOOLDECK_PLUGINS", "").strip():
            enabled = frozenset(_split(environ["TOOLDECK_PLUGINS"]))
        return attrs.evolve(self, disabled=frozenset(disabled), enabled=enabled)

    def section(self, name: str) -> Mapping[str, Any]:
        """One table of the settings (empty when absent)."""
        value = self.settings.get(name, {})
        if not isinstance(value, Mapping):
            raise ConfigError(f"{self.source or 'config'}: '{name}' must be a table")
        return value

    def tool_override(self, name: str) -> Mapping[str, Any]:
        """The ``[tools.NAME]`` override table for one tool (empty when absent)."""
        override: Mapping[str, Any] = self.settings.get("tools", {}).get(name, {})
        return override

    def allows(self, plugin_name: str) -> bool:
        """Whether the entry point ``plugin_name`` may load."""
        if plugin_name in self.disabled:
            return False
        return self.enabled is None or plugin_name in self.enabled


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read configuration {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML in {path}: {exc}") from exc


def _table_of(path: Path, document: dict[str, Any]) -> dict[str, Any] | None:
    if path.name == "pyproject.toml":
        table = document.get("tool", {}).get("tooldeck")
        return table if isinstance(table, dict) else None
    # A tooldeck.toml may hold the settings at top level or under [tooldeck].
    inner = document.get("tooldeck")
    return inner if isinstance(inner, dict) else document


def find_config_file(start: Path) -> Path | None:
    """The nearest ``tooldeck.toml``, or pyproject.toml with ``[tool.tooldeck]``, upwards."""
    for folder in (start, *start.parents):
        candidate = folder / "tooldeck.toml"
        if candidate.is_file():
            return candidate
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and _table_of(pyproject, _read_toml(pyproject)) is not None:
            return pyproject
    return None


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    cwd: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Load the configuration the way the CLI and ``Deck.load()`` do.

    :param path: an explicit file; otherwise ``TOOLDECK_CONFIG``, otherwise a search from ``cwd``.
    :param cwd: where the search starts (the current directory by default).
    :param environ: the environment (``os.environ`` by default).
    """
    environ = os.environ if environ is None else environ
    explicit = path or environ.get("TOOLDECK_CONFIG") or None
    if explicit is not None:
        explicit_file = Path(explicit)
        if not explicit_file.is_file():
            raise ConfigError(f"configuration file {explicit_file} does not exist")
        file: Path | None = explicit_file
    else:
        file = find_config_file(Path(cwd or os.getcwd()).resolve())
    if file is None:
        return Config().with_environment(environ)
    table = _table_of(file, _read_toml(file)) or {}
    return Config.from_mapping(table, source=str(file)).with_environment(environ)
