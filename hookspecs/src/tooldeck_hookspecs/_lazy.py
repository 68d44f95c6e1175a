"""Exports of a package that load on first use (PEP 562), for plugins whose entry point is
imported by every ``tooldeck`` command but whose heavy parts only some commands need."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    module_name: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of a package whose ``exports`` (public
    name -> module that defines it, relative to the package like ``"._retriever"``, or
    absolute) are imported when first read::

        __getattr__, __dir__ = lazy_exports(__name__, {"FaissRetriever": "._retriever"})

    A name read once is stored in the package's namespace, so the next read is a plain
    attribute look-up. ``dir()`` lists the lazy names with the loaded ones; any other missing
    name raises :class:`AttributeError` as usual. Keep the names in the package's ``__all__``
    too (and under ``if TYPE_CHECKING:`` imports for type checkers).
    """
    table = dict(exports)

    def __getattr__(name: str) -> Any:
        source = table.get(name)
        if source is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        namespace = sys.modules[module_name].__dict__
        # Relative to the package the module belongs to (itself, for an ``__init__``).
        value = getattr(importlib.import_module(source, namespace.get("__package__")), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*sys.modules[module_name].__dict__, *table})

    return __getattr__, __dir__
