"""Plugin manager: entry-point discovery, enable/disable, and typed hook calls.

Load order as pytest and tox do it: block what the user disabled, load the entry points, then
``check_pending()`` so that a misspelled hook fails at start-up.

Policy hooks (validate, filter, authorize, process_result) are called one implementation at a time
by :class:`Hooks`, not through pluggy's multicall, for two reasons: the core must know which plugin
gave each exclusion or decision, and one plugin that raises must not hide the others' answers.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import threading
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import pluggy

from tooldeck_hookspecs import (
    PROJECT_NAME,
    PluginLoadError,
    TooldeckError,
)
from tooldeck_hookspecs.specs import SPEC_MODULES

__all__ = ["FailedPlugin", "PluginInfo", "HookImpl", "TooldeckPluginManager", "ENTRY_POINT_GROUP"]

log = logging.getLogger("tooldeck")

ENTRY_POINT_GROUP = "tooldeck"
_SPEC_ATTR = f"{PROJECT_NAME}_spec"


@attrs.frozen(kw_only=True)
class PluginInfo:
    """A loaded plugin as ``tooldeck plugins`` shows it."""

    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    source: str  # "entry-point" | "inline" | "builtin"
    #: Why the plugin did not (fully) load, one line; None when it is healthy.
    error: str | None = None


@attrs.frozen(kw_only=True)
class FailedPlugin:
    """An entry-point plugin the deck started without (or without some of its tools).

    ``stage`` says when it failed: ``"import"`` (the entry point did not load), ``"hooks"`` (it
    implements a hook nobody specifies, or with unknown arguments), ``"register"`` (its
    ``tooldeck_register_tools`` raised: none of its tools are in the catalog, its other hooks
    still run) or ``"tools"`` (some of its tool definitions are invalid: those are left out).
    """

    name: str
    stage: str
    error: str
    distribution: str | None = None
    version: str | None = None
    #: Every problem, one line each (``error`` is their summary).
    problems: tuple[str, ...] = ()


#: The entry points tooldeck's own distributions declare: a third-party entry point of one of
#: these names never replaces ours (a user's policy plugin named ``policy`` would otherwise
#: switch off tooldeck-policy's grants, path guards and redaction, depending on sort order).
BUILTIN_ENTRY_POINTS: dict[str, str] = {
    "cache": "tooldeck-cache",
    "faiss": "tooldeck-faiss",
    "mcp": "tooldeck-mcp",
    "otel": "tooldeck-otel",
    "policy": "tooldeck-policy",
    "ratelimit": "tooldeck-ratelimit",
    "redis": "tooldeck-redis",
    "runner": "tooldeck-runner",
    "schema": "tooldeck-schema",
    "browser": "tooldeck-tools-browser",
    "code": "tooldeck-tools-code",
    "fs": "tooldeck-tools-fs",
    "process": "tooldeck-tools-process",
    "search": "tooldeck-tools-search",
    "shell": "tooldeck-tools-shell",
}


def _canonical(name: str | None) -> str:
    return (name or "").lower().replace("_", "-").replace(".", "-")


def _claim_order(ep: importlib.metadata.EntryPoint) -> tuple[int, str, str]:
    """Which of several entry points of one name keeps it: tooldeck's own distribution for a
    built-in name, otherwise the first by distribution name (never by import order)."""
    dist = _canonical(_distribution_of(ep)[0])
    own = BUILTIN_ENTRY_POINTS.get(ep.name)
    return (0 if own is not None and dist == own else 1, dist, ep.value)


#: How long one entry point's import may take (the configuration's ``register_timeout_s``
#: when the deck is loaded from one).
DEFAULT_IMPORT_TIMEOUT_S = 120.0


def import_timeout(settings: Mapping[str, Any]) -> float:
    """The configuration's ``register_timeout_s``, which bounds each entry point's import too."""
    value = settings.get("register_timeout_s", DEFAULT_IMPORT_TIMEOUT_S)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return DEFAULT_IMPORT_TIMEOUT_S
    return float(value)


class ImportTimeout(Exception):
    """An entry point's import did not finish within its deadline."""


