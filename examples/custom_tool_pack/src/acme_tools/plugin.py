"""The pack's plugin module: tools are declared with @tool and handed to `register`."""

from __future__ import annotations

from tooldeck_hookspecs import hookimpl, tool


@tool(category="text", execution={"cacheable": True, "cache_ttl_s": 600})
def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: the text to count
    """
    return len(text.split())


@tool(
    category="code",
    security={"sandbox": True},  # runs in a separate, memory-capped process
    execution={"timeout_s": 10, "memory_mb": 256},
)
def fibonacci(n: int) -> int:
    """Compute the n-th Fibonacci number.

    Args:
        n: which Fibonacci number (0-based)
    """
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


@hookimpl
def tooldeck_register_tools(register, settings):
    register(word_count)
    register(fibonacci)
