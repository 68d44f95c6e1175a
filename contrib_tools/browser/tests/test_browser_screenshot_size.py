"""A screenshot small enough to come back as an inline image comes back, not OUTPUT_TRUNCATED.

browser_screenshot inlined PNGs up to 600 000 bytes, "under the tool's output cap", but its
``execution.max_output_bytes`` was the page tools' 400 000: the image counts as its base64, so a
447 kB screenshot of a noisy page was saved and its call answered OUTPUT_TRUNCATED. Real
Chromium, real deck.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tooldeck_tools_browser import BROWSER_SCREENSHOT
from tooldeck_tools_browser.tools import IMAGE_MAX_BYTES

from tooldeck.testing import make_deck

ENTRY_POINTS = ["schema", "runner", "policy", "browser"]

#: A canvas of pseudo-random pixels: PNG cannot compress it, about 3 bytes a pixel (~430 kB).
NOISE = b"""<html><body style='margin:0'><canvas id=c width=380 height=380></canvas><script>
const c = document.getElementById('c').getContext('2d'), d = c.createImageData(380, 380);
let s = 12345;
for (let i = 0; i < d.data.length; i++) {
  s = (s * 1103515245 + 12345) & 0x7fffffff; d.data[i] = i % 4 == 3 ? 255 : (s >> 16) & 255;
}
c.putImageData(d, 0, 0);</script></body></html>"""


def test_the_inline_image_fits_in_the_tools_result_limit():
    base64_size = (IMAGE_MAX_BYTES + 2) // 3 * 4
    assert BROWSER_SCREENSHOT.execution.max_output_bytes > base64_size + 10_000


@pytest.fixture
def noise_site(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("TOOLDECK_URL_ALLOW", "127.0.0.1")

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(NOISE)))
            self.end_headers()
            self.wfile.write(NOISE)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.chromium
async def test_a_large_inline_screenshot_comes_back(noise_site: str, tmp_path: Path) -> None:
    async with make_deck(load_entry_points=ENTRY_POINTS) as deck:
        session = deck.session(workdir=str(tmp_path), grants={"browser"}, max_level="moderate")
        page = await session.call("browser_navigate", {"url": noise_site})
        assert page.success, page.error
        shot = await session.call("browser_screenshot", {"page_id": page.data["page_id"],
                                                         "path": "noise.png"})
    size = (tmp_path / "noise.png").stat().st_size
    assert 400_000 * 3 // 4 < size <= IMAGE_MAX_BYTES, size  # the case the old limit dropped
    assert shot.success, shot.error
    assert shot.data["bytes"] == size and "image" in shot.data
