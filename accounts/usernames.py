"""Usernames that cannot pass for another user's.

Django's NFKC normalisation and the case-insensitive uniqueness check already refuse
width and case variants (full-width ``demo``, ``DEMO`` beside ``demo``). Letters of other scripts
that look Latin do not change under either: ``dem`` + Cyrillic ``o`` (U+043E) showed as a second
"demo" in the admin. Two rules, on Unicode's confusables data (``confusable-homoglyphs``,
UTS #39's ``confusables.txt``):

- a username writes its letters in one script (digits and ``_ . @ + -`` are neutral);
  Latin with Han and Hiragana/Katakana, Bopomofo or Hangul is one script here, as UTS #39's
  "highly restrictive" level has it, since Japanese, Chinese and Korean names mix them;
- its *skeleton* differs from every existing username's: each letter of another script
  that looks like a Latin letter is replaced by that letter (after NFKC and case folding),
  so an all-Cyrillic ``pop`` (U+0440 U+043E U+0440) is ``pop``. Latin letters and digits
  stay themselves: ``dem0`` is no look-alike of ``demo`` here, since a reader sees the 0.
"""

from __future__ import annotations

import unicodedata

from confusable_homoglyphs import categories, confusables
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

# Scripts that never make a name mixed (digits, punctuation, combining marks).
_NEUTRAL_SCRIPTS = frozenset({"COMMON", "INHERITED"})
# Script sets a single name may use together (UTS #39 §5.2, highly restrictive).
_SCRIPT_SETS = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)


def username_scripts(username: str) -> set[str]:
    """The scripts of ``username``'s letters, upper-case Unicode aliases (``{"LATIN",
    "CYRILLIC"}``), the neutral ones (digits, punctuation, combining marks) left out."""
    return set(categories.unique_aliases(username)) - _NEUTRAL_SCRIPTS


def username_mixes_scripts(username: str) -> bool:
    """Whether ``username`` writes letters in more than one script (beyond the sets of
    :data:`_SCRIPT_SETS`)."""
    scripts = username_scripts(username)
    return len(scripts) > 1 and not any(scripts <= allowed for allowed in _SCRIPT_SETS)


def username_skeleton(username: str) -> str:
    """``username`` as it reads: NFKC, case-folded, each letter of a script other than
    Latin that Unicode lists as confusable with Latin letters replaced by them."""
    text = unicodedata.normalize("NFKC", username).casefold()
    found = confusables.is_confusable(text, greedy=True, preferred_aliases=["latin", "common"])
    latin: dict[str, str] = {}
    for item in found or []:
        for glyph in item["homoglyphs"]:
            if all(categories.alias(char) == "LATIN" for char in glyph["c"]):
                latin[item["character"]] = glyph["c"].casefold()
                break
    return "".join(latin.get(char, char) for char in text)


def username_validate(username: str, *, exclude_pk: int | None = None) -> None:
    """Refuse a username that mixes scripts or reads like an existing user's.

    Compares the skeleton with every other user's (one pass over the usernames: a
    self-hosted server's users are few; ``exclude_pk`` leaves out the user being renamed).

    Raises:
        ValidationError: code ``mixed_script`` or ``lookalike``, with a message for the form.
    """
    scripts = username_scripts(username)
    if username_mixes_scripts(username):
        names = " and ".join(sorted(script.title() for script in scripts))
        raise ValidationError(
            f"Write the username in one script: this one mixes {names} letters.",
            code="mixed_script",
        )
    skeleton = username_skeleton(username)
    others = get_user_model().objects.values_list("username", flat=True)
    if exclude_pk is not None:
        others = others.exclude(pk=exclude_pk)
    for other in others.iterator():
        if username_skeleton(other) == skeleton:
            raise ValidationError(
                "This username looks the same as an existing one; choose another.",
                code="lookalike",
            )
