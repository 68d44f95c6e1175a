"""The catalog: registered tools by name and by category, with their compiled validators."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tooldeck_hookspecs import ArgumentValidator, ToolDefinition

__all__ = ["ToolCatalog"]


class ToolCatalog:
    """Registered tools (implements the contract's ``Catalog`` protocol).

    Insertion order is kept; it is the order tools were registered in.
    """

    def __init__(self) -> None:
        self._tools: dict[str, ToolDefinition] = {}
        self._validators: dict[str, ArgumentValidator] = {}

    def get(self, name: str) -> ToolDefinition | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    def validator(self, name: str) -> ArgumentValidator | None:
        """The compiled argument validator of ``name``, or None when no plugin compiles one."""
        return self._validators.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolDefinition]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        """Every registered name, in registration order."""
        return list(self._tools)

    def by_category(self, category: str) -> Sequence[ToolDefinition]:
        """Tools of one category, in registration order."""
        return [t for t in self._tools.values() if t.category == category]

    def categories(self) -> Sequence[str]:
        """Every category that has at least one tool, sorted."""
        return sorted({t.category for t in self._tools.values()})

    def add(self, tool: ToolDefinition, validator: ArgumentValidator | None) -> None:
        """Add or replace a tool (the register stage has already validated it)."""
        self._tools[tool.name] = tool
        if validator is None:
            self._validators.pop(tool.name, None)
        else:
            self._validators[tool.name] = validator

    def remove(self, name: str) -> ToolDefinition | None:
        """Remove a tool; return it, or None when it was not registered."""
        self._validators.pop(name, None)
        return self._tools.pop(name, None)
