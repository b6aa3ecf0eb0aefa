"""Readable buttons: the Stop button's label against its background, at rest and under
the pointer, meets WCAG AA (4.5:1) in the light and the dark theme."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import SignupPolicy
from instances.models import Instance
from tests.ui.pages import new_user
from tests.ui.test_chat import send
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# WCAG 2 contrast of the element's text colour on its background colour (both opaque here).
CONTRAST = """
(element) => {
  const rgb = (text) => text.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lum = ([r, g, b]) => {
    const lin = (c) => {
      c /= 255;
      return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    };
    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
  };
  const style = getComputedStyle(element);
  const [a, b] = [lum(rgb(style.color)), lum(rgb(style.backgroundColor))];
  return [style.color, style.backgroundColor, (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)];
}
"""


@pytest.fixture
def instance(transactional_db: Any) -> Instance:
    created = Instance.objects.create(slug="home", name="Home")
    SignupPolicy.objects.create(instance=created, open_signup=True)
    return created


def test_the_stop_button_reads_at_aa_contrast_in_both_themes(
    asgi_server: str, instance: Instance, ui_llm: UIModelServer, ui_context: Any
) -> None:
    ui_llm.reset()
    ui_llm.queue(Turn(pieces=[f"word{i} " for i in range(400)], gap_s=0.05))
    page = ui_context.new_page()
    new_user(page, asgi_server, "stopper")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "Count for me")
    page.wait_for_selector("#stop:not([hidden])")

    measured = {}
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.mouse.move(0, 0)
        page.wait_for_timeout(50)
        measured[scheme] = page.locator("#stop").evaluate(CONTRAST)
        page.hover("#stop")
        page.wait_for_timeout(50)
        measured[f"{scheme} hover"] = page.locator("#stop").evaluate(CONTRAST)
    page.click("#stop")

    assert measured["light"][:2] == ["rgb(255, 255, 255)", "rgb(179, 38, 30)"]
    assert measured["dark"][:2] == ["rgb(26, 6, 4)", "rgb(255, 138, 128)"]
    for what, (_, _, ratio) in measured.items():
        assert ratio >= 4.5, (what, measured[what])
