"""Cache stage: results of cacheable tools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._markers import hookspec
from ..protocols import Cache


@hookspec(firstresult=True)
def tooldeck_cache(settings: Mapping[str, Any]) -> Cache | None:
    """Provide the result cache.

    Called once at start-up; stops at the first non-None result. The core computes keys with
    :func:`~tooldeck_hookspecs.cache_key`, asks the cache before rate limit and execution, and
    stores only successful results of tools that declare ``execution.cacheable``. Without one,
    nothing is cached.

    :param settings: the whole tooldeck configuration.
    """
