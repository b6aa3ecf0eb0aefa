"""An instance's ``api_base`` never points the server at link-local or metadata addresses
(openmates/api_base.py): the REST API, the model's validation (admin, import,
createinstance) and the gateway refuse them; loopback and private addresses stay allowed
unless ``LLM_API_BASE_PRIVATE_ALLOWED`` is off."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from instances.models import Instance, tier_map_validate
from openmates import llm
from openmates.api_base import api_base_refusal
from tests.chats.rest import signed_in_client
from tests.llm_fake import TierMapOnly


def _tiers(api_base: str) -> dict[str, Any]:
    return {"standard": [{"model": "openai/x", "api_base": api_base}]}


@pytest.mark.django_db
def test_the_rest_api_refuses_the_metadata_address_and_keeps_the_map(
    instance: Instance, owner: Any
) -> None:
    response = signed_in_client(owner).patch(
        "/api/instances/demo/",
        {"tier_map": _tiers("http://169.254.169.254/latest")},
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert response.json()["fields"]["tier_map"] == [
        "standard #1: 'api_base' is refused: 169.254.169.254 is a link-local address."
    ]
    assert Instance.objects.get(slug="demo").tier_map == {}


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest", "169.254.169.254 is a link-local address"),
        ("http://[fe80::1]:8080/v1", "fe80::1 is a link-local address"),
        ("http://[fd00:ec2::254]/", "fd00:ec2::254 is a cloud metadata address"),
        ("http://[::ffff:169.254.169.254]/", "::ffff:a9fe:a9fe is a link-local address"),
        ("http://100.100.100.200/", "100.100.100.200 is a cloud metadata address"),
        (
            "http://metadata.google.internal./v1",
            "metadata.google.internal is a cloud metadata host",
        ),
        ("http://0.0.0.0:11434/v1", "0.0.0.0 is the unspecified address"),
        ("http://[::]/v1", ":: is the unspecified address"),
        ("http://224.0.0.1/v1", "224.0.0.1 is a multicast address"),
        ("http://[ff02::1]/v1", "ff02::1 is a multicast address"),
        ("http://255.255.255.255/v1", "255.255.255.255 is a reserved or broadcast address"),
        ("http://2852039166/v1", "write an IPv4 address as four decimal numbers (a.b.c.d)"),
        ("http://0xa9.0xfe.0xa9.0xfe/", "write an IPv4 address as four decimal numbers (a.b.c.d)"),
        ("http://[2002:a9fe:a9fe::]/", "2002:a9fe:a9fe:: is a link-local address"),
        (
            "http://[2001:0:4136:e378:8000:63bf:5601:5601]/",
            "2001:0:4136:e378:8000:63bf:5601:5601 is a link-local address",
        ),
        ("http://169.254.0x a9fe/", "its host is not a valid host name or address"),
        ("http://a%2eb/v1", "its host is not a valid host name or address"),
        ("ftp://example.org/", "it must be an http(s) URL"),
        ("http:///v1", "it names no host"),
    ],
)
def test_literal_addresses_of_these_kinds_are_refused(url: str, reason: str) -> None:
    assert api_base_refusal(url, resolve=False) == reason


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:11434/v1",
        "http://[::1]:8000/v1",
        "http://10.0.0.5:8000/v1",
        "http://192.168.1.20/v1",
        "https://api.openai.com/v1",
        "http://ollama:11434/v1",
        "http://my_model.internal/v1",
        "http://b\u00fccher.example/v1",
    ],
)
def test_loopback_private_and_public_addresses_are_allowed(url: str) -> None:
    assert api_base_refusal(url, resolve=False) is None


def test_loopback_and_private_addresses_are_refused_when_the_setting_is_off(
    settings: Any,
) -> None:
    settings.LLM_API_BASE_PRIVATE_ALLOWED = False

    assert api_base_refusal("http://127.0.0.1:11434/v1", resolve=False) == (
        "127.0.0.1 is a loopback or private address (LLM_API_BASE_PRIVATE_ALLOWED is off)"
    )
    assert api_base_refusal("http://[fd12::1]/v1", resolve=False) is not None
    assert api_base_refusal("https://api.openai.com/v1", resolve=False) is None


def _resolving_to(monkeypatch: pytest.MonkeyPatch, addresses: dict[str, str]) -> None:
    def getaddrinfo(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        if host not in addresses:
            raise socket.gaierror(socket.EAI_NONAME, "unknown")
        family = socket.AF_INET6 if ":" in addresses[host] else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (addresses[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_a_host_name_resolving_to_a_link_local_address_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _resolving_to(
        monkeypatch,
        {"sneaky.example": "169.254.169.254", "ollama.lan": "192.168.1.9", "v6.example": "fe80::2"},
    )

    with pytest.raises(ValidationError) as refused:
        tier_map_validate(_tiers("http://sneaky.example/latest"))

    assert refused.value.messages == [
        "standard #1: 'api_base' is refused: sneaky.example resolves to 169.254.169.254, "
        "a link-local address."
    ]
    assert api_base_refusal("http://v6.example/") == (
        "v6.example resolves to fe80::2, a link-local address"
    )
    tier_map_validate(_tiers("http://ollama.lan:11434/v1"))
    tier_map_validate(_tiers("http://not-up-yet.lan:11434/v1"))
    tier_map_validate(_tiers("http://127.0.0.1:11434/v1"))


async def test_the_gateway_refuses_a_stored_entry_and_falls_back_to_the_next(
    llm_script: Any,
) -> None:
    # A map saved before the rule: never validated, so the gateway judges it per call.
    refused_only = TierMapOnly(_tiers("http://169.254.169.254/latest"))
    with_fallback = TierMapOnly(
        {
            "standard": [
                {"model": "openai/x", "api_base": "http://169.254.169.254/latest"},
                {"model": "scripted/next"},
            ]
        }
    )

    with pytest.raises(llm.LLMConfigurationError, match=r"169\.254\.169\.254 is a link-local"):
        await llm.complete(
            tier="standard", messages=[{"role": "user", "content": "hi"}], instance=refused_only
        )
    llm_script.reply(model="next", text="ok")
    result = await llm.complete(
        tier="standard", messages=[{"role": "user", "content": "hi"}], instance=with_fallback
    )

    assert result.text == "ok"
    assert [r.model for r in llm_script.requests] == ["next"]
