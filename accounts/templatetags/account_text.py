"""Template filters of the account pages."""

from __future__ import annotations

from datetime import timedelta

from django import template

register = template.Library()


def _count(number: int, unit: str) -> str:
    return f"{number} {unit}" if number == 1 else f"{number} {unit}s"


@register.filter
def duration_words(delta: timedelta | None) -> str:
    """``delta`` in words, rounded up to whole minutes: ``"15 minutes"``, ``"1 hour"``,
    ``"1 day 2 hours"``, ``"1 hour 30 minutes"`` (the two largest non-zero units); ``""``
    for ``None``."""
    if delta is None:
        return ""
    minutes = max(1, -(-int(delta.total_seconds()) // 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [
        _count(value, unit)
        for value, unit in ((days, "day"), (hours, "hour"), (minutes, "minute"))
        if value
    ]
    return " ".join(parts[:2])
