"""Model output rendering in the browser: markdown through the sanitiser, inert HTML."""

from __future__ import annotations

from typing import Any

import pytest

from tests.ui.pages import watch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE = """Here you go <img src=x onerror=alert(1)> and <script>alert(2)</script>

![tracker](http://203.0.113.9/pixel.png) [docs](https://example.org/page) [bad](javascript:alert(3))

<a href="https://example.org" onclick="alert(4)">raw link</a>

```python
def f(x):
    return x * 2
```
"""

RENDER = """async (text) => {
  const m = await import('/static/js/app/markdown.js');
  const box = document.createElement('div');
  box.id = 'rendered';
  box.className = 'msg-body';
  box.append(m.renderMarkdown(text));
  document.body.append(box);
  await new Promise((r) => setTimeout(r, 300));
  return {
    html: box.innerHTML,
    images: box.querySelectorAll('img').length,
    scripts: box.querySelectorAll('script').length,
    handlers: [...box.querySelectorAll('*')]
      .filter((n) => [...n.attributes].some((a) => a.name.startsWith('on'))).length,
    links: [...box.querySelectorAll('a')]
      .map((a) => ({href: a.getAttribute('href'), rel: a.rel, target: a.target})),
    code: box.querySelector('pre code') ? box.querySelector('pre code').className : null,
    keywords: box.querySelectorAll('pre code .hljs-keyword').length,
    copy: box.querySelectorAll('pre .code-copy').length,
  };
}"""


def test_hostile_model_output_renders_inert(asgi_server: str, ui_context: Any) -> None:
    page = ui_context.new_page()
    watched = watch(page)
    page.goto(f"{asgi_server}/accounts/login/")
    before = len(watched.requests)

    out = page.evaluate(RENDER, HOSTILE)

    assert watched.dialogs == []
    assert out["images"] == 0
    assert out["scripts"] == 0
    assert out["handlers"] == 0
    assert "&lt;img src=x onerror=alert(1)&gt;" in out["html"]
    assert "[image: tracker]" in out["html"]
    assert {
        "href": "https://example.org/page",
        "rel": "noopener noreferrer",
        "target": "_blank",
    } in out["links"]
    # A refused address leaves the link's text as plain text, not a link to nowhere.
    assert all(link["href"].startswith("https://") for link in out["links"])
    assert ">bad<" not in out["html"]
    assert " bad" in out["html"]
    assert out["code"] == "hljs language-python"
    assert out["keywords"] >= 2
    assert out["copy"] == 1
    new_requests = watched.requests[before:]
    assert [url for url in new_requests if not url.startswith(asgi_server)] == []
    assert watched.csp_violations() == []
