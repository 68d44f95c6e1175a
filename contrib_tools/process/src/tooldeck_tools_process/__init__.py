"""Running programs for tool packs: one child process with a deadline, capped head-and-tail
output, a clean kill of its whole process group, and a JSON description of how it ended.

A library, not a plugin: ``tooldeck-tools-shell`` and ``tooldeck-tools-code`` depend on it.
"""

from __future__ import annotations

from ._run import (
    ANSWER_MARGIN_S,
    LINGER_S,
    Capture,
    Completed,
    LineProgress,
    decode_output,
    default_timeout,
    describe,
    requested_timeout,
    run_process,
    whose_limit,
    within_call,
)

__all__ = [
    "ANSWER_MARGIN_S",
    "Capture",
    "Completed",
    "LINGER_S",
    "LineProgress",
    "decode_output",
    "default_timeout",
    "describe",
    "requested_timeout",
    "run_process",
    "whose_limit",
    "within_call",
]
