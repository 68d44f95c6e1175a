"""Text a model gets back: bounded, whatever the input was."""

from __future__ import annotations

__all__ = ["shorten"]


def shorten(value: object, limit: int = 200) -> str:
    """``value`` as text of at most about ``limit`` characters, with a marker saying how much
    was cut: an error message echoing a 10 MB argument name back to the model helps nobody.
    Never raises (an object whose ``__str__`` fails is named by its type)."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = str(value)
        except Exception:
            text = f"<unprintable {type(value).__name__}>"
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[+{len(text) - limit} chars]"
