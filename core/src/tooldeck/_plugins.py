"""Plugin manager: entry-point discovery, enable/disable, and typed hook calls.

Load order as pytest and tox do it: block what the user disabled, load the entry points, then
``check_pending()`` so that a misspelled hook fails at start-up.

Policy hooks (validate, filter, authorize, process_result) are called one implementation at a time
by :class:`Hooks`, not through pluggy's multicall, for two reasons: the core must know which plugin
gave each exclusion or decision, and one plugin that raises must not hide the others' answers.
"""

from __future__ import annotations

import importlib.metadata
import logging
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import pluggy

from tooldeck_hookspecs import (
    PROJECT_NAME,
    PluginLoadError,
)
from tooldeck_hookspecs.specs import SPEC_MODULES

__all__ = ["PluginInfo", "HookImpl", "TooldeckPluginManager", "ENTRY_POINT_GROUP"]

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
        return registered

    def load_entry_points(
        self, allows: Callable[[str], bool], only: Iterable[str] | None = None
    ) -> list[str]:
        """Load every allowed plugin of the ``tooldeck`` entry-point group; return their names.

        :param allows: the configuration's verdict on an entry-point name.
        :param only: load just these names (for tests), still subject to ``allows``.
        """
        wanted = None if only is None else set(only)
        loaded: list[str] = []
        errors: list[str] = []
        seen: set[str] = set()
        for ep in sorted(
            importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name
        ):
            if ep.name in seen:
                # Two distributions claiming one name: the first (by sort order) wins, loudly.
                log.warning("duplicate tooldeck entry point %r ignored (%s)", ep.name, ep.value)
                continue
            seen.add(ep.name)
            if wanted is not None and ep.name not in wanted:
                continue
            if not allows(ep.name):
                self.pm.set_blocked(ep.name)
                continue
            if self.pm.get_plugin(ep.name) is not None:
                continue
            dist = ep.dist.name if ep.dist is not None else None
            version = ep.dist.version if ep.dist is not None else None
            try:
                obj = ep.load()
            except Exception as exc:
                errors.append(
                    f"entry point {ep.name!r} ({ep.value}, distribution {dist}) failed to import: "
                    f"{type(exc).__name__}: {exc}"
                )
                continue
            if _has_hookspecs(obj):
                self.add_hookspecs(obj)  # type: ignore[arg-type]
            try:
                self.pm.register(obj, name=ep.name)
            except (pluggy.PluginValidationError, ValueError) as exc:
                errors.append(f"entry point {ep.name!r} (distribution {dist}): {exc}")
                continue
            self._origin[ep.name] = ("entry-point", dist, version)
            loaded.append(ep.name)
        if wanted is not None:
            missing = wanted - seen
            if missing:
                errors.append(
                    f"requested plugin(s) {sorted(missing)} are not installed "
                    f"(no entry point in group {ENTRY_POINT_GROUP!r})"
                )
        if errors:
            raise PluginLoadError("\n".join(errors))
        return loaded

    def check_pending(self) -> None:
        """Fail when a plugin implements a hook that no specification declares (a misspelling)."""
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            hooks = sorted(
                name for name in dir(self.pm.hook) if name.startswith(f"{PROJECT_NAME}_")
            )
            raise PluginLoadError(f"{exc}. Known hooks: {', '.join(hooks)}") from exc

    def plugin_infos(self) -> list[PluginInfo]:
        """Every registered plugin with its distribution, version and implemented hooks."""
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:
                continue
            hooks = tuple(sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or []))
            source, dist, version = self._origin.get(name, ("inline", None, None))
            infos.append(
                PluginInfo(
                    name=name, distribution=dist, version=version, hooks=hooks, source=source
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
        """Call a ``firstresult`` provider hook; return (provider, the plugin that gave it)."""
        for impl in self.impls(hook_name):
            provider = impl(settings=settings)
            if provider is not None:
                return provider, impl.plugin
        return None, None


def describe_plugins(infos: Sequence[PluginInfo]) -> list[dict[str, Any]]:
    """Plain dicts for JSON output."""
    return [attrs.asdict(info) for info in infos]
