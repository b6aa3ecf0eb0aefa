"""The REST API's OpenAPI schema at /api/schema/ (drf-spectacular)."""

from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_schema_lists_every_chat_route_and_both_ways_to_sign_in() -> None:
    response = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert schema["info"]["title"] == "OpenMates REST API"
    assert {
        "/api/chats/",
        "/api/chats/{chat_id}/",
        "/api/chats/{chat_id}/messages/",
        "/api/chats/keys/",
        "/api/account/",
    } <= set(schema["paths"])
    schemes = schema["components"]["securitySchemes"]
    assert schemes["apiToken"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "om_<prefix>_<secret> (create with manage.py create_api_key)",
    }
    assert "cookieAuth" in schemes
    create = schema["paths"]["/api/chats/"]["post"]
    body = create["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body == "#/components/schemas/ChatCreate"
    required = schema["components"]["schemas"]["ChatCreate"]["required"]
    assert set(required) == {"chat_id", "instance", "encrypted_chat_key"}


def test_the_schema_generates_without_warnings() -> None:
    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    assert "openapi: 3" in out.getvalue()
