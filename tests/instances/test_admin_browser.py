"""In headless Chromium: an admin creates an instance, edits a prompt, sets a masked secret."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from instances.models import Instance
from instances.selectors import prompt_sections_get
from instances.services import instance_secret_get
from skills.services import skill_catalog_seed
from tests.factories import UserFactory

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SECRET_VALUE = "sk-browser-typed-9c2f4e7a"
PASSWORD = "correct horse battery staple"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_admin_creates_an_instance_edits_a_prompt_and_sets_a_masked_secret(live_server):
    if not Path(CHROMIUM).exists():
        pytest.fail(
            "Debian's chromium is required for the browser tests (apt-get install chromium)"
        )
    from playwright.sync_api import sync_playwright

    skill_catalog_seed()
    UserFactory(username="root", is_staff=True, is_superuser=True)
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot = ARTIFACTS / "admin_instance_secret.png"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{live_server.url}/admin/login/?next=/admin/")
            page.fill("#id_username", "root")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("#site-name")

            page.goto(f"{live_server.url}/admin/instances/instance/add/")
            page.fill("#id_slug", "browser")
            page.fill("#id_name", "Browser Mate")
            page.click("input[name=_continue]")
            page.wait_for_selector("textarea[name='prompt_sections-1-content']")

            page.fill("textarea[name='prompt_sections-1-content']", "Answer like a librarian.")
            page.fill("input[name='secrets-0-name']", "TAVILY_API_KEY")
            page.fill("input[name='secrets-0-value']", SECRET_VALUE)
            page.click("input[name=_continue]")
            page.wait_for_selector(".messagelist .success")

            html = page.content()
            source = page.evaluate("document.documentElement.outerHTML")
            status = page.inner_text("td.field-status")
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()

    instance = Instance.objects.get(slug="browser")
    assert SECRET_VALUE not in html
    assert SECRET_VALUE not in source
    assert status.startswith("set on ")
    assert instance_secret_get(instance=instance, name="TAVILY_API_KEY") == SECRET_VALUE
    assert prompt_sections_get(instance)["persona"] == "Answer like a librarian."
    assert instance.members.get().user.username == "root"
    assert instance.tools.get(name="web_search").enabled is True

    with Image.open(screenshot) as image:
        stats = ImageStat.Stat(image.convert("L"))
        assert image.size[0] == 1280
    assert stats.stddev[0] > 10, "the screenshot is blank"
