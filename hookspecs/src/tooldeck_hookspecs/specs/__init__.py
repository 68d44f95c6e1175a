"""Hook specifications, one module per stage.

The core adds every module listed in :data:`SPEC_MODULES`. A third-party distribution may add hooks
of its own by pointing an entry point of the ``tooldeck`` group at a module of hookspecs.
"""

from __future__ import annotations

from types import ModuleType

from . import (
    authorize,
    bench,
    cache,
    commands,
    evaluate,
    execute,
    filter,
    observe,
    register,
)

#: Every stage's hookspec module, in pipeline order; then the command line, evaluation, benchmarks.
SPEC_MODULES: tuple[ModuleType, ...] = (
    register,
    filter,
    authorize,
    cache,
    execute,
    observe,
    commands,
    evaluate,
    bench,
)

__all__ = [
    "SPEC_MODULES",
    "register",
    "filter",
    "authorize",
    "cache",
    "execute",
    "observe",
    "commands",
    "evaluate",
    "bench",
]
