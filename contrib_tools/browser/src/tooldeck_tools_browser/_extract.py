"""What a model reads of a page: its main text and its links, extracted in the page.

The main element (``article``, else ``main``, else ``body``) is cloned, stripped of scripts,
styles, navigation and other chrome, and measured with ``innerText`` in an off-screen container,
so block elements still end lines the way the page shows them; then whitespace is collapsed and
the text capped. Links are those of the whole document (navigation links help the model move on),
as absolute http(s) URLs, deduplicated and capped.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "EXTRACT_JS", "MAX_LINKS", "MAX_TEXT_CHARS", "NAVIGATION_REREADS", "PageBusy",
    "PageKeptNavigating", "clean_text", "page_snapshot",
]

#: Cap on the readable text returned, in characters (about 50 kB of text).
MAX_TEXT_CHARS = 50_000
#: Cap on the number of links returned.
MAX_LINKS = 100
#: Largest snapshot, as JSON: the tools' ``max_output_bytes`` (400 000) less room for the other
#: fields of a result (page id, status, blocked requests, closed pages).
MAX_SNAPSHOT_BYTES = 360_000

EXTRACT_JS = r"""
([maxChars, maxLinks]) => {
  const doc = document;
  const root = doc.querySelector('article') || doc.querySelector('main')
    || doc.body || doc.documentElement;
  let text = '';
  if (root) {
    const clone = root.cloneNode(true);
    clone.querySelectorAll(
      'script, style, noscript, template, nav, svg, canvas, iframe, object, embed, head, '
      + '[hidden], [aria-hidden="true"]'
    ).forEach((el) => el.remove());
    const box = doc.createElement('div');
    box.setAttribute('style', 'position:absolute;left:-100000px;top:0;width:1000px;');
    box.appendChild(clone);
    (doc.body || doc.documentElement).appendChild(box);
    try { text = clone.innerText || clone.textContent || ''; } finally { box.remove(); }
  }
  const total = text.length;
  // Leave room for whitespace collapsing on the Python side: cut a little above the cap.
  if (text.length > maxChars * 2) text = text.slice(0, maxChars * 2);
  const seen = new Set();
  const links = [];
  let count = 0;
  for (const a of doc.querySelectorAll('a[href]')) {
    const href = a.href;
    if (!/^https?:/i.test(href) || seen.has(href)) continue;
    seen.add(href);
    count += 1;
    if (links.length < maxLinks) {
      const label = (a.innerText || a.getAttribute('aria-label') || a.title || '')
        .replace(/\s+/g, ' ').trim().slice(0, 200);
      links.push({ text: label, href: href });
    }
  }
  // Title and address of the document read, not of whatever the page shows a moment later.
  return { text: text, text_chars: total, links: links, link_count: count,
           title: doc.title, url: location.href, ready: doc.readyState };
}
"""

_SPACES = re.compile(r"[ \t\f\v\u00a0\u200b]+")
_BLANKS = re.compile(r"\n{3,}")


def clean_text(text: str) -> str:
    """Collapse runs of spaces, trim every line, keep at most one blank line in a row."""
    lines = (_SPACES.sub(" ", line).strip() for line in text.replace("\r", "\n").split("\n"))
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


class PageBusy(Exception):
    """The page's own script kept it busy past the time given to read it."""


class PageKeptNavigating(Exception):
    """The page went on to another document every time it was read (a script redirecting
    without end)."""


#: How many times a page that navigates while it is read is read again (each time once its new
#: document has loaded): a script's redirect after the load event is common (consent pages,
#: client-side routing); a chain longer than this is a loop.
NAVIGATION_REREADS = 5
#: What Playwright says when the document being read was replaced by another.
_NAVIGATED = ("Execution context was destroyed", "navigation")
#: ``document.readyState`` in order, and the state each ``wait_until`` of a navigation stands
#: for: a document read before it got there is one a script's redirect just started.
_READY = {"loading": 0, "interactive": 1, "complete": 2}
_WANTED = {"commit": 0, "domcontentloaded": 1, "load": 2, "networkidle": 2}


#: A title or URL longer than this is cut (and ``title_truncated`` / ``url_truncated`` say so):
#: a 600 kB title lost the whole result to the output cap.
MAX_TITLE_CHARS = 1_000
MAX_URL_CHARS = 4_000


