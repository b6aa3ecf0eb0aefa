"""The admin lists memories without their text (category, dates, source chat)."""

from __future__ import annotations

from typing import Any

from django.test import Client

from tests.factories import UserFactory
from tests.memories.conftest import remember


def test_the_admin_shows_metadata_and_never_the_text(local_instance: Any, alice: Any) -> None:
    memory = remember(local_instance, alice, "The safe code is quokkaonion")
    admin: Any = UserFactory(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(admin)

    listed = client.get("/admin/memories/memory/")
    detail = client.get(f"/admin/memories/memory/{memory.pk}/change/")
    settings_page = client.get("/admin/memories/memorysettings/")

    assert listed.status_code == detail.status_code == settings_page.status_code == 200
    for page in (listed, detail):
        body = page.content.decode()
        assert "quokkaonion" not in body
        assert "content_sealed" not in body
        assert "blind_index" not in body
    assert str(memory.pk) in listed.content.decode()
    assert "Fact" in listed.content.decode()
    assert "alice" in settings_page.content.decode()
    assert client.get("/admin/memories/memory/add/").status_code == 403
