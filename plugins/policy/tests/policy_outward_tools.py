"""Tool functions the outward-redaction tests (``test_redact_outward.py``) run in the sandbox,
imported BY REFERENCE: this directory is on the workers' ``PYTHONPATH`` (``runner.python_path``).

Not tests. Each function takes ``(arguments, context)``.
"""

from __future__ import annotations

from typing import Any


def report_each(arguments: dict[str, Any], context: Any) -> str:
    """Report one progress message per text, quoting it (a tool echoing what it works on)."""
    texts = list(arguments["texts"])
    for step, text in enumerate(texts, 1):
        context.emit({"progress": step, "total": len(texts), "message": f"working on {text}"})
    return f"{len(texts)} done"