def _load_with_deadline(ep: importlib.metadata.EntryPoint, timeout: float | None) -> Any:
    """``ep.load()``, on a daemon thread when there is a deadline: a pack whose import blocks
    (a socket that never answers) used to hang every deck for ever. What the import raised is
    raised here; past the deadline :class:`ImportTimeout` is, the import left running."""
    if timeout is None:
        return ep.load()
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, ep.load()))
        except BaseException as exc:  # handed to the loading thread, which decides
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name=f"tooldeck-import-{ep.name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        raise ImportTimeout(f"its import did not finish within {timeout:g} s (register_timeout_s)")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _distribution_of(ep: importlib.metadata.EntryPoint) -> tuple[str | None, str | None]:
    """The name and version of the distribution that declares ``ep``."""
    return (ep.dist.name, ep.dist.version) if ep.dist is not None else (None, None)


def _has_hookspecs(obj: object) -> bool:
    return isinstance(obj, types.ModuleType) and any(
        hasattr(getattr(obj, attr, None), _SPEC_ATTR) for attr in dir(obj)
    )


class HookImpl:
    """One plugin's implementation of a hook, callable with keyword arguments.

    pluggy lets an implementation accept a subset of the specified arguments; this passes only
    the ones it declares, as pluggy would. :meth:`call_in_order` is the fast form for the
    pipeline's per-call hooks.
    """

    __slots__ = ("plugin", "function", "argnames", "_picks")

    def __init__(
        self,
        plugin: str,
        function: Callable[..., Any],
        argnames: tuple[str, ...],
        spec_argnames: Sequence[str] | None = None,
    ):
        self.plugin = plugin
        self.function = function
        self.argnames = argnames
        # Positions of this implementation's arguments among the spec's; None when they are
        # the spec's own, in order (the common case: the function is called with them as is).
        self._picks: tuple[int, ...] | None = None
        if spec_argnames is not None and tuple(spec_argnames) != argnames:
            self._picks = tuple(list(spec_argnames).index(name) for name in argnames)

    def __call__(self, **kwargs: Any) -> Any:
        # map() rather than a comprehension: this runs for every plugin on many calls.
        return self.function(*map(kwargs.__getitem__, self.argnames))

    def call_in_order(self, *args: Any) -> Any:
        """Call with all of the hook's arguments, positionally, in the spec's order."""
        picks = self._picks
        if picks is None:
            return self.function(*args)
        return self.function(*[args[i] for i in picks])


