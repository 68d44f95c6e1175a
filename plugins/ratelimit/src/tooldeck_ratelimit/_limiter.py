"""Moving-window admission control per (session, tool) and per tool, on the ``limits`` library."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from tooldeck_hookspecs import (
    MAX_RATE_WINDOW_S,
    ConfigError,
    RateLimit,
    RateLimitOutcome,
    SessionInfo,
    ToolDefinition,
)

if TYPE_CHECKING:
    # ``limits`` (and the storage backends it pulls in) costs ~0.09 s to import: a deck whose
    # tools declare no rate limit, or a one-shot ``tooldeck call``, should not pay it.
    from limits import RateLimitItem
    from limits.storage import Storage
    from limits.strategies import MovingWindowRateLimiter

__all__ = [
    "DEFAULT_GLOBAL_FACTOR",
    "ToolRateLimiter",
    "limiter_from_settings",
    "parse_global_override",
]

logger = logging.getLogger("tooldeck.ratelimit")

#: Without an override, the limit across all sessions is this many times the per-session limit.
DEFAULT_GLOBAL_FACTOR = 10.0

_ALLOWED = RateLimitOutcome(allowed=True)
#: How often the in-memory windows of finished sessions are dropped (see ``sweep``).
_SWEEP_EVERY_S = 30.0
_NAMESPACE = "tooldeck"


@attrs.frozen
class _Window:
    item: RateLimitItem
    identifiers: tuple[str, ...]
    label: str


def _item(max_calls: int, window_s: float) -> RateLimitItem:
    from limits import RateLimitItemPerSecond

    # limits counts windows in whole seconds: a fractional window is rounded up (stricter).
    return RateLimitItemPerSecond(max(0, max_calls), max(1, math.ceil(window_s)), _NAMESPACE)


def parse_global_override(tool: str, value: Any, default_window_s: float) -> RateLimit | None:
    """A ``[ratelimit.global]`` entry: an int (calls per the tool's window), a table, or 0/false.

    Shared with tooldeck-redis, so that both limiters read the setting the same way. Every
    malformed entry raises :class:`ConfigError` naming it (read at start-up): a negative count
    would otherwise block the tool for every session for good, and a window that is not a
    finite positive number would fail every call of the tool.
    """
    where = f"ratelimit.global.{tool}"
    if isinstance(value, bool):
        if value:
            raise ConfigError(f"{where}: expected an int or a table, got true")
        return None
    if value is None or (isinstance(value, int) and value == 0):
        return None
    if isinstance(value, int):
        return RateLimit(max_calls=_calls(where, value), window_s=default_window_s)
    if isinstance(value, Mapping) and "max_calls" in value:
        unknown = sorted(set(value) - {"max_calls", "window_s"})
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} "
                              "(expected max_calls and window_s)")
        window = value.get("window_s", default_window_s)
        if isinstance(window, bool) or not isinstance(window, int | float) or not (
            math.isfinite(window) and 0 < window <= MAX_RATE_WINDOW_S
        ):
            raise ConfigError(f"{where}.window_s: expected a number of seconds > 0 and "
                              f"<= {MAX_RATE_WINDOW_S:.0f} (366 days), got {window!r}")
        return RateLimit(max_calls=_calls(f"{where}.max_calls", value["max_calls"]),
                         window_s=float(window))
    raise ConfigError(
        f"{where}: expected an int or a table with max_calls (and window_s), got {value!r}"
    )


def _calls(where: str, value: Any) -> int:
    """A cross-session count of calls: an int >= 0 (0 admits no call at all)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}: expected an integer >= 0, got {value!r}")
    return value


