"""Configuration: ``tooldeck.toml``, ``[tool.tooldeck]`` in pyproject.toml, environment variables.

Precedence: ``TOOLDECK_CONFIG`` names a file explicitly; otherwise the nearest ``tooldeck.toml`` or
``pyproject.toml`` with a ``[tool.tooldeck]`` table, searched from the current directory upwards.
``TOOLDECK_DISABLE_PLUGINS`` adds to the disabled plugins; ``TOOLDECK_PLUGINS`` replaces the
allow-list.

Trust. A file found by that search usually lives in the project directory, which is also where
sessions work: a prompt-injected model that managed to write it would choose the grants, switch
the sandbox off or name an MCP server command the host runs. So a *found* file is applied in full
only when the user trusted that exact content (``tooldeck config trust``, like ``direnv allow``:
the trust store keeps the file's path and SHA-256, so any later change needs a new trust). An
untrusted found file still applies what cannot weaken security or start a process
(:data:`UNTRUSTED_KEYS`: the ``[hand]`` table and extra ``protected_paths``); every other table is
ignored and named in one warning. A file the user names (``TOOLDECK_CONFIG``, ``--config``,
``Deck.load(config=path)``) is trusted: naming it is the user saying so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from tooldeck_hookspecs import ConfigError

__all__ = [
    "Config",
    "TRUST_FILE_ENV",
    "UNTRUSTED_KEYS",
    "config_digest",
    "is_trusted",
    "load_config",
    "read_config_file",
    "trust_config",
    "trust_store_path",
    "untrust_config",
]

log = logging.getLogger("tooldeck.config")

#: Names the trust store explicitly (tests, containers).
TRUST_FILE_ENV = "TOOLDECK_TRUST_FILE"
#: The trust store's file name; ``tooldeck-trust.json`` is a protected path, so a session whose
#: workdir holds it (a home directory) cannot rewrite it. A store ``TOOLDECK_TRUST_FILE`` names
#: inside a workdir is protected there under its own name (``tooldeck._deck._trust_store_rules``).
TRUST_FILE_NAME = "tooldeck-trust.json"
#: What an untrusted configuration file may still set: nothing here grants, relaxes or runs.
UNTRUSTED_KEYS = frozenset({"hand", "protected_paths"})

#: The core's own top-level keys (the rest belongs to plugins).
_CORE_KEYS = frozenset(
    {"hand", "session", "approvals", "tools", "plugins", "disable", "protected_paths"}
    | {"required_plugins", "register_timeout_s"}
)


def _names(value: Any) -> list[str] | None:
    """The strings of a list of plugin names; None when it is not a list (reported elsewhere)."""
    if not isinstance(value, list):
        return None
    return [x for x in value if isinstance(x, str)]


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
    #: False when ``source`` was found by the search and its content is not in the trust store.
    trusted: bool = True
    #: Top-level keys of an untrusted file that were not applied.
    ignored: tuple[str, ...] = ()

    #: Printed before table names in problems: ``"tool.tooldeck"`` for a pyproject.toml,
    #: ``"tooldeck"`` when a tooldeck.toml nests its settings under ``[tooldeck]``.
    table_prefix: str = ""

    @classmethod
    def from_mapping(
        cls,
        settings: Mapping[str, Any],
        *,
        source: str | None = None,
        trusted: bool = True,
        ignored: tuple[str, ...] = (),
        validate: bool = True,
        table_prefix: str = "",
    ) -> Config:
        """Build a configuration from an already parsed ``tooldeck`` table (no environment).

        :param validate: check the core's own keys and tables (``hand``, ``session``,
            ``approvals``, ``tools``, ``plugins``, ``disable``, ``protected_paths``) and raise
            one :class:`~tooldeck._config_schema.ConfigValidationError` listing every problem.
            ``Deck.load()`` passes False and validates the whole file, plugins' tables too,
            once the plugins are known; malformed values are then left out here.
        """
        from ._config_schema import raise_for_errors, validate_settings

        if not isinstance(settings, Mapping):
            raise ConfigError(f"{source or 'config'}: the settings must be a table")
        if validate:
            # Unknown keys are not the core's to judge before the plugins are loaded.
            core_only = {k: v for k, v in settings.items() if k in _CORE_KEYS}
            raise_for_errors(
                validate_settings(
                    core_only, file=source or "config", schemas={}, prefix=table_prefix
                )
            )
        disabled = _names(settings.get("disable")) or []
        enabled = settings.get("plugins")
        return cls(
            settings=dict(settings),
            disabled=frozenset(disabled),
            enabled=None if enabled is None else frozenset(_names(enabled) or ()),
            source=source,
            trusted=trusted,
            ignored=ignored,
            table_prefix=table_prefix,
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
        tools = self.settings.get("tools", {})
        override = tools.get(name, {}) if isinstance(tools, Mapping) else {}
        return override if isinstance(override, Mapping) else {}

    def allows(self, plugin_name: str) -> bool:
        """Whether the entry point ``plugin_name`` may load."""
        if plugin_name in self.disabled:
            return False
        return self.enabled is None or plugin_name in self.enabled


#: How much of a task selection reads by default (``hand.max_task_chars``; see
#: ``tooldeck._deck._bounded_task`` for why).
DEFAULT_MAX_TASK_CHARS = 8_000

#: ``[hand]`` numbers an untrusted configuration may lower but not raise: the defaults. A file
#: anyone could plant in a parent folder must not lift the task-size bound (a minute of a core
#: per MB of task) or deal a hundred thousand tools.
_UNTRUSTED_HAND_CEILINGS = {
    "limit": 15, "recall": 20, "fallback_recall": 40, "sticky_turns": 3,
    "max_task_chars": DEFAULT_MAX_TASK_CHARS,
}


def _tightened_hand(hand: dict[str, Any], file: Path) -> dict[str, Any]:
    """An untrusted ``[hand]`` with each number above its default brought down to it."""
    out = dict(hand)
    for key, ceiling in _UNTRUSTED_HAND_CEILINGS.items():
        value = out.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > ceiling:
            log.warning("tooldeck: %s is not trusted: hand.%s = %r is lowered to %r (an "
                        "untrusted file may only tighten it)", file, key, value, ceiling)
            out[key] = ceiling
    return out


def _read_toml(path: Path) -> dict[str, Any]:
    return _parse_toml(path, _read_config_bytes(path))


def _read_config_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {exc.strerror}") from exc


def _parse_toml(path: Path, data: bytes) -> dict[str, Any]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # tomllib would raise this bare, without the file's name: say where, on one line.
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{path}: not UTF-8 (byte 0x{data[exc.start]:02x} on line {line}); TOML files are "
            "UTF-8 text"
        ) from None
    import tomllib  # only when there is a file: most `tooldeck call` runs have none (~3 ms)

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None


def read_config_file(path: str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """The tooldeck settings table of one file, whole (trusted or not), and its table prefix.

    For ``tooldeck config check``, which validates everything a file says.
    """
    file = Path(path)
    document = _read_toml(file)
    return _table_of(file, document) or {}, _prefix_of(file, document)


def _prefix_of(path: Path, document: Mapping[str, Any]) -> str:
    if path.name == "pyproject.toml":
        return "tool.tooldeck"
    return "tooldeck" if isinstance(document.get("tooldeck"), dict) else ""


def _table_of(path: Path, document: dict[str, Any]) -> dict[str, Any] | None:
    if path.name == "pyproject.toml":
        table = document.get("tool", {}).get("tooldeck")
        return table if isinstance(table, dict) else None
    # A tooldeck.toml may hold the settings at top level or under [tooldeck].
    inner = document.get("tooldeck")
    table = inner if isinstance(inner, dict) else document
    tool = table.get("tool")
    nested = tool.get("tooldeck") if isinstance(tool, dict) else None
    if not isinstance(tool, dict) or not isinstance(nested, dict):
        return table
    # Every README spells tables as in a pyproject.toml ([tool.tooldeck.faiss]): copied into a
    # tooldeck.toml they mean the same tables, not an unknown table "tool" (which would stop
    # the deck, and leave `tooldeck eval retrieval --config` without its settings).
    merged = {k: v for k, v in table.items() if k != "tool"}
    rest = {k: v for k, v in tool.items() if k != "tooldeck"}
    if rest:
        merged["tool"] = rest  # other tools' tables stay, and validation names them
    for name, value in nested.items():
        known = merged.get(name)
        if isinstance(value, dict) and isinstance(known, dict):
            merged[name] = {**known, **value}
        else:
            merged[name] = value
    return merged


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


def trust_store_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where trusted configuration files are recorded.

    ``TOOLDECK_TRUST_FILE``, else ``$XDG_CONFIG_HOME/tooldeck/tooldeck-trust.json``, else
    ``~/.config/tooldeck/tooldeck-trust.json``.
    """
    environ = os.environ if environ is None else environ
    explicit = environ.get(TRUST_FILE_ENV)
    if explicit:
        return Path(explicit)
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "tooldeck" / TRUST_FILE_NAME