class TooldeckPluginManager:
    """pluggy's PluginManager with tooldeck's discovery rules and each plugin's origin."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(PROJECT_NAME)
        self._spec_modules: set[str] = set()
        for module in SPEC_MODULES:
            self.add_hookspecs(module)
        self._origin: dict[str, tuple[str, str | None, str | None]] = {}
        #: Loaded entry points whose distribution and version are not read yet: that reads
        #: the distribution's METADATA (~0.5 ms a plugin), which only ``tooldeck plugins`` and
        #: failure reports show.
        self._unread_dists: dict[str, importlib.metadata.EntryPoint] = {}
        #: Entry-point plugins that failed, by name (see :class:`FailedPlugin`).
        self.failed: dict[str, FailedPlugin] = {}
        self._entry_points: list[importlib.metadata.EntryPoint] | None = None
        self.scanned_all = False

    def add_hookspecs(self, module: types.ModuleType) -> None:
        """Add a module of hook specifications once (re-adding the same module is a no-op)."""
        if module.__name__ in self._spec_modules:
            return
        self._spec_modules.add(module.__name__)
        self.pm.add_hookspecs(module)

    def register(self, plugin: object, name: str | None = None, *, source: str = "inline") -> str:
        """Register one plugin object (module, class instance or namespace) under ``name``."""
        try:
            registered = self.pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginLoadError(f"plugin {name or plugin!r}: {exc}") from exc
        except ValueError as exc:  # duplicate name or object
            raise PluginLoadError(f"plugin {name or plugin!r}: {exc}") from exc
        assert registered is not None
        self._origin[registered] = (source, None, None)
        self._unread_dists.pop(registered, None)
        return registered

    def load_entry_points(
        self,
        allows: Callable[[str], bool],
        only: Iterable[str] | None = None,
        *,
        strict: bool = True,
        import_timeout_s: float | None = DEFAULT_IMPORT_TIMEOUT_S,
    ) -> list[str]:
        """Load every allowed plugin of the ``tooldeck`` entry-point group; return their names.

        :param allows: the configuration's verdict on an entry-point name.
        :param only: load just these names (for tests), still subject to ``allows``.
        :param import_timeout_s: an entry point whose import has not finished by then (it
            waits on a server that never answers, a lock) is left out as failed, its import
            abandoned on a daemon thread; None: wait for ever.
        :param strict: raise :class:`PluginLoadError` when any entry point fails to import or
            to register; otherwise each failure is logged as a warning, recorded in
            :attr:`failed` and the others load (a broken pack must not stop the deck).
        """
        wanted = None if only is None else set(only)
        #: Whether every installed entry point was considered (not a chosen few, as tests
        #: and ``tooldeck eval`` load): only then is a required plugin's absence a fact.
        self.scanned_all = wanted is None
        loaded: list[str] = []
        errors: list[str] = []
        failures: list[tuple[str, str, str, str | None, str | None]] = []
        seen: dict[str, importlib.metadata.EntryPoint] = {}
        for ep in self._group():
            holder = seen.get(ep.name)
            if holder is not None:
                # Two distributions claiming one name: one keeps it (_group sorted them), the
                # other is left out as a failed plugin, so that `tooldeck plugins` shows it and
                # --strict refuses the installation.
                if (wanted is None or ep.name in wanted) and allows(ep.name):
                    dist, version = _distribution_of(ep)
                    message = (
                        f"entry point {ep.name!r} ({ep.value}, distribution {dist}) was left "
                        f"out: distribution {_distribution_of(holder)[0]} already provides a "
                        f"plugin named {ep.name!r}. Give the entry point another name (e.g. "
                        f"{_canonical(dist).replace('-', '_')}_{ep.name})"
                    )
                    errors.append(message)
                    failures.append((f"{ep.name}@{dist}", "duplicate", message, dist, version))
                continue
            seen[ep.name] = ep
            if wanted is not None and ep.name not in wanted:
                continue
            if not allows(ep.name):
                self.pm.set_blocked(ep.name)
                continue
            if self.pm.get_plugin(ep.name) is not None:
                continue
            try:
                # tooldeck's own packs are imported here (no thread on every start-up's path);
                # any other under the deadline.
                own = _claim_order(ep)[0] == 0
                obj = _load_with_deadline(ep, None if own else import_timeout_s)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # any import-time error: a broken pack
                # SystemExit too: a pack that calls sys.exit() when a library is missing
                # must not end the host (the CLI printed only its message and exited 1).
                dist, version = _distribution_of(ep)
                message = (
                    f"entry point {ep.name!r} ({ep.value}, distribution {dist}) failed to import: "
                    f"{type(exc).__name__}: {_one_line(exc)}"
                )
                errors.append(message)
                failures.append((ep.name, "import", message, dist, version))
                continue
            if _has_hookspecs(obj):
                self.add_hookspecs(obj)  # type: ignore[arg-type]
            try:
                self.pm.register(obj, name=ep.name)
            except (pluggy.PluginValidationError, ValueError) as exc:
                dist, version = _distribution_of(ep)
                message = f"entry point {ep.name!r} (distribution {dist}): {_one_line(exc)}"
                errors.append(message)
                failures.append((ep.name, "hooks", message, dist, version))
                # pluggy registers hook by hook: a failure midway leaves the earlier ones in.
                if self.pm.get_plugin(ep.name) is not None:
                    self.pm.unregister(name=ep.name)
                continue
            self._origin[ep.name] = ("entry-point", None, None)
            self._unread_dists[ep.name] = ep
            loaded.append(ep.name)
        if wanted is not None:
            missing = wanted - set(seen)
            if missing:
                # Naming a plugin explicitly is a request, never a broken install: always fatal.
                strict = True
                errors.append(
                    f"requested plugin(s) {sorted(missing)} are not installed "
                    f"(no entry point in group {ENTRY_POINT_GROUP!r})"
                )
        if errors and strict:
            raise PluginLoadError("\n".join(errors))
        for failure in failures:
            self._fail(*failure)
        return loaded

    def _fail(
        self,
        name: str,
        stage: str,
        message: str,
        dist: str | None = None,
        version: str | None = None,
        problems: Sequence[str] = (),
    ) -> None:
        previous = self.failed.get(name)
        if previous is not None:
            dist, version = previous.distribution, previous.version
            problems = (*previous.problems, *problems)
        elif name in self._origin:
            _, dist, version = self._origin_of(name)
        self.failed[name] = FailedPlugin(
            name=name,
            stage=stage,
            error=message,
            distribution=dist,
            version=version,
            problems=tuple(problems) or (message,),
        )
        # Loud on purpose: the deck runs without (part of) this plugin.
        log.warning("tooldeck: plugin %r left out (%s): %s", name, stage, message)

    def record_failure(
        self, name: str, stage: str, message: str, problems: Sequence[str] = ()
    ) -> None:
        """Record (and log) that an entry-point plugin's ``stage`` failed; the deck goes on."""
        self._fail(name, stage, message, problems=problems)

    def _origin_of(self, name: str) -> tuple[str, str | None, str | None]:
        """(source, distribution, version) of a registered plugin."""
        ep = self._unread_dists.pop(name, None)
        if ep is not None:
            self._origin[name] = ("entry-point", *_distribution_of(ep))
        return self._origin.get(name, ("inline", None, None))

    def is_entry_point(self, name: str) -> bool:
        """Whether ``name`` was loaded from an entry point (not registered inline)."""
        return self._origin.get(name, ("inline",))[0] == "entry-point"

    def _group(self) -> list[importlib.metadata.EntryPoint]:
        # Scanning the installed distributions costs milliseconds: once per manager.
        if self._entry_points is None:
            self._entry_points = sorted(
                importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
                key=lambda e: (e.name, _claim_order(e)),
            )
        return self._entry_points

    def entry_point_names(self) -> set[str]:
        """Every installed entry-point name of the group, loaded or not."""
        return {ep.name for ep in self._group()}

    def config_schemas(self) -> tuple[dict[str, list[tuple[str, Any]]], list[str]]:
        """The configuration schemas plugins contribute: ``{table: [(plugin, schema)]}``.

        Also returns one line per implementation that raised or returned something that is not
        a mapping of tables to schemas (its tables are then checked only for being tables).
        """
        schemas: dict[str, list[tuple[str, Any]]] = {}
        problems: list[str] = []
        for impl in self.impls("tooldeck_config_schema"):
            try:
                contributed = impl()
            except Exception as exc:  # a plugin's bug: reported, not fatal
                problems.append(
                    f"plugin {impl.plugin!r}: tooldeck_config_schema raised "
                    f"{type(exc).__name__}: {_one_line(exc)}"
                )
                continue
            if contributed is None:
                continue
            if not isinstance(contributed, Mapping) or not all(
                isinstance(k, str) and isinstance(v, Mapping) for k, v in contributed.items()
            ):
                problems.append(
                    f"plugin {impl.plugin!r}: tooldeck_config_schema must return "
                    "{table_name: JSON Schema}"
                )
                continue
            for table, schema in contributed.items():
                schemas.setdefault(table, []).append((impl.plugin, schema))
        return schemas, problems

    def check_pending(self, *, strict: bool = True) -> None:
        """Fail when a plugin implements a hook that no specification declares (a misspelling).

        :param strict: when False, an *entry-point* plugin with such a hook is unregistered and
            recorded in :attr:`failed` instead; an inline plugin (the caller's own code) always
            fails.
        """
        if not strict:
            for name, unknown in self._unknown_hooks().items():
                if not self.is_entry_point(name):
                    continue
                self.pm.unregister(name=name)
                self._fail(
                    name,
                    "hooks",
                    f"implements unknown hook(s) {', '.join(sorted(unknown))} "
                    "(a misspelling, or a hookspec module that is not installed)",
                )
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            hooks = sorted(
                name for name in dir(self.pm.hook) if name.startswith(f"{PROJECT_NAME}_")
            )
            raise PluginLoadError(f"{exc}. Known hooks: {', '.join(hooks)}") from exc

    def _unknown_hooks(self) -> dict[str, set[str]]:
        # pluggy's check_pending, per plugin, so that one plugin can be left out.
        found: dict[str, set[str]] = {}
        for hook_name in list(vars(self.pm.hook)):
            if hook_name.startswith("_"):
                continue
            caller = getattr(self.pm.hook, hook_name)
            if caller.has_spec():
                continue
            for impl in caller.get_hookimpls():
                if not impl.optionalhook:
                    found.setdefault(impl.plugin_name, set()).add(hook_name)
        return found

    def healthy_names(self) -> set[str]:
        """Names of the registered plugins that did not fail: those :meth:`plugin_infos` lists
        without an ``error`` (without reading any distribution's metadata)."""
        return {
            name
            for name, plugin in self.pm.list_name_plugin()
            if plugin is not None and name not in self.failed
        }

    def plugin_infos(self) -> list[PluginInfo]:
        """Every registered plugin with its distribution, version and implemented hooks.

        Failed entry-point plugins are included with their ``error`` (and no hooks when they
        never loaded).
        """
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:
                continue
            hooks = tuple(sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or []))
            source, dist, version = self._origin_of(name)
            failed = self.failed.get(name)
            infos.append(
                PluginInfo(
                    name=name,
                    distribution=dist,
                    version=version,
                    hooks=hooks,
                    source=source,
                    error=None if failed is None else failed.error,
                )
            )
        listed = {info.name for info in infos}
        for failed in self.failed.values():
            if failed.name not in listed:
                infos.append(
                    PluginInfo(
                        name=failed.name,
                        distribution=failed.distribution,
                        version=failed.version,
                        hooks=(),
                        source="entry-point",
                        error=failed.error,
                    )
                )
        return sorted(infos, key=lambda i: i.name)

    def impls(self, hook_name: str) -> list[HookImpl]:
        """One hook's implementations, in pluggy's call order (wrappers left out)."""
        caller = getattr(self.pm.hook, hook_name)
        spec = caller.spec
        spec_argnames = tuple(spec.argnames) if spec is not None else None
        result = []
        # pluggy calls implementations last-registered/tryfirst first: reversed storage order.
        for impl in reversed(caller.get_hookimpls()):
            if impl.hookwrapper or impl.wrapper:
                continue
            result.append(
                HookImpl(impl.plugin_name, impl.function, tuple(impl.argnames), spec_argnames)
            )
        return result

    def has_impls(self, hook_name: str) -> bool:
        """Whether any plugin implements ``hook_name``."""
        return bool(getattr(self.pm.hook, hook_name).get_hookimpls())

    def call_provider(self, hook_name: str, settings: Mapping[str, Any]) -> tuple[Any, str | None]:
        """Call a ``firstresult`` provider hook; return (provider, the plugin that gave it).

        :raises PluginLoadError: a provider raised (a malformed ``TOOLDECK_REDIS_URL``, a
            server that cannot be reached): one line naming the plugin and the hook, not a
            traceback; the deck does not start without a stage it was configured with.
        """
        for impl in self.impls(hook_name):
            try:
                provider = impl(settings=settings)
            except TooldeckError:
                raise  # a ConfigError names the setting itself
            except Exception as exc:
                raise PluginLoadError(
                    f"plugin {impl.plugin!r}: {hook_name} failed: {type(exc).__name__}: "
                    f"{_one_line(exc)}"
                ) from exc
            if provider is not None:
                return provider, impl.plugin
        return None, None

    def register_commands(self, subparsers: Any) -> dict[str, str]:
        """Let every plugin add subcommands (``tooldeck_register_commands``); return name -> plugin.

        Each implementation is called on its own: an entry-point plugin that raises is recorded
        in :attr:`failed` (stage ``commands``) and whatever it added is taken out again; an
        inline plugin's error propagates. A name already taken (by the core or by another
        plugin) raises :class:`PluginLoadError` naming both owners.

        :param subparsers: the ``tooldeck`` parser's ``add_subparsers()`` action.
        """
        owners: dict[str, str] = {}
        for impl in reversed(self.impls("tooldeck_register_commands")):  # registration order
            added: list[tuple[Any, str]] = []
            proxy = _CommandAdder(subparsers, impl.plugin, owners, added)
            try:
                impl(subparsers=proxy)
            except PluginLoadError:
                raise
            except Exception as exc:
                if not self.is_entry_point(impl.plugin):
                    raise
                # Take back what the plugin added before it raised: no half-built command.
                for action, name in reversed(added):
                    parser = action._name_parser_map.pop(name, None)
                    action._choices_actions[:] = [
                        c for c in action._choices_actions if c.dest != name
                    ]
                    del parser
                for name in [n for n, owner in owners.items() if owner == impl.plugin]:
                    del owners[name]
                self.record_failure(
                    impl.plugin,
                    "commands",
                    f"tooldeck_register_commands raised {type(exc).__name__}: {_one_line(exc)}",
                )
        return owners


