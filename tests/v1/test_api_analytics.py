"""GET /api/analytics/<slug>/ (openai_api.analytics): figures per UTC day, stage and tier
checked against AI call rows made here; owners and admins only."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from instances.models import Instance, InstanceMember
from openai_api import quotas
from openmates.models import AICall
from tests.chats.rest import signed_in_client
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _call(instance: Instance, when: datetime, **fields: Any) -> AICall:
    values: dict[str, Any] = {
        "instance_id": instance.pk,
        "kind": "stream",
        "stage": "main",
        "tier": "standard",
        "provider": "openai",
        "model": "gpt-4o-mini",
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "cost_usd": Decimal("0.001"),
        "latency_ms": 100.0,
        "outcome": "ok",
        **fields,
    }
    call = AICall.objects.create(**values)
    AICall.objects.filter(pk=call.pk).update(created_at=when)  # auto_now_add ignores values
    return call


def test_figures_per_day_stage_and_tier_match_the_rows(instance: Instance, owner: Any) -> None:
    day1 = datetime(2026, 3, 1, 12, tzinfo=UTC)
    day2 = datetime(2026, 3, 2, 23, 59, tzinfo=UTC)
    for latency in (100.0, 200.0, 300.0, 400.0):
        _call(instance, day1, latency_ms=latency)
    _call(instance, day1, outcome="error", latency_ms=500.0, prompt_tokens=3, completion_tokens=0)
    _call(instance, day1, stage="preprocess", tier="fast", latency_ms=20.0)
    _call(instance, day2, tier="heavy", cost_usd=Decimal("0.5"), prompt_tokens=1000)
    _call(instance, datetime(2026, 3, 3, 0, 0, 1, tzinfo=UTC))  # outside the range
    other = Instance.objects.create(slug="elsewhere", name="Elsewhere")
    _call(other, day1)

    body = (
        signed_in_client(owner)
        .get("/api/analytics/demo/", {"from": "2026-03-01", "to": "2026-03-02"})
        .json()
    )

    rows = {(r["date"], r["stage"], r["tier"]): r for r in body["days"]}
    assert list(rows) == [
        ("2026-03-01", "main", "standard"),
        ("2026-03-01", "preprocess", "fast"),
        ("2026-03-02", "main", "heavy"),
    ]
    main = rows[("2026-03-01", "main", "standard")]
    assert (main["calls"], main["errors"]) == (5, 1)
    assert (main["prompt_tokens"], main["completion_tokens"]) == (43, 20)
    assert Decimal(main["cost_usd"]) == Decimal("0.005")
    # percentile_cont over 100, 200, 300, 400, 500: p50 300, p95 480 (linear interpolation).
    assert main["latency_p50_ms"] == pytest.approx(300.0)
    assert main["latency_p95_ms"] == pytest.approx(480.0)
    assert rows[("2026-03-02", "main", "heavy")]["prompt_tokens"] == 1000
    assert body["totals"]["calls"] == 7
    assert Decimal(body["totals"]["cost_usd"]) == Decimal("0.506")


def test_filters_and_usage_today(instance: Instance, owner: Any) -> None:
    today = datetime.now(tz=UTC)
    _call(instance, today, stage="preprocess", tier="fast")
    _call(instance, today)
    async_to_sync(quotas.atokens_add)(instance_id=instance.pk, subject="key:abc", tokens=40)
    async_to_sync(quotas.atokens_add)(instance_id=instance.pk, subject="key:abc", tokens=2)

    body = signed_in_client(owner).get("/api/analytics/demo/", {"stage": "preprocess"}).json()

    assert [(r["stage"], r["calls"]) for r in body["days"]] == [("preprocess", 1)]
    assert body["usage_today"] == [{"subject": "key:abc", "tokens": 42}]


def test_members_get_403_strangers_404_and_bad_ranges_400(
    instance: Instance, owner: Any, stranger: Any
) -> None:
    member: Any = UserFactory()
    InstanceMember.objects.create(instance=instance, user=member, role="member")

    as_member = signed_in_client(member).get("/api/analytics/demo/")
    as_stranger = signed_in_client(stranger).get("/api/analytics/demo/")
    backwards = signed_in_client(owner).get(
        "/api/analytics/demo/", {"from": "2026-03-02", "to": "2026-03-01"}
    )
    too_long = signed_in_client(owner).get(
        "/api/analytics/demo/", {"from": "2020-01-01", "to": "2026-03-01"}
    )
    unknown = signed_in_client(owner).get("/api/analytics/demo/", {"colour": "red"})
    bad_dates = signed_in_client(owner).get(
        "/api/analytics/demo/", {"from": "2026-13-45", "to": "tomorrow"}
    )

    assert (as_member.status_code, as_member.json()["code"]) == (403, "permission_denied")
    assert (as_stranger.status_code, as_stranger.json()["code"]) == (404, "not_found")
    assert backwards.json()["fields"] == {"from": ["must not be after 'to'"]}
    assert too_long.status_code == 400
    assert unknown.json()["fields"] == {"colour": ["unknown field"]}
    assert bad_dates.status_code == 400
    assert sorted(bad_dates.json()["fields"]) == ["from", "to"]
