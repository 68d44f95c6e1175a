"""Which isolation ``runner.sandbox`` gives on this machine, and the one-time warning when it is
weaker than bubblewrap.

Kept apart from :mod:`._sandbox` so that a deck checks (and warns) at start-up without importing
the sandbox machinery: a deck, or a ``tooldeck call``, that never runs a sandboxed tool does not
pay for it (about 12 ms of class creation at import).
"""

from __future__ import annotations

import logging

from tooldeck_hookspecs import host_which

__all__ = [
    "ISOLATION_BWRAP",
    "ISOLATION_PROCESS",
    "ISOLATION_UNAVAILABLE",
    "resolve_isolation",
    "warn_isolation",
]

logger = logging.getLogger("tooldeck.runner")

ISOLATION_BWRAP = "bubblewrap"
ISOLATION_PROCESS = "process (degraded isolation)"
#: ``sandbox = "auto"`` on a machine without bubblewrap and without ``allow_degraded``.
ISOLATION_UNAVAILABLE = "none (bubblewrap is not installed)"

_warned_degraded = False


def resolve_isolation(mode: str, allow_degraded: bool = False) -> str:
    """The isolation a ``runner.sandbox`` mode gives on this machine.

    ``"process"`` is an explicit opt-in to degraded isolation. ``"auto"`` without bubblewrap
    gives :data:`ISOLATION_UNAVAILABLE` (sandboxed tools are refused) unless ``allow_degraded``.
    """
    if mode == "process":
        return ISOLATION_PROCESS
    if host_which("bwrap"):
        return ISOLATION_BWRAP
    if mode == "bubblewrap":
        from tooldeck_hookspecs import ConfigError

        raise ConfigError(
            "runner.sandbox = 'bubblewrap' but `bwrap` is not installed "
            "(apt-get install bubblewrap)"
        )
    return ISOLATION_PROCESS if allow_degraded else ISOLATION_UNAVAILABLE


def warn_isolation(isolation: str) -> None:
    """Log, once per process, that sandboxed tools will be refused or weakly isolated."""
    global _warned_degraded
    if _warned_degraded or isolation == ISOLATION_BWRAP:
        return
    if isolation == ISOLATION_UNAVAILABLE:
        _warned_degraded = True
        logger.warning(
            "tooldeck-runner: bubblewrap (bwrap) is not installed; sandboxed tools will be "
            "refused. Install bubblewrap, or opt into degraded isolation with "
            "[tool.tooldeck.runner] sandbox = \"process\" or allow_degraded = true."
        )
    elif isolation == ISOLATION_PROCESS:
        _warned_degraded = True
        logger.warning(
            "tooldeck-runner: bubblewrap (bwrap) is not in use; sandboxed tools run as plain "
            "processes with resource limits only (degraded isolation: no filesystem, network "
            "or PID isolation). Install bubblewrap for real isolation."
        )
