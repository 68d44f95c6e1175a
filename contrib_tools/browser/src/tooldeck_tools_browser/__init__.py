"""tooldeck's browser tool pack: ``browser_navigate``, ``browser_click``, ``browser_fill``,
``browser_screenshot`` and ``browser_close``.

One headless Chromium per process (Debian's ``chromium``, driven by Playwright on a background
asyncio thread); one browser context per tooldeck session; every request of every page goes through
a local guarding proxy that applies the URL policy to redirects, subresources and WebSockets too.
"""

from __future__ import annotations

from ._definitions import (
    BROWSER_CLICK,
    BROWSER_CLOSE,
    BROWSER_FILL,
    BROWSER_NAVIGATE,
    BROWSER_SCREENSHOT,
    definitions,
)
from ._engine import (
    DEFAULT_EXECUTABLES,
    ENV_EXECUTABLE,
    LAUNCH_ARGS,
    BrowserEngine,
    configure,
    engine,
    find_executable,
    shutdown,
)
from ._extract import MAX_LINKS, MAX_TEXT_CHARS, clean_text
from ._guard import allow_list_for, check_url, remember_session_allow
from .tools import (
    browser_click,
    browser_close,
    browser_fill,
    browser_navigate,
    browser_screenshot,
)

__all__ = [
    "BROWSER_CLICK",
    "BROWSER_CLOSE",
    "BROWSER_FILL",
    "BROWSER_NAVIGATE",
    "BROWSER_SCREENSHOT",
    "DEFAULT_EXECUTABLES",
    "ENV_EXECUTABLE",
    "LAUNCH_ARGS",
    "MAX_LINKS",
    "MAX_TEXT_CHARS",
    "BrowserEngine",
    "allow_list_for",
    "browser_click",
    "browser_close",
    "browser_fill",
    "browser_navigate",
    "browser_screenshot",
    "check_url",
    "clean_text",
    "configure",
    "definitions",
    "engine",
    "find_executable",
    "remember_session_allow",
    "shutdown",
]
