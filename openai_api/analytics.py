"""``GET /api/analytics/{slug}/``: an instance's AI calls per UTC day, stage and tier.

Figures come from the AI call log (``openmates.models.AICall``, one row per attempt):
``calls``, ``errors`` (outcome ``error``), ``prompt_tokens`` / ``completion_tokens``
(sums), ``cost_usd`` (sum of LiteLLM's bundled price estimates, as a decimal string),
``latency_p50_ms`` / ``latency_p95_ms`` (PostgreSQL's ``percentile_cont``, linear
interpolation between the nearest rows). ``usage_today`` lists the ``/v1`` tokens of
each API key and user today from the quota counters (``openai_api.quotas``). Owners and
admins only (403 for members, 404 for everyone else). docs/api.md §2.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db.models import Aggregate, Count, F, FloatField, Q, Sum
from django.db.models.functions import TruncDate
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from instances.api import admin_instance_or_error
from instances.models import Instance
from openai_api import quotas
from openmates.models import AICall
from openmates.rest import JsonOnlyApi, NoUnknownFields, StrictCharField

DEFAULT_DAYS = 30
MAX_DAYS = 366


class PercentileCont(Aggregate):
    """PostgreSQL's ``percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)``."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, fraction: float) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError("fraction must be within [0, 1]")
        super().__init__(expression, fraction=repr(float(fraction)))


class AnalyticsQuery(NoUnknownFields):
    """``from`` / ``to`` (inclusive UTC dates; default the last 30 days), ``stage``, ``tier``."""

    start = serializers.DateField(required=False)
    end = serializers.DateField(required=False)
    stage = StrictCharField(max_length=32, required=False)
    tier = StrictCharField(max_length=16, required=False)

    def to_internal_value(self, data: Any) -> Any:
        # ``from`` is a keyword in Python: the query names map onto start/end.
        renamed = {{"from": "start", "to": "end"}.get(k, k): v for k, v in data.items()}
        try:
            return super().to_internal_value(renamed)
        except serializers.ValidationError as exc:
            # Errors name the query's own parameters, not the internal names.
            detail = exc.detail if isinstance(exc.detail, dict) else {}
            back = {"start": "from", "end": "to"}
            raise serializers.ValidationError(
                {back.get(k, k): v for k, v in detail.items()} or exc.detail
            ) from None

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        end = attrs.get("end") or datetime.now(tz=UTC).date()
        start = attrs.get("start") or end - timedelta(days=DEFAULT_DAYS - 1)
        if start > end:
            raise serializers.ValidationError({"from": ["must not be after 'to'"]})
        if (end - start).days + 1 > MAX_DAYS:
            raise serializers.ValidationError({"from": [f"at most {MAX_DAYS} days at once"]})
        return {**attrs, "start": start, "end": end}


def _figures(row: Any) -> dict[str, Any]:
    return {
        "calls": row["calls"],
        "errors": row["errors"],
        "prompt_tokens": row["prompt_tokens"] or 0,
        "completion_tokens": row["completion_tokens"] or 0,
        "cost_usd": str(row["cost_usd"] or 0),
        "latency_p50_ms": row["latency_p50_ms"],
        "latency_p95_ms": row["latency_p95_ms"],
    }


_AGGREGATES: dict[str, Any] = {
    "calls": Count("id"),
    "errors": Count("id", filter=Q(outcome=AICall.Outcome.ERROR)),
    "prompt_tokens": Sum("prompt_tokens"),
    "completion_tokens": Sum("completion_tokens"),
    "cost_usd": Sum("cost_usd"),
    "latency_p50_ms": PercentileCont(F("latency_ms"), 0.5),
    "latency_p95_ms": PercentileCont(F("latency_ms"), 0.95),
}


def instance_analytics(
    *, instance: Instance, start: date, end: date, stage: str | None = None, tier: str | None = None
) -> dict[str, Any]:
    """The analytics body of ``instance`` for the UTC days ``start`` … ``end`` (inclusive).

    Returns ``{"instance", "from", "to", "days": [{"date", "stage", "tier", <figures>}],
    "totals": <figures>, "usage_today": [{"subject", "tokens"}]}`` with the figures of
    the module docstring; ``days`` ordered by date, stage, tier.
    """
    since = datetime.combine(start, time.min, tzinfo=UTC)
    until = datetime.combine(end + timedelta(days=1), time.min, tzinfo=UTC)
    rows = AICall.objects.filter(
        instance_id=instance.pk, created_at__gte=since, created_at__lt=until
    )
    if stage:
        rows = rows.filter(stage=stage)
    if tier:
        rows = rows.filter(tier=tier)
    grouped = (
        rows.annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day", "stage", "tier")
        .annotate(**_AGGREGATES)
        .order_by("day", "stage", "tier")
    )
    days = [
        {
            "date": row["day"].isoformat(),
            "stage": row["stage"],
            "tier": row["tier"],
            **_figures(row),
        }
        for row in grouped
    ]
    totals = _figures(rows.aggregate(**_AGGREGATES))
    usage = quotas.tokens_today(instance_id=instance.pk)
    return {
        "instance": instance.slug,
        "from": start.isoformat(),
        "to": end.isoformat(),
        "days": days,
        "totals": totals,
        "usage_today": [{"subject": k, "tokens": v} for k, v in sorted(usage.items())],
    }


class AnalyticsApi(JsonOnlyApi):
    """GET ``?from=&to=&stage=&tier=``: the instance's AI call figures (owners/admins)."""

    @extend_schema(
        operation_id="analytics_retrieve",
        parameters=[
            OpenApiParameter("from", OpenApiTypes.DATE, description="first UTC day"),
            OpenApiParameter("to", OpenApiTypes.DATE, description="last UTC day (inclusive)"),
            OpenApiParameter("stage", str, description="only this stage (main, preprocess …)"),
            OpenApiParameter("tier", str, description="only this tier"),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, slug: str) -> Response:
        instance = admin_instance_or_error(request, slug)
        query = AnalyticsQuery(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        return Response(instance_analytics(instance=instance, **query.validated_data))
