"""What a ``ToolContext.emit`` event may carry, shared by the deck and its sandbox workers."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ._text import shorten

__all__ = ["PROGRESS_MESSAGE_MAX", "clean_progress"]

#: A progress message longer than this (characters) is shortened (a tool printing a huge line).
PROGRESS_MESSAGE_MAX = 1000


def clean_progress(event: object) -> dict[str, Any]:
    """``event`` as a progress event: finite ``progress`` / ``total`` numbers and a shortened
    ``message``; anything else is dropped, and a non-mapping becomes the message."""
    if not isinstance(event, Mapping):
        event = {"message": str(event)}
    clean: dict[str, Any] = {}
    for key in ("progress", "total"):
        value = event.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            clean[key] = value
    message = event.get("message")
    if message is not None:
        clean["message"] = shorten(str(message), PROGRESS_MESSAGE_MAX)
    return clean
