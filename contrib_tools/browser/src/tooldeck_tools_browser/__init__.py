"""tooldeck's browser tool pack: ``browser_navigate``, ``browser_click``, ``browser_fill``,
``browser_screenshot`` and ``browser_close``.

One headless Chromium per process (Debian's ``chromium``, driven by Playwright on a background
asyncio thread); one browser context per tooldeck session; every request of every page goes through
a local guarding proxy that applies the URL policy to redirects, subresources and WebSockets too.
Chromium runs inside a sandbox boundary (:mod:`._sandbox`): an unprivileged uid, bubblewrap when
it works, and Chromium's own namespace + seccomp sandbox; ``sandbox = "none"`` opts out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tooldeck_hookspecs._lazy import lazy_exports

from ._definitions import (
    BROWSER_CLICK,
    BROWSER_CLOSE,
    BROWSER_FILL,
    BROWSER_NAVIGATE,
    BROWSER_SCREENSHOT,
    definitions,
)
from ._extract import MAX_LINKS, MAX_TEXT_CHARS, clean_text
from ._guard import allow_list_for, check_url, remember_session_allow

if TYPE_CHECKING:
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
    from ._sandbox import (
        DEFAULT_UID,
        ENV_SANDBOX,
        ENV_UID,
        SANDBOX_MODES,
        BrowserSandbox,
        configure_sandbox,
        prepare_sandbox,
    )
    from .tools import (
        browser_click,
        browser_close,
        browser_fill,
        browser_navigate,
        browser_screenshot,
    )

# Loaded on first use: every ``tooldeck`` command imports this pack to register its tools, and
# the engine (Playwright's thread, the sandbox) is for browser calls only.
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(("DEFAULT_EXECUTABLES", "ENV_EXECUTABLE", "LAUNCH_ARGS", "BrowserEngine",
                     "configure", "engine", "find_executable", "shutdown"), "._engine"),
    **dict.fromkeys(("DEFAULT_UID", "ENV_SANDBOX", "ENV_UID", "SANDBOX_MODES", "BrowserSandbox",
                     "configure_sandbox", "prepare_sandbox"), "._sandbox"),
    **dict.fromkeys(("browser_click", "browser_close", "browser_fill", "browser_navigate",
                     "browser_screenshot"), ".tools"),
})

__all__ = [
    "BROWSER_CLICK",
    "BROWSER_CLOSE",
    "BROWSER_FILL",
    "BROWSER_NAVIGATE",
    "BROWSER_SCREENSHOT",
    "DEFAULT_EXECUTABLES",
    "DEFAULT_UID",
    "ENV_EXECUTABLE",
    "ENV_SANDBOX",
    "ENV_UID",
    "LAUNCH_ARGS",
    "MAX_LINKS",
    "MAX_TEXT_CHARS",
    "SANDBOX_MODES",
    "BrowserEngine",
    "BrowserSandbox",
    "allow_list_for",
    "browser_click",
    "browser_close",
    "browser_fill",
    "browser_navigate",
    "browser_screenshot",
    "check_url",
    "clean_text",
    "configure",
    "configure_sandbox",
    "definitions",
    "engine",
    "find_executable",
    "prepare_sandbox",
    "remember_session_allow",
    "shutdown",
]