class _CommandAdder:
    """The sub-parsers action as one plugin sees it: ``add_parser`` refuses a taken name, and
    ``group(name)`` opens a core command group (``serve``) to add a subcommand under it."""

    def __init__(
        self,
        subparsers: Any,
        plugin: str,
        owners: dict[str, str],
        added: list[tuple[Any, str]],
        prefix: str = "",
    ) -> None:
        self._subparsers = subparsers
        self._plugin = plugin
        self._owners = owners
        self._added = added
        self._prefix = prefix

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        """``argparse``'s ``add_parser``; a name (or alias) already in use is an error."""
        for candidate in (name, *kwargs.get("aliases", ())):
            if candidate in self._subparsers._name_parser_map:
                command = self._prefix + candidate
                owner = self._owners.get(command, "the tooldeck core")
                owner_text = owner if owner == "the tooldeck core" else f"plugin {owner!r}"
                raise PluginLoadError(
                    f"command {command!r} is added by both {owner_text} and plugin "
                    f"{self._plugin!r}; disable one of them (TOOLDECK_DISABLE_PLUGINS)"
                )
        parser = self._subparsers.add_parser(name, **kwargs)
        for candidate in (name, *kwargs.get("aliases", ())):
            self._owners[self._prefix + candidate] = self._plugin
            self._added.append((self._subparsers, candidate))
        return parser

    def group(self, name: str) -> _CommandAdder:
        """The sub-parsers of the existing command group ``name`` (``tooldeck NAME ...``), as
        this plugin sees them: ``group("serve").add_parser("mcp", ...)`` adds ``serve mcp``.

        :raises ValueError: ``name`` is not a command with subcommands.
        """
        parser = self._subparsers._name_parser_map.get(name)
        actions = [] if parser is None else parser._actions
        found = [a for a in actions if isinstance(a, argparse._SubParsersAction)]
        if not found:
            raise ValueError(f"no command group {self._prefix + name!r} to add a subcommand to")
        return _CommandAdder(
            found[0], self._plugin, self._owners, self._added, f"{self._prefix}{name} "
        )

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._subparsers, attribute)


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line (a multi-line message would break the report)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def describe_plugins(infos: Sequence[PluginInfo]) -> list[dict[str, Any]]:
    """Plain dicts for JSON output."""
    return [attrs.asdict(info) for info in infos]
