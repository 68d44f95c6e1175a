"""The browser tools' limits and the settings' choices, apart from the tools themselves: the
definitions (read by every ``tooldeck`` command that loads the pack) need them, the tools'
module (Playwright's engine, the sandbox) only a browser call."""

from __future__ import annotations

__all__ = [
    "DEFAULT_ACTION_TIMEOUT_S",
    "DEFAULT_NAVIGATE_TIMEOUT_S",
    "IMAGE_MAX_BYTES",
    "MAX_TIMEOUT_S",
    "SANDBOX_MODES",
    "SCREENSHOT_MAX_OUTPUT_BYTES",
]

#: The browser's sandbox modes (see :mod:`._sandbox`); the plugin's configuration schema names
#: them without loading the sandbox.
SANDBOX_MODES = ("auto", "bwrap", "user", "none")

DEFAULT_NAVIGATE_TIMEOUT_S = 30.0
DEFAULT_ACTION_TIMEOUT_S = 10.0
#: A screenshot's time (measuring the page and capturing it), unless the deployment set the
#: tool's ``execution.timeout_s``.
DEFAULT_SCREENSHOT_TIMEOUT_S = 30.0
#: Upper bound of the ``timeout_s`` arguments (the tools' own execution timeout is above it).
MAX_TIMEOUT_S = 90.0
#: The page tools' own ``execution.timeout_s``: above the largest ``timeout_s`` a model may ask
#: for, so that the tool's own, more precise TIMEOUT answers first.
EXECUTION_TIMEOUT_S = MAX_TIMEOUT_S + 30
#: Screenshots up to this size (raw PNG bytes) come back as an image block too.
IMAGE_MAX_BYTES = 600_000
#: browser_screenshot's ``execution.max_output_bytes``: the inline image counts as its base64
#: (4/3 of the PNG) plus room for the other fields. It used to share the page tools' 400 000,
#: under which a 447 kB screenshot was saved but its call answered OUTPUT_TRUNCATED.
SCREENSHOT_MAX_OUTPUT_BYTES = (IMAGE_MAX_BYTES + 2) // 3 * 4 + 64 * 1024  # base64, and the rest