async def page_snapshot(
    page: Any, *, max_chars: int = MAX_TEXT_CHARS, timeout_s: float = 10.0,
    wait_until: str = "load",
) -> dict[str, Any]:
    """Title, URL, readable text (capped, with ``truncated``) and links of ``page``.

    Reading the page runs a script in it, which waits for the page's own scripts: a page that
    loops forever after its load event held the call until the tool's execution timeout (two
    minutes). Past ``timeout_s`` this raises :class:`PageBusy`.

    A script may send the page to another document just after it loaded (consent pages,
    client-side routing): the read then failed ("Execution context was destroyed") or caught
    the new document before it was parsed (its address, an empty title, no text). Either way
    the page is read again once the new document is as far as ``wait_until`` (the navigation's
    own: ``commit`` reads whatever is there), at most :data:`NAVIGATION_REREADS` times (then
    :class:`PageKeptNavigating`), all within ``timeout_s``.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    wanted = _WANTED.get(wait_until, 2)
    for reread in range(NAVIGATION_REREADS + 1):
        try:
            raw = await asyncio.wait_for(page.evaluate(EXTRACT_JS, [max_chars, MAX_LINKS]),
                                         max(deadline - loop.time(), 0.0))
        except TimeoutError:
            raise PageBusy(f"the page's scripts kept it busy for more than {timeout_s:g} s"
                           ) from None
        except Exception as exc:
            if not all(word in str(exc) for word in _NAVIGATED):
                raise
        else:
            if _READY.get(str(raw.get("ready")), 2) >= wanted:
                break
        if reread == NAVIGATION_REREADS:
            raise PageKeptNavigating(
                f"the page went on to another document each of the {reread + 1} times it was "
                f"read (last at {str(page.url)[:MAX_URL_CHARS]!r})")
        # The new document may not have arrived yet: until it commits, Playwright still holds
        # the old one's load state and answers the wait below at once, so on a loaded machine
        # all the rereads went by before a slow server sent it (CI: six reads of a redirect
        # 0 ms after load, all at the old address). A growing pause first, 1.55 s in all.
        await asyncio.sleep(min(0.05 * 2**reread, max(deadline - loop.time(), 0.0)))
        if wanted:
            try:
                await asyncio.wait_for(
                    page.wait_for_load_state("load" if wanted == 2 else "domcontentloaded"),
                    max(deadline - loop.time(), 0.0))
            except TimeoutError:
                raise PageBusy(f"the document the page's script went on to did not load "
                               f"within {timeout_s:g} s") from None
    title = raw.get("title")
    text = clean_text(str(raw.get("text") or ""))
    truncated = len(text) > max_chars or int(raw.get("text_chars") or 0) > max_chars * 2
    if len(text) > max_chars:
        text = text[:max_chars]
    title, url = str(title or ""), str(raw.get("url") or page.url or "")
    snapshot: dict[str, Any] = {
        "title": title[:MAX_TITLE_CHARS],
        "url": url[:MAX_URL_CHARS],
        "text": text,
        "truncated": truncated,
        "links": list(raw.get("links") or []),
        "link_count": int(raw.get("link_count") or 0),
    }
    if len(title) > MAX_TITLE_CHARS:
        snapshot["title_truncated"] = True
    if len(url) > MAX_URL_CHARS:
        snapshot["url_truncated"] = True
    if truncated:
        snapshot["note"] = (
            f"The page text was cut at {max_chars} characters. Use browser_click or a more "
            "specific page (a section link) to read further."
        )
    _fit(snapshot, MAX_SNAPSHOT_BYTES)
    if snapshot["link_count"] > len(snapshot["links"]):
        snapshot["links_truncated"] = True
    return snapshot


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _fit(snapshot: dict[str, Any], budget: int) -> None:
    """Shorten ``snapshot`` until its JSON fits in ``budget`` bytes: last links first, then text.

    The caps above count characters and links, not bytes: 50 000 CJK characters (150 kB) and
    100 links with long tracking URLs made a 456 kB result, over the tools' limit of 400 000
    bytes, and the whole page was dropped with OUTPUT_TRUNCATED instead of coming back cut.
    """
    size = _json_bytes(snapshot)
    links = snapshot["links"]
    while links and size > budget:
        size -= _json_bytes(links.pop()) + 1
    if size > budget:
        text = snapshot["text"]
        # Every character is at least one byte: cutting as many characters as bytes are over
        # is enough.
        snapshot["text"] = text[: max(0, len(text) - (size - budget))]
        snapshot["truncated"] = True
        snapshot["note"] = (
            f"The page text was cut at {len(snapshot['text'])} characters to fit the result's "
            "size limit. Use browser_click or a more specific page (a section link) to read "
            "further."
        )
