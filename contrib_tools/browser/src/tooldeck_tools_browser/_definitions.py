"""The ToolDefinitions of the browser pack: schemas and descriptions written for a model."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from tooldeck_hookspecs import (
    ExecutionConfig,
    SecurityConfig,
    SecurityLevel,
    ToolContext,
    ToolDefinition,
    ToolResult,
)

from ._extract import MAX_LINKS, MAX_TEXT_CHARS
from ._limits import (
    DEFAULT_ACTION_TIMEOUT_S,
    DEFAULT_NAVIGATE_TIMEOUT_S,
    EXECUTION_TIMEOUT_S,
    MAX_TIMEOUT_S,
    SCREENSHOT_MAX_OUTPUT_BYTES,
)

__all__ = [
    "BROWSER_CLICK",
    "BROWSER_CLOSE",
    "BROWSER_FILL",
    "BROWSER_NAVIGATE",
    "BROWSER_SCREENSHOT",
    "definitions",
]

_PAGE_ID = {
    "type": "string",
    "minLength": 1,
    "description": "The page_id returned by browser_navigate.",
}


_Tool = Callable[[Mapping[str, Any], ToolContext], Coroutine[Any, Any, ToolResult]]


def _on_first_call(name: str) -> _Tool:
    """``tools.<name>``, imported at the tool's first call: every ``tooldeck`` command loads
    this pack to list its tools, and the tools' module brings Playwright's engine and the
    sandbox (about 14 ms of a 230 ms ``tooldeck call file_read``)."""

    async def call(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        function: _Tool = getattr(importlib.import_module(f"{__package__}.tools"), name)
        return await function(arguments, context)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"Runs ``tooldeck_tools_browser.tools.{name}`` (imported on first call)."
    return call


def _timeout(default: float) -> dict[str, object]:
    return {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": MAX_TIMEOUT_S,
        "default": default,
        "description": "Give up after this many seconds.",
    }


def _security(level: SecurityLevel, **kw: object) -> SecurityConfig:
    # network: the tools talk to the web (a sandbox would have to allow it).
    return SecurityConfig(level=level, network=True, **kw)  # type: ignore[arg-type]


_EXECUTION = ExecutionConfig(timeout_s=EXECUTION_TIMEOUT_S, max_output_bytes=400_000)
#: The cacheable tools that read the workdir (the fs pack's), whose cached results a write there
#: makes stale; the same list file_write and shell_exec declare.
_WORKDIR_READERS = ("file_read", "list_dir")

BROWSER_NAVIGATE = ToolDefinition(
    name="browser_navigate",
    version="1.0.0",
    category="browser",
    description=(
        "Open a web page in a real browser (headless Chromium, JavaScript on) and read it: "
        "returns the page title, final URL after redirects, HTTP status, the main readable "
        f"text (scripts, styles and navigation removed; cut at {MAX_TEXT_CHARS // 1000} k "
        "characters with truncated: true) and the page's links as absolute URLs "
        f"(first {MAX_LINKS}, with link_count). Returns a page_id to click, fill, screenshot "
        "or close the page with the other browser_ tools; pass page_id to load a new URL in "
        "an open page. Use it for pages that need JavaScript or interaction; only public "
        "http(s) URLs."
    ),
    parameters={
        "type": "object",
        "properties": {
            "url": {"type": "string", "minLength": 1, "maxLength": 8192,
                    "description": "The http(s) URL to open, e.g. 'https://example.com/docs'."},
            "page_id": {**_PAGE_ID, "description": "Load the URL in this open page instead of "
                        "a new one (keeps its cookies and history)."},
            "wait_until": {"type": "string", "enum": ["load", "domcontentloaded", "networkidle"],
                           "default": "load",
                           "description": "When the page counts as loaded: 'load' (default), "
                           "'domcontentloaded' (faster), 'networkidle' (for pages that fetch "
                           "their content late)."},
            "timeout_s": _timeout(DEFAULT_NAVIGATE_TIMEOUT_S),
        },
        "required": ["url"],
        "additionalProperties": False,
    },
    security=_security(SecurityLevel.MODERATE, url_params=("url",)),
    execution=_EXECUTION,
    execute=_on_first_call("browser_navigate"),
    entrypoint="tooldeck_tools_browser.tools:browser_navigate",
    call_style="mapping",
    tags=("web", "page", "open", "browse", "website", "read", "url", "javascript"),
)

BROWSER_CLICK = ToolDefinition(
    name="browser_click",
    version="1.0.0",
    category="browser",
    description=(
        "Click an element of an open browser page (a link, button, checkbox, ...), found by "
        "CSS selector or by its visible text, then return the page as it is afterwards "
        "(title, URL, text, links), following any navigation the click started."
    ),
    parameters={
        "type": "object",
        "properties": {
            "page_id": _PAGE_ID,
            "selector": {"type": "string", "minLength": 1,
                         "description": "CSS selector, e.g. 'button[type=submit]' or '#next'."},
            "text": {"type": "string", "minLength": 1,
                     "description": "Visible text of the element to click, e.g. 'Sign in'."},
            "timeout_s": _timeout(DEFAULT_ACTION_TIMEOUT_S),
        },
        "required": ["page_id"],
        "additionalProperties": False,
    },
    security=_security(SecurityLevel.MODERATE),
    execution=_EXECUTION,
    execute=_on_first_call("browser_click"),
    entrypoint="tooldeck_tools_browser.tools:browser_click",
    call_style="mapping",
    tags=("web", "click", "button", "link", "press", "submit"),
)

BROWSER_FILL = ToolDefinition(
    name="browser_fill",
    version="1.0.0",
    category="browser",
    description=(
        "Type a value into a form field (input, textarea or editable element) of an open "
        "browser page, replacing what it held. Find the field by CSS selector, e.g. "
        "'input[name=q]' or '#email'; submit with browser_click on the form's button."
    ),
    parameters={
        "type": "object",
        "properties": {
            "page_id": _PAGE_ID,
            "selector": {"type": "string", "minLength": 1,
                         "description": "CSS selector of the field."},
            "value": {"type": "string", "maxLength": 100_000,
                      "description": "The text to put in the field."},
            "timeout_s": _timeout(DEFAULT_ACTION_TIMEOUT_S),
        },
        "required": ["page_id", "selector", "value"],
        "additionalProperties": False,
    },
    security=_security(SecurityLevel.MODERATE),
    execution=_EXECUTION,
    execute=_on_first_call("browser_fill"),
    entrypoint="tooldeck_tools_browser.tools:browser_fill",
    call_style="mapping",
    tags=("web", "form", "type", "input", "fill", "field"),
)

BROWSER_SCREENSHOT = ToolDefinition(
    name="browser_screenshot",
    version="1.0.0",
    category="browser",
    description=(
        "Save a PNG screenshot of an open browser page into the working directory (the "
        "visible window, or the whole page with full_page). Returns the file's path, size, "
        "pixel dimensions and the picture itself as an image."
    ),
    parameters={
        "type": "object",
        "properties": {
            "page_id": _PAGE_ID,
            "path": {"type": "string", "minLength": 1, "default": "screenshot.png",
                     "pattern": r"\.[pP][nN][gG]$",
                     "description": "Where to save it, relative to the working directory, "
                     "ending in .png (e.g. 'shots/home.png')."},
            "full_page": {"type": "boolean", "default": False,
                          "description": "Capture the whole scrollable page, not just the "
                          "visible window."},
        },
        "required": ["page_id"],
        "additionalProperties": False,
    },
    security=_security(SecurityLevel.MODERATE, path_params=("path",),
                       allowed_paths=("{workdir}",), writes_workdir=True),
    # The PNG replaces whatever file was at the path: a cached file_read (or listing) of it
    # would answer with the previous picture.
    execution=ExecutionConfig(timeout_s=_EXECUTION.timeout_s,
                              max_output_bytes=SCREENSHOT_MAX_OUTPUT_BYTES,
                              invalidates=_WORKDIR_READERS),
    execute=_on_first_call("browser_screenshot"),
    entrypoint="tooldeck_tools_browser.tools:browser_screenshot",
    call_style="mapping",
    tags=("web", "screenshot", "image", "capture", "png", "picture"),
)

BROWSER_CLOSE = ToolDefinition(
    name="browser_close",
    version="1.0.0",
    category="browser",
    description=(
        "Close an open browser page when you are done with it (a session keeps at most a few "
        "pages open; the oldest is closed first when more are opened)."
    ),
    parameters={
        "type": "object",
        "properties": {"page_id": _PAGE_ID},
        "required": ["page_id"],
        "additionalProperties": False,
    },
    security=_security(SecurityLevel.SAFE),
    execution=ExecutionConfig(timeout_s=30.0),
    execute=_on_first_call("browser_close"),
    entrypoint="tooldeck_tools_browser.tools:browser_close",
    call_style="mapping",
    tags=("web", "close", "page", "tab"),
)


def definitions() -> tuple[ToolDefinition, ...]:
    """The five tools of the pack, in registration order."""
    return (BROWSER_NAVIGATE, BROWSER_CLICK, BROWSER_FILL, BROWSER_SCREENSHOT, BROWSER_CLOSE)
