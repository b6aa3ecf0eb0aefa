"""Search across chats in the browser (issue budget: a query over 10,000 messages ≤ 100 ms).

Serves ``static/`` over loopback, opens a page in headless Chromium (Playwright) that
imports the app's search index (``static/js/app/search_index.js``, the module the chat
search runs), and there generates ``--messages`` synthetic messages in ``--chats`` chats
(10-120 words each from a Zipf-distributed vocabulary of 20,000 made-up words, one word
in eight with a diacritic, a title per chat), indexes them and runs ``--queries`` queries:
one, two or three adjacent words of a random message, each whole or as a 3-5 letter
prefix, in capitals or without its diacritics. Each query's time is
``performance.now()`` around ``SearchIndex.search``, highlight ranges of the first 50
results included; the first query after indexing also sorts the token list.

Prints:

    chat_search_messages: …           messages indexed
    chat_search_index_build_ms: … ms  indexing them (and the chats' titles)
    chat_search_p50_ms: … ms          one query
    chat_search_p95_ms: … ms
    chat_search_max_ms: … ms
    chat_search_results_p50: …        results per query (at most 50)

Usage: ``.venv/bin/python bench/chat_search.py [--messages 10000] [--chats 500]
[--queries 50]``
"""

from __future__ import annotations

import argparse
import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

STATIC = Path(__file__).resolve().parent.parent / "static"
CHROMIUM = "/usr/bin/chromium"
PAGE = b"""<!doctype html><meta charset="utf-8"><title>chat search bench</title>
<script type="module">
import { SearchIndex } from "/js/app/search_index.js";
window.SearchIndex = SearchIndex;
document.title = "ready";
</script>"""

# The page side, a function Playwright evaluates (its header comment left out, so the
# text starts with the function): generate, index, query, time.
BENCH = "\n".join(
    line
    for line in (Path(__file__).resolve().parent / "chat_search.js").read_text().splitlines()
    if not line.startswith("//")
)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _serve() -> ThreadingHTTPServer:
    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/":
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(PAGE)))
                self.end_headers()
                self.wfile.write(PAGE)
                return
            super().do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(STATIC))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--chats", type=int, default=500)
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    server = _serve()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
            page.wait_for_function("document.title === 'ready'")
            figures = page.evaluate(
                BENCH, {"messages": args.messages, "chats": args.chats, "queries": args.queries}
            )
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    times = figures["times"]
    print(f"chat_search_messages: {figures['indexed'] - args.chats}")
    print(f"chat_search_index_build_ms: {figures['buildMs']:.1f} ms")
    print(f"chat_search_p50_ms: {_percentile(times, 0.5):.2f} ms")
    print(f"chat_search_p95_ms: {_percentile(times, 0.95):.2f} ms")
    print(f"chat_search_max_ms: {max(times):.2f} ms")
    print(f"chat_search_results_p50: {_percentile(figures['counts'], 0.5):.0f}")


if __name__ == "__main__":
    main()