class ToolRateLimiter:
    """Admission control for tools that declare ``security.rate_limit``.

    Two moving windows per call: one per (session, tool) with the tool's own limit, and one per
    tool across all sessions. The cross-session limit is, in order of precedence, the tool's entry
    in ``global_overrides`` (``0``/``False`` there means "no cross-session limit"), or
    ``ceil(global_factor * max_calls)`` over the same window (``global_factor = 0`` disables it).

    With the in-memory storage every call is non-blocking and, since both windows are tested before
    either is consumed within one trio step, atomic: a call refused by one window uses no slot of
    the other. Remote storages (``redis://...``) are driven from a worker thread; there the test
    and the hits are separate round trips, so two processes may both pass a nearly full window.

    :param storage_uri: a ``limits`` storage URI (``memory://`` by default).
    :param global_factor: multiplier of the per-session limit for the cross-session window.
    :param global_overrides: tool name -> int, ``{max_calls, window_s}`` table, or 0 to disable.
    :param fail_open: when the storage fails, allow the call (True) or refuse it (False).
    """

    def __init__(
        self,
        *,
        storage_uri: str = "memory://",
        global_factor: float = DEFAULT_GLOBAL_FACTOR,
        global_overrides: Mapping[str, Any] | None = None,
        fail_open: bool = True,
    ) -> None:
        if not math.isfinite(global_factor) or global_factor < 0:
            # inf would overflow at the first call, NaN would silently disable the bound.
            raise ConfigError(
                f"ratelimit.global_factor must be a number >= 0, not {global_factor!r}"
            )
        self._storage_obj: Storage | None = None
        self._strategy_obj: MovingWindowRateLimiter | None = None
        # The default in-memory storage is built at the first rate-limited call; any other URI is
        # opened now so that a misspelled or unsupported one still fails at start-up.
        self._in_memory = storage_uri.startswith("memory://")
        if not self._in_memory:
            self._open_storage(storage_uri)
        self.storage_uri = storage_uri
        self.global_factor = global_factor
        self.fail_open = fail_open
        self._overrides = dict(global_overrides or {})
        for name, value in self._overrides.items():
            parse_global_override(name, value, 60.0)  # a malformed override fails at start-up
        # Windows depend only on the tool definition; build them once per (name, version, limit).
        self._windows: dict[tuple[str, str, RateLimit], tuple[RateLimitItem, _Window | None]] = {}
        self._next_sweep = time.monotonic() + _SWEEP_EVERY_S

    def _open_storage(self, storage_uri: str) -> Storage:
        from limits.errors import ConfigurationError
        from limits.storage import MemoryStorage, Storage, storage_from_string
        from limits.strategies import MovingWindowRateLimiter

        try:
            storage = storage_from_string(storage_uri)
        except ConfigurationError as exc:
            raise ConfigError(f"ratelimit.storage_uri {storage_uri!r}: {exc}") from exc
        if not isinstance(storage, Storage):
            # limits' async storages are built on asyncio and do not run under trio.
            raise ConfigError(
                f"ratelimit.storage_uri {storage_uri!r}: async+ storages need asyncio; "
                "use the plain scheme (e.g. redis://), which is driven from a worker thread"
            )
        self._storage_obj = storage
        self._strategy_obj = MovingWindowRateLimiter(storage)
        self._in_memory = isinstance(storage, MemoryStorage)
        return storage

    @property
    def _storage(self) -> Storage:
        storage = self._storage_obj
        if storage is None:
            storage = self._open_storage(self.storage_uri)
        return storage

    @property
    def _strategy(self) -> MovingWindowRateLimiter:
        if self._strategy_obj is None:
            self._open_storage(self.storage_uri)
        assert self._strategy_obj is not None
        return self._strategy_obj

    def _tool_windows(
        self, tool: ToolDefinition, limit: RateLimit
    ) -> tuple[RateLimitItem, _Window | None]:
        cache_key = (tool.name, tool.version, limit)
        cached = self._windows.get(cache_key)
        if cached is not None:
            return cached
        per_session = _item(limit.max_calls, limit.window_s)
        glob: RateLimit | None
        if tool.name in self._overrides:
            glob = parse_global_override(tool.name, self._overrides[tool.name], limit.window_s)
        elif self.global_factor > 0:
            glob = RateLimit(
                max_calls=math.ceil(self.global_factor * limit.max_calls), window_s=limit.window_s
            )
        else:
            glob = None
        global_window = None
        if glob is not None:
            item = _item(glob.max_calls, glob.window_s)
            global_window = _Window(
                item, ("tool", tool.name), f"{item} for {tool.name} across sessions"
            )
        self._windows[cache_key] = (per_session, global_window)
        return per_session, global_window

    async def hit(self, tool: ToolDefinition, session: SessionInfo) -> RateLimitOutcome:
        """Count one call of ``tool`` in ``session``; say whether it may proceed.

        Tools without ``security.rate_limit`` are always allowed and not counted.
        """
        limit = tool.security.rate_limit
        if limit is None:
            return _ALLOWED
        per_session_item, global_window = self._tool_windows(tool, limit)
        windows = [
            _Window(
                per_session_item,
                ("session", session.session_id, tool.name),
                f"{per_session_item} for {tool.name} in this session",
            )
        ]
        if global_window is not None:
            windows.append(global_window)
        try:
            if self._in_memory:
                if time.monotonic() >= self._next_sweep:
                    self.sweep()
                return self._admit(windows)
            # Abandoned when the call's deadline passes: a storage that stalls (Redis that
            # accepts and never answers) held the call for the client's own socket timeout
            # (5 s), past the tool's timeout, and could not be cancelled.
            return await trio.to_thread.run_sync(self._admit, windows, abandon_on_cancel=True)
        except Exception:
            # A storage outage is not the model's fault; the choice is the operator's.
            logger.exception("rate limit storage %s failed", self.storage_uri)
            if self.fail_open:
                return _ALLOWED
            return RateLimitOutcome(
                allowed=False, retry_after_s=1.0, limit="rate limit storage unavailable"
            )

    def sweep(self) -> int:
        """Drop the in-memory windows whose calls have all expired; returns how many.

        ``limits``' memory storage empties a window's list when its calls expire but keeps the
        key for good: one key per (session, tool) ever seen, so a long-lived deck serving many
        sessions grows without bound. This runs every ``_SWEEP_EVERY_S`` seconds from ``hit``.
        """
        self._next_sweep = time.monotonic() + _SWEEP_EVERY_S
        storage = self._storage_obj
        events = getattr(storage, "events", None)
        locks = getattr(storage, "locks", None)
        if not isinstance(events, dict) or locks is None:
            return 0
        now = time.time()
        dropped = 0
        for key in list(events):
            # The storage's own lock for the key: its expiry timer thread works on these too.
            with locks[key]:
                entries = events.get(key)
                if entries and all(getattr(e, "expiry", now + 1) <= now for e in entries[:1]):
                    entries = None  # newest first: if the newest expired, all did
                if not entries:
                    events.pop(key, None)
                    dropped += 1
            if key not in events:
                locks.pop(key, None)
        return dropped

    def _admit(self, windows: list[_Window]) -> RateLimitOutcome:
        for window in windows:
            if not self._strategy.test(window.item, *window.identifiers):
                return self._refusal(window)
        for window in windows:
            if not self._strategy.hit(window.item, *window.identifiers):
                return self._refusal(window)
        return _ALLOWED

    def _refusal(self, window: _Window) -> RateLimitOutcome:
        stats = self._strategy.get_window_stats(window.item, *window.identifiers)
        # reset_time is when the oldest call in the window leaves it, i.e. when a slot frees.
        retry_after = stats.reset_time - time.time()
        if window.item.amount == 0 or retry_after <= 0:
            # A zero limit never frees a slot; an elapsed reset means "try again right away".
            retry_after = float(window.item.get_expiry()) if window.item.amount == 0 else 0.001
        return RateLimitOutcome(allowed=False, retry_after_s=retry_after, limit=window.label)

    async def aclose(self) -> None:
        """Stop the in-memory storage's expiry timer thread (the deck calls this on close)."""
        # A storage never opened has no timer: do not import ``limits`` just to close it.
        timer = getattr(self._storage_obj, "timer", None)
        if timer is not None:
            timer.cancel()

    def reset(self) -> None:
        """Forget every recorded call (all sessions, all tools)."""
        if self._storage_obj is not None:
            self._storage_obj.reset()


def limiter_from_settings(settings: Mapping[str, Any]) -> ToolRateLimiter:
    """Build a :class:`ToolRateLimiter` from the ``[tool.tooldeck.ratelimit]`` table."""
    table = settings.get("ratelimit", {}) or {}
    return ToolRateLimiter(
        storage_uri=str(table.get("storage_uri", "memory://")),
        global_factor=float(table.get("global_factor", DEFAULT_GLOBAL_FACTOR)),
        global_overrides=table.get("global", {}) or {},
        fail_open=bool(table.get("fail_open", True)),
    )
