"""The ``[tool.tooldeck.runner]`` table, parsed once at start-up."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from tooldeck_hookspecs import ConfigError

__all__ = ["RunnerSettings"]

SandboxMode = Literal["auto", "bubblewrap", "process"]
_MODES = ("auto", "bubblewrap", "process")

#: Calls in flight per category unless configured: a browser page and a shell are heavy, so they
#: get few slots; everything else shares a generous default.
DEFAULT_CONCURRENCY: dict[str, int] = {"default": 16, "browser": 3, "shell": 5, "code": 4}


@attrs.frozen(kw_only=True)
class RunnerSettings:
    """Settings of the runner (all optional).

    ``concurrency`` maps a category to its number of concurrent calls; ``default`` covers the
    others. ``sandbox`` picks the isolation of sandboxed tools: ``auto`` (bubblewrap when
    ``bwrap`` is installed, else a plain process with a warning), ``bubblewrap`` or ``process``.
    ``warm_workers`` is the number of pre-started workers kept per mount set (workdir, writable,
    network); ``max_warm_keys`` bounds the number of such sets. ``python_path`` adds directories
    to the workers' ``PYTHONPATH`` (mounted read-only in the sandbox) so that tools outside
    site-packages can be imported by reference. ``uid``/``gid``: what a root deck's sandboxed code
    runs as on the host (id-mapped workdir; ``uid = "deck"`` keeps the deck's own uid).
    """

    concurrency: Mapping[str, int] = attrs.field(factory=lambda: dict(DEFAULT_CONCURRENCY))
    sandbox: SandboxMode = "auto"
    warm_workers: int = 2
    max_warm_keys: int = 4
    python_path: tuple[str, ...] = ()
    python: str = sys.executable
    extra_ro_binds: tuple[str, ...] = ()
    file_size_mb: int = 64
    max_open_files: int = 256
    #: Opt-in to plain-process isolation when ``sandbox = "auto"`` finds no bubblewrap (without
    #: it, sandboxed tools are refused there).
    allow_degraded: bool = False
    #: Processes (and threads) of one call, all together (cgroup ``pids.max``).
    max_processes: int = 256
    #: Size of the call's private ``/tmp`` (a tmpfs), in MiB.
    tmp_size_mb: int = 64
    #: Growth of the workdir's file system one writing call may cause, in MiB.
    workdir_write_mb: int = 256
    #: Files and folders (inodes) one writing call may add to the workdir's file system.
    workdir_max_new_entries: int = 200_000
    #: Per-call cgroups (memory, pids) when the machine allows them; off: per-process rlimits.
    cgroups: bool = True
    #: The sandbox's seccomp filter (setuid bits, Unix sockets without network, io_uring).
    seccomp: bool = True
    #: Serve a session's sandboxed calls by forking per call inside one long-lived sandbox per
    #: (session, mount set), a zygote: each call in its own user, mount (fresh /tmp), PID, IPC,
    #: UTS and network namespaces, its own /proc and its own cgroup (see the README). Needs
    #: bubblewrap and per-call cgroups; otherwise, and when off, every call gets a single-use
    #: worker.
    zygote: bool = True
    #: Linux: run a quick sync tool's worker thread on the CPU of the event loop that waits for
    #: it, and hold a loop seen moving between CPUs on that CPU during such waits (see the
    #: executor's docstring); off: the OS places both freely.
    pin_sync_threads: bool = True
    #: The host uid sandboxed code runs as when the deck is root (id-mapped workdir, see the
    #: README); ``None`` (``uid = "deck"`` in TOML): the deck's own uid, as uid 0 inside.
    uid: int | None = 65534
    #: Its gid; ``None``: the same number as ``uid``.
    gid: int | None = None
    retry_initial_s: float = 1.0
    retry_max_s: float = 8.0
    retry_jitter_s: float = 0.5
    #: How long a sync tool that had called ``ToolContext.commit()`` when its call timed out or
    #: was cancelled is waited for, so that its real result is reported (past it: a failure
    #: saying the change may have landed).
    commit_grace_s: float = 5.0
    #: An in-process tool step that holds the event loop longer than this (``async def`` code
    #: between two awaits, or a ``@nonblocking`` function) is reported by the executor's
    #: watchdog, once per tool (see the README, "Tools that block the event loop"); 0: no
    #: watchdog.
    loop_block_warn_s: float = 0.5
    #: Once a tool was seen holding the loop, run its later calls off the loop (a worker
    #: thread; an ``async def`` under a ``trio.run`` of its own there); false: report only.
    contain_loop_blockers: bool = True

    @property
    def default_limit(self) -> int:
        """The concurrency of categories not named in ``concurrency``."""
        return self.concurrency.get("default", 16)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None) -> RunnerSettings:
        """Read ``settings["runner"]``; raise :class:`ConfigError` naming a bad key."""
        table = dict((settings or {}).get("runner", {}) or {})
        kw: dict[str, Any] = {}
        known = {f.name for f in attrs.fields(cls)}
        unknown = set(table) - known
        if unknown:
            raise ConfigError(
                f"[tool.tooldeck.runner]: unknown key(s) {sorted(unknown)}; known: {sorted(known)}"
            )
        if "concurrency" in table:
            conc = table["concurrency"]
            if not isinstance(conc, Mapping) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in conc.values()
            ):
                raise ConfigError(
                    "[tool.tooldeck.runner].concurrency must map categories to integers >= 1"
                )
            kw["concurrency"] = {**DEFAULT_CONCURRENCY, **{str(k): int(v) for k, v in conc.items()}}
        if "sandbox" in table:
            if table["sandbox"] not in _MODES:
                raise ConfigError(
                    f"[tool.tooldeck.runner].sandbox must be one of {_MODES}, "
                    f"not {table['sandbox']!r}"
                )
            kw["sandbox"] = table["sandbox"]
        for name in ("allow_degraded", "cgroups", "seccomp", "zygote", "pin_sync_threads",
                     "contain_loop_blockers"):
            if name in table:
                if not isinstance(table[name], bool):
                    raise ConfigError(f"[tool.tooldeck.runner].{name} must be true or false")
                kw[name] = table[name]
        for name in ("max_processes", "tmp_size_mb", "workdir_write_mb",
                     "workdir_max_new_entries"):
            if name in table:
                value = table[name]
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ConfigError(f"[tool.tooldeck.runner].{name} must be an integer >= 1")
                kw[name] = value
        for name in ("warm_workers", "max_warm_keys", "file_size_mb", "max_open_files"):
            if name in table:
                value = table[name]
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise ConfigError(f"[tool.tooldeck.runner].{name} must be an integer >= 0")
                kw[name] = value
        for name in ("retry_initial_s", "retry_max_s", "retry_jitter_s", "commit_grace_s",
                     "loop_block_warn_s"):
            if name in table:
                value = table[name]
                if not isinstance(value, int | float) or value < 0:
                    raise ConfigError(f"[tool.tooldeck.runner].{name} must be a number >= 0")
                kw[name] = float(value)
        for name in ("python_path", "extra_ro_binds"):
            if name in table:
                value = table[name]
                if isinstance(value, str):
                    value = [value]
                kw[name] = tuple(str(v) for v in value)
        if "python" in table:
            kw["python"] = str(table["python"])
        for name in ("uid", "gid"):
            if name not in table:
                continue
            value = table[name]
            if name == "uid" and value == "deck":
                kw["uid"] = None
                continue
            # 0 would make the sandbox the host's root again; ids past 2**32-2 do not exist.
            if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**32 - 1:
                also = ' or "deck"' if name == "uid" else ""
                raise ConfigError(
                    f"[tool.tooldeck.runner].{name} must be an integer from 1 to 4294967294"
                    f"{also}, not {value!r}"
                )
            kw[name] = value
        return cls(**kw)
