"""Static files at start-up: WhiteNoise serves the finders' files and warns about nothing."""

from __future__ import annotations

import warnings

from django.conf import settings


def test_whitenoise_starts_without_a_missing_directory_warning() -> None:
    from whitenoise.middleware import WhiteNoiseMiddleware

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        WhiteNoiseMiddleware(get_response=lambda request: None)

    assert settings.STATIC_ROOT is None
    assert [str(w.message) for w in caught if "No directory" in str(w.message)] == []
