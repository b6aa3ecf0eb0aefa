"""Light and dark screenshots of the conversation view, checked for real content.

The screenshots go to ``$OPENMATES_UI_SCREENSHOTS`` when set (to look at them), else to
the test's temporary directory.
"""

from __future__ import annotations

import os
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageStat

from accounts.models import SignupPolicy
from instances.models import Instance
from tests.ui.pages import new_user
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ANSWER = ["Here is code:\n\n", "```python\n", "def double(x):\n", "    return x * 2\n", "```\n"]


def _shot(page: Any, scheme: str, path: Any) -> Image.Image:
    page.emulate_media(color_scheme=scheme)
    page.wait_for_timeout(100)
    data = page.locator("#app").screenshot(path=str(path))
    return Image.open(BytesIO(data)).convert("RGB")


def _brightness(image: Image.Image) -> float:
    return float(ImageStat.Stat(image.convert("L")).mean[0])


@pytest.mark.parametrize("width", [1280, 390])
def test_conversation_in_light_and_dark(
    asgi_server: str, ui_llm: UIModelServer, ui_browser: Any, tmp_path: Any, width: int
) -> None:
    ui_llm.reset()
    instance = Instance.objects.create(slug="home", name="Home")
    SignupPolicy.objects.create(instance=instance, open_signup=True)
    ui_llm.queue(Turn(pieces=ANSWER))
    context = ui_browser.new_context(viewport={"width": width, "height": 800})
    page = context.new_page()
    new_user(page, asgi_server, f"theme{width}")
    page.wait_for_selector("#conn[data-state=open]")
    page.fill("#composer-input", "Show me code")
    page.press("#composer-input", "Enter")
    page.wait_for_selector(".msg-assistant pre code .hljs-keyword")

    out = Path(os.environ.get("OPENMATES_UI_SCREENSHOTS") or tmp_path)
    light = _shot(page, "light", out / f"light-{width}.png")
    dark = _shot(page, "dark", out / f"dark-{width}.png")
    context.close()

    for image in (light, dark):
        assert image.width >= width * 0.9
        colours = image.getcolors(maxcolors=1_000_000) or []
        assert len(colours) > 20  # text, code colours, borders: not a blank page
        assert max(ImageStat.Stat(image).stddev) > 10
    assert _brightness(light) > 170
    assert _brightness(dark) < 90
