"""The languages the product answers in (docs/architecture.md §6), below every app that
needs them: an instance's ``default_language`` is checked against them here, and
pre-processing (``pipeline.language``) lets only them come out of language detection.
"""

from __future__ import annotations

import functools
import re

from django.core.exceptions import ValidationError

# ISO 639-1 codes py3langid knows, minus the ones it confuses with a bigger neighbour
# and that the product does not offer (Galician, Bosnian, Malay, Esperanto, Latin, …).
SUPPORTED_LANGUAGES: tuple[str, ...] = (
    "af", "am", "ar", "az", "be", "bg", "bn", "ca", "cs", "cy", "da", "de", "el", "en",
    "es", "et", "eu", "fa", "fi", "fr", "ga", "gu", "he", "hi", "hr", "hu", "hy", "id",
    "is", "it", "ja", "ka", "kk", "km", "kn", "ko", "lt", "lv", "mk", "ml", "mn", "mr",
    "ne", "nl", "no", "pa", "pl", "ps", "pt", "ro", "ru", "si", "sk", "sl", "sq", "sr",
    "sv", "sw", "ta", "te", "th", "tl", "tr", "uk", "ur", "vi", "zh",
)  # fmt: skip
_SUPPORTED = frozenset(SUPPORTED_LANGUAGES)
# Other codes of a supported language: py3langid's Norwegian labels, Filipino (BCP 47
# "fil", py3langid's "tl") and the withdrawn ISO 639 codes of Hebrew and Indonesian.
ALIASES = {"nb": "no", "nn": "no", "fil": "tl", "iw": "he", "in": "id"}
# BCP 47-ish: a 2-3 letter language, an optional 4-letter script, an optional region of
# two letters or three digits ("en", "de-CH", "zh-Hant-TW", "es-419"); case-insensitive.
LANGUAGE_CODE_RE = re.compile(r"^[a-zA-Z]{2,3}(-[a-zA-Z]{4})?(-([a-zA-Z]{2}|[0-9]{3}))?$")


@functools.lru_cache(maxsize=1024)
def supported(code: str) -> str | None:
    """``code`` (a py3langid label, ISO 639 or BCP 47 code: "pt-BR", "nb", "fil") as the
    supported language it names ("pt", "no", "tl"), or None when the product does not
    offer that language. Cached: pre-processing asks it for each of py3langid's ~100
    labels several times a message."""
    base = code.split("-")[0].split("_")[0].lower()
    base = ALIASES.get(base, base)
    return base if base in _SUPPORTED else None


def default_language_validate(value: str) -> None:
    """Accept a BCP 47 code (:data:`LANGUAGE_CODE_RE`) of a supported language ("de",
    "de-CH", "zh-Hant-TW", "fil").

    Raises:
        ValidationError: not such a code, or a language the product does not offer
            ("lij", "xx").
    """
    if not LANGUAGE_CODE_RE.fullmatch(value or ""):
        raise ValidationError(
            f"{value!r} is no language code (expected a BCP 47 code such as en, de-CH "
            "or zh-Hant-TW)",
            code="invalid",
        )
    if supported(value) is None:
        raise ValidationError(
            f"{value!r} is not a language the assistant answers in", code="unsupported"
        )
