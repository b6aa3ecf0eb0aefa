"""A property-based run of the REST API against its own OpenAPI schema (Schemathesis):
no operation answers 5xx, and every response it documents matches the schema. A fixed
example budget per operation keeps the run bounded; the caller is a member and owner of
an instance with an API token, and about half the examples put that instance's real
slug, chat, mate, skill, prompt-section key and secret name into their paths, so scoped
routes run past their look-ups instead of answering 404."""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from accounts.services import api_token_create
from chats.services import chat_create
from instances.models import Mate
from instances.services import instance_create
from pipeline.ids import new_id
from skills.models import Skill
from skills.services import skill_catalog_seed
from tests.factories import UserFactory

EXAMPLES_PER_OPERATION = 15
# Routes a fuzzer must not run: deleting the account signs everything else out.
SKIPPED = {("DELETE", "/api/account/")}


@pytest.fixture(scope="module")
def api_schema(django_db_setup: Any, django_db_blocker: Any) -> Any:
    with django_db_blocker.unblock():
        raw = Client().get("/api/schema/", {"format": "json"}).content
    return schemathesis.openapi.from_dict(json.loads(raw))


@pytest.mark.django_db(transaction=True)
def test_no_operation_answers_5xx_or_breaks_its_schema(api_schema: Any) -> None:
    owner: Any = UserFactory(username="fuzz-owner")
    skill_catalog_seed()
    instance = instance_create(slug="fuzz", name="Fuzz", owner=owner)
    _, token = api_token_create(user=owner, name="fuzz")
    chat = chat_create(
        user=owner, chat_id=new_id(), instance=instance, encrypted_chat_key="AQ" + "A" * 70
    )
    real = {
        "slug": "fuzz",
        "instance": "fuzz",
        "chat_id": chat.pk,
        "mate_id": Mate.objects.filter(instance=instance).values_list("pk", flat=True).first(),
        "skill": Skill.objects.values_list("slug", flat=True).first(),
        "key": "identity",
        "name": "OPENAI_API_KEY",
    }
    app = get_wsgi_application()
    failures: list[str] = []
    answered: set[str] = set()  # operations that answered 2xx at least once
    ran = 0
    for result in api_schema.get_all_operations():
        operation = result.ok()
        if (operation.method.upper(), operation.path) in SKIPPED:
            continue
        strategy = operation.as_strategy()

        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy, realistic=st.booleans())
        def run(case: Any, realistic: bool) -> None:
            if realistic and case.path_parameters:
                for name in case.path_parameters.keys() & real.keys():
                    case.path_parameters[name] = real[name]
            response = case.call(app=app, headers={"Authorization": f"Bearer {token}"})
            if 200 <= response.status_code < 300:
                answered.add(f"{case.method} {case.operation.path}")
            for check in (not_a_server_error, response_schema_conformance):
                try:
                    case.validate_response(response, checks=[check])
                except Exception as exc:  # schemathesis' failures, whatever their class
                    failures.append(f"{case.method} {case.formatted_path}: {exc}"[:500])

        run()
        ran += 1
    assert ran >= 20
    # Random paths alone reach 3 operations past their look-ups; the real ones about 22.
    assert len(answered) >= 18, sorted(answered)
    assert failures == []