def config_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a configuration file's bytes (what trust is given to)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration {path}: {exc.strerror}") from exc


#: A trust store larger than this is not read: every start reads it, and a planted 2 GB file
#: must not be loaded whole. Thousands of entries of the longest paths fit.
_MAX_STORE_BYTES = 16 << 20
_STORE_VERSION = 1


class _StoreUnusable(Exception):
    def __init__(self, why: str, *, newer: bool = False) -> None:
        super().__init__(why)
        self.newer = newer


def _parse_store(store: Path) -> dict[str, str]:
    """The store's entries ({} when there is none); :class:`_StoreUnusable` saying why not."""
    try:
        size = store.stat().st_size
        if size > _MAX_STORE_BYTES:
            raise _StoreUnusable(f"{size:,} bytes, more than {_MAX_STORE_BYTES:,}")
        data = json.loads(store.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:
        raise _StoreUnusable(str(exc)) from exc
    if not isinstance(data, dict):
        raise _StoreUnusable("not a JSON object")
    version = data.get("version", _STORE_VERSION)
    if version != _STORE_VERSION:
        newer = isinstance(version, int) and version > _STORE_VERSION
        raise _StoreUnusable(f"version {version!r}, this tooldeck reads {_STORE_VERSION}",
                             newer=newer)
    files = data.get("files")
    if not isinstance(files, dict):
        raise _StoreUnusable("no table of files")
    # Only an exact digest string counts: nothing a damaged entry holds can match a file.
    return {str(k): v for k, v in files.items() if isinstance(v, str)}


def _read_store(store: Path) -> dict[str, str]:
    try:
        return _parse_store(store)
    except _StoreUnusable as exc:
        # A broken store trusts nothing; saying so beats a traceback at every start.
        log.warning("tooldeck: the trust store %s is unreadable (%s); trusting nothing", store, exc)
        return {}


def _read_store_for_update(store: Path) -> dict[str, str]:
    """The entries to update. A damaged store is set aside first (it used to be overwritten,
    its entries gone for good); a newer tooldeck's store is left alone (ConfigError)."""
    try:
        return _parse_store(store)
    except _StoreUnusable as exc:
        if exc.newer:
            raise ConfigError(
                f"the trust store {store} was written by a newer tooldeck ({exc}); not changing "
                "it: use that tooldeck, or name another store with " + TRUST_FILE_ENV
            ) from exc
        aside = store.with_name(f"{store.name}.corrupt-{time.time_ns()}")
        try:
            os.replace(store, aside)
        except OSError as err:
            raise ConfigError(
                f"the trust store {store} is unreadable ({exc}) and cannot be set aside "
                f"({err.strerror})"
            ) from err
        log.warning("tooldeck: the trust store %s is unreadable (%s); set aside as %s, "
                    "starting a new one", store, exc, aside.name)
        return {}


@contextlib.contextmanager
def _store_locked(store: Path) -> Iterator[None]:
    """Hold the store's lock file for a read-modify-write.

    Two `tooldeck config trust` at once each read the store, added their file and replaced it:
    the first one's entry was lost though it said "trusted" (345 of 900 kept by three
    processes). A lock file beside the store serialises them; where there is no ``fcntl``
    (Windows) the old behaviour stays.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    try:
        store.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(store.with_name(store.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot lock the trust store {store}: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write_store(store: Path, files: Mapping[str, str]) -> None:
    payload = json.dumps(
        {"version": _STORE_VERSION, "files": dict(sorted(files.items()))}, indent=2
    )
    try:
        store.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".tooldeck-trust-", dir=store.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(payload + "\n")
                # On disk before it takes the name: after a power loss the store is the old
                # one or the new one, never an empty file.
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, store)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        # One line (a directory in its place, a full or read-only disk), not a traceback.
        raise ConfigError(f"cannot write the trust store {store}: {exc}") from exc


def is_trusted(
    path: str | os.PathLike[str],
    environ: Mapping[str, str] | None = None,
    *,
    content: bytes | None = None,
) -> bool:
    """Whether this file, with exactly its current content, is in the trust store.

    :param content: the bytes the caller read and will use: trust is then judged on them, not
        on a second read of the file, which a writer could swap in between (a planted config
        parsed, the trusted one hashed).
    """
    real = os.path.realpath(path)
    recorded = _read_store(trust_store_path(environ)).get(real)
    if recorded is None:
        return False
    digest = hashlib.sha256(content).hexdigest() if content is not None else config_digest(real)
    return recorded == digest


def trust_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> str:
    """Record the file's current content as trusted; returns its SHA-256."""
    real = os.path.realpath(path)
    digest = config_digest(real)
    store = trust_store_path(environ)
    with _store_locked(store):
        files = _read_store_for_update(store)
        files[real] = digest
        _write_store(store, files)
    return digest


def untrust_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> bool:
    """Forget a file; returns whether it was trusted before."""
    real = os.path.realpath(path)
    store = trust_store_path(environ)
    with _store_locked(store):
        files = _read_store_for_update(store)
        if files.pop(real, None) is None:
            return False
        _write_store(store, files)
    return True


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    cwd: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Load the configuration the way the CLI and ``Deck.load()`` do.

    :param path: an explicit file; otherwise ``TOOLDECK_CONFIG``, otherwise a search from ``cwd``.
        An explicit file is trusted; a found one only if the trust store says so (module
        docstring), else only :data:`UNTRUSTED_KEYS` of it apply.
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
    # Read once: what is parsed is what trust is judged on.
    content = _read_config_bytes(file)
    document = _parse_toml(file, content)
    table = _table_of(file, document) or {}
    prefix = _prefix_of(file, document)
    # validate=False: Deck.load() validates the whole of what applies once plugins are known,
    # so that every problem, the plugins' tables' too, is reported in one go.
    if explicit is not None or is_trusted(file, environ, content=content):
        return Config.from_mapping(
            table, source=str(file), validate=False, table_prefix=prefix
        ).with_environment(environ)
    kept = {k: v for k, v in table.items() if k in UNTRUSTED_KEYS}
    if isinstance(kept.get("hand"), dict):
        kept["hand"] = _tightened_hand(kept["hand"], file)
    ignored = tuple(sorted(k for k in table if k not in UNTRUSTED_KEYS))
    if ignored:
        log.warning(
            "tooldeck: %s is not trusted, so only %s of it apply; ignored: %s. If you wrote it, "
            "run `tooldeck config trust %s` (needed again after every change), or name it with "
            "TOOLDECK_CONFIG.",
            file,
            " and ".join(sorted(UNTRUSTED_KEYS)),
            ", ".join(ignored),
            file,
        )
    return Config.from_mapping(
        kept, source=str(file), trusted=False, ignored=ignored, validate=False, table_prefix=prefix
    ).with_environment(environ)
