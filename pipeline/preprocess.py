"""Pre-processing (docs/architecture.md §6): local, millisecond decisions before the main model.

``preprocess(...)`` runs without any model call: invisible Unicode stripped, language of
the instruction (not of quoted material) by py3langid, tools preselected lexically among
the instance's enabled tools (explicit mentions win; client overrides only within the
user's role), tier by complexity signals (an unhappy user gets a higher tier), mate by
category, memory categories, and heuristic safety scores.

Model-based parts, each one fast-tier call with a JSON schema: ``model_safety_check``
(first messages, or when a heuristic fired) and ``title_generate`` (first messages,
concurrently with the main call). Instances whose fast tier is a base model (the bundled
local one: ``openmates.llm.is_base_model``) skip both (``heuristic_title`` instead).
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils.translation import get_language_info

from instances.models import Instance
from instances.services import ainstance_tier_secrets_get
from openmates import llm

# Members may lower the tier; only instance owners and admins may ask for ``heavy``.
TIERS_BY_ROLE = {
    "owner": llm.TIERS,
    "admin": llm.TIERS,
    "member": ("fast", "standard"),
}
MAX_TOOLS = 5
HARMFUL_REJECT = 7.0
MISUSE_REJECT = 8.0
HEURISTIC_FIRES = 4.0
LANGUAGE_MIN_CONFIDENCE = 0.3
MEMORY_CATEGORIES = ("preference", "fact", "event", "relationship", "decision", "general")

# Zero-width and bidirectional controls, BOM, tag characters; ZWNJ/ZWJ stay (scripts and
# emoji need them).
_KEEP_FORMAT = {"\u200c", "\u200d"}


def strip_invisible(text: str) -> str:
    """``text`` without invisible format characters (Unicode category Cf, but ZWNJ/ZWJ)."""
    if text.isascii():
        return text
    return "".join(ch for ch in text if ch in _KEEP_FORMAT or unicodedata.category(ch) != "Cf")


# --- language --------------------------------------------------------------------------

_FENCE_RE = re.compile(r"```.*?(```|$)", re.DOTALL)
_INLINE_CODE_RE = re.compile(r"`[^`\n]*`")
_QUOTE_LINE_RE = re.compile(r"^\s*>.*$", re.MULTILINE)
_QUOTED_RE = re.compile(r"\"[^\"]{12,}\"|“[^”]{12,}”|«[^»]{12,}»|„[^“]{12,}“|'[^']{24,}'")
_COLON_TAIL_RE = re.compile(r"^(?P<head>[^:\n]{8,}?):\s*(?P<tail>\S.*)$", re.DOTALL)

_identifier_lock = threading.Lock()
_identifier: Any = None


def _language_identifier() -> Any:
    global _identifier
    with _identifier_lock:
        if _identifier is None:
            from py3langid import langid

            _identifier = langid.LanguageIdentifier.from_modelpath(
                langid.MODEL_DIR / langid.MODEL_FILE, norm_probs=True
            )
    return _identifier


def warm_up() -> None:
    """Load the language model now (≈0.5 s) instead of on the first message."""
    _language_identifier()


def instruction_text(text: str) -> str:
    """The part of ``text`` that is the user's own instruction (quoted material removed).

    Removes code, ``>`` quote lines, long quotations and, in "translate this: …" shapes,
    the material after the colon.
    """
    stripped = _FENCE_RE.sub(" ", text)
    stripped = _INLINE_CODE_RE.sub(" ", stripped)
    stripped = _QUOTE_LINE_RE.sub(" ", stripped)
    stripped = _QUOTED_RE.sub(" ", stripped)
    match = _COLON_TAIL_RE.match(stripped.strip())
    if match and len(match.group("head").split()) >= 3:
        stripped = match.group("head")
    return " ".join(stripped.split()) or " ".join(text.split())


# Short messages langid cannot place (a word or two), by language, "|"-separated. A
# phrase listed for several languages is ambiguous: the fallback wins when it is one of
# them. Words every language uses ("ok", "super", "cool") are not listed: they keep the
# fallback.
_SHORT_MESSAGES: dict[str, str] = {
    "en": "thanks|thank you|thank you very much|thanks a lot|thx|cheers|hello|hi|hey|yes|"
    "yeah|please|bye|goodbye|good morning|good night|sorry|great|continue|go on|more|why|"
    "tell me more",
    "de": "danke|danke schön|dankeschön|vielen dank|danke sehr|bitte|hallo|guten morgen|"
    "guten tag|guten abend|gute nacht|tschüss|nein|genau|weiter|mehr|warum|"
    "entschuldigung|servus|moin",
    "fr": "merci|merci beaucoup|bonjour|bonsoir|salut|oui|non|s'il te plaît|"
    "s'il vous plaît|au revoir|pourquoi|d'accord|bonne nuit",
    "es": "gracias|muchas gracias|hola|sí|por favor|adiós|buenos días|buenas noches|perdón|"
    "por qué|vale|claro",
    "it": "grazie|grazie mille|ciao|buongiorno|buonasera|buonanotte|sì|per favore|perché|"
    "prego|arrivederci",
    "pt": "obrigado|obrigada|muito obrigado|muito obrigada|olá|oi|bom dia|boa noite|"
    "por favor|sim|tchau|adeus",
    "nl": "dank je|dank u|dankjewel|bedankt|hallo|goedemorgen|doei|nee",
    "sv": "tack|tack så mycket|hej|hej då",
    "da": "mange tak|tak|hej",
    "no": "takk|tusen takk|hei|ha det",
    "fi": "kiitos|moi|hei|kyllä",
    "pl": "dziękuję|dzięki|cześć|dzień dobry|proszę|tak",
    "cs": "děkuji|díky|dobrý den|ahoj",
    "tr": "teşekkürler|teşekkür ederim|sağol|merhaba|evet|hay\u0131r",
    "ru": "спасибо|большое спасибо|привет|здравствуйте|да|нет|пожалуйста|пока",
    "uk": "дякую|привіт|будь ласка|так|ні",
    "bg": "благодаря|здравей|моля",
    "ja": "ありがとう|ありがとうございます|こんにちは|はい|いいえ|すみません",
    "zh": "谢谢|谢谢你|你好|好的|再见|是的",
}


def _phrase_languages(table: dict[str, str]) -> dict[str, tuple[str, ...]]:
    languages: dict[str, tuple[str, ...]] = {}
    for language, phrases in table.items():
        for phrase in phrases.split("|"):
            languages[phrase] = (*languages.get(phrase, ()), language)
    return languages


_SHORT_LANGUAGES = _phrase_languages(_SHORT_MESSAGES)

# Below this many words, langid needs SHORT_TEXT_MIN_CONFIDENCE: on a word or two it is
# often sure of the wrong language ("Explain again" → Scottish Gaelic at 0.34).
SHORT_TEXT_WORDS = 4
SHORT_TEXT_MIN_CONFIDENCE = 0.5
_NO_LANGUAGE = "zxx"  # langid's "no linguistic content"

# Scripts only one common language writes: first code point, last, language.
_SCRIPT_OWNERS: tuple[tuple[int, int, str], ...] = (
    (0x3040, 0x30FF, "ja"),  # hiragana, katakana
    (0x31F0, 0x31FF, "ja"),
    (0xAC00, 0xD7AF, "ko"),  # hangul
    (0x1100, 0x11FF, "ko"),
    (0x3130, 0x318F, "ko"),
    (0x0E00, 0x0E7F, "th"),
    (0x0370, 0x03FF, "el"),
    (0x0590, 0x05FF, "he"),
    (0x10A0, 0x10FF, "ka"),
    (0x0530, 0x058F, "hy"),
)
# Scripts several languages share: (first, last, script), each with a default guess.
_SHARED_SCRIPTS: tuple[tuple[int, int, str], ...] = (
    (0x4E00, 0x9FFF, "han"),
    (0x3400, 0x4DBF, "han"),
    (0x0400, 0x04FF, "cyrillic"),
    (0x0600, 0x06FF, "arabic"),
    (0x0900, 0x097F, "devanagari"),
)
_SCRIPT_LANGUAGES: dict[str, tuple[str, ...]] = {
    "han": ("zh", "ja", "yue", "wuu"),
    "cyrillic": ("ru", "uk", "bg", "sr", "mk", "be", "kk", "ky", "mn", "tg", "tt", "ba"),
    "arabic": ("ar", "fa", "ur", "ps", "ug", "ary", "arz", "sdh"),
    "devanagari": ("hi", "mr", "ne", "sa"),
}
# Letters that tell one language of a shared script from the others.
_TELLTALE_LETTERS: tuple[tuple[str, str], ...] = (
    ("іїєґ", "uk"),
    ("ў", "be"),
    ("әғқңөұһ", "kk"),
    ("ђћљњџј", "sr"),
    ("ѓќѕ", "mk"),
    ("ٹڈڑںے", "ur"),  # before Persian: Urdu writes Persian's letters too
    ("پچژگکی", "fa"),
)


def _base(code: str) -> str:
    """The language of ``code`` without its region or script ("pt" of "pt-BR")."""
    return code.split("-")[0].split("_")[0].lower()


def _short_message_language(sample: str, fallback: str) -> str | None:
    lowered = sample.casefold().replace("\u2019", "'")  # the typographic apostrophe
    phrase = " ".join("".join(ch if ch.isalpha() or ch == "'" else " " for ch in lowered).split())
    languages = _SHORT_LANGUAGES.get(phrase)
    if not languages:
        return None
    return fallback if _base(fallback) in languages else languages[0]


def _script_language(sample: str, fallback: str, *, shared: bool) -> str | None:
    """The language the letters' dominant script tells (None: Latin, mixed, unknown).

    ``shared=False`` looks only at scripts one language owns; ``True`` also guesses for
    shared scripts (the fallback when it writes that script, else a telltale letter's
    language, else the script's most common language).
    """
    counts: dict[str, int] = {}
    letters = 0
    for ch in sample:
        if not ch.isalpha():
            continue
        letters += 1
        point = ord(ch)
        for first, last, name in (*_SCRIPT_OWNERS, *_SHARED_SCRIPTS):
            if first <= point <= last:
                counts[name] = counts.get(name, 0) + 1
                break
    if counts.get("ja") and counts.get("han"):
        counts["ja"] += counts.pop("han")  # kanji with kana is Japanese
    if not counts:
        return None
    script, count = max(counts.items(), key=lambda item: item[1])
    if count * 2 <= letters:
        return None
    if script not in _SCRIPT_LANGUAGES:
        return script
    if not shared:
        return None
    languages = _SCRIPT_LANGUAGES[script]
    if _base(fallback) in languages:
        return fallback
    for telltale, language in _TELLTALE_LETTERS:
        if language in languages and any(ch in telltale for ch in sample):
            return language
    return languages[0]


def detect_language(text: str, *, fallback: str) -> str:
    """ISO 639 code of the instruction in ``text``; ``fallback`` (the chat's previous
    language, else the instance default) when unsure.

    In order: a known short message ("Danke", "Merci", "ありがとう"), a script only one
    language writes (kana, hangul, Greek, ...), py3langid when confident enough (more so
    for texts under :data:`SHORT_TEXT_WORDS` words), a guess from a shared script
    (Cyrillic, Arabic, Han, Devanagari), then ``fallback``.
    """
    sample = instruction_text(text)
    known = _short_message_language(sample, fallback) or _script_language(
        sample, fallback, shared=False
    )
    if known:
        return known
    if sum(ch.isalpha() for ch in sample) >= 4:
        language, confidence = _language_identifier().classify(sample)
        short = len(sample.split()) < SHORT_TEXT_WORDS
        needed = SHORT_TEXT_MIN_CONFIDENCE if short else LANGUAGE_MIN_CONFIDENCE
        if confidence >= needed and language != _NO_LANGUAGE:
            return str(language)
    return _script_language(sample, fallback, shared=True) or fallback


# Names Django's LANG_INFO lacks for codes py3langid gives.
_LANGUAGE_NAMES = {"zh": "Chinese", "yue": "Cantonese", "la": "Latin", "gu": "Gujarati"}


def language_name(code: str) -> str:
    """The English name of ISO 639 ``code`` ("ja" → "Japanese", "pt-BR" → "Brazilian
    Portuguese"), for instructions to a model; unknown codes are named as codes."""
    if code in _LANGUAGE_NAMES:
        return _LANGUAGE_NAMES[code]
    try:
        return str(get_language_info(code.lower())["name"])
    except KeyError:
        return f"the language with ISO 639 code {code!r}"


# --- tools ------------------------------------------------------------------------------

_WORD_RE = re.compile(r"[^\W\d_]{3,}", re.UNICODE)
_STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "how",
        "are",
        "was",
        "were",
        "can",
        "could",
        "would",
        "should",
        "you",
        "your",
        "yours",
        "have",
        "has",
        "had",
        "from",
        "into",
        "about",
        "please",
        "tell",
        "give",
        "show",
        "make",
        "does",
        "did",
        "not",
        "but",
        "any",
        "all",
        "some",
        "one",
        "two",
        "get",
        "use",
        "using",
        "used",
        "tool",
        "tools",
        "like",
        "just",
        "also",
        "them",
        "they",
        "their",
        "there",
        "here",
        "than",
        "then",
        "its",
        "it's",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "our",
        "out",
    ]
)
# Rules that find a tool the description alone would miss: (tool, pattern).
TOOL_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "calculator",
        re.compile(
            r"\d\s*[-+*/^%×÷]\s*\(?\s*\d|\b(sqrt|square root|percent|calculate|compute|sum of)\b",  # noqa: RUF001
            re.IGNORECASE,
        ),
    ),
    (
        "unit_convert",
        re.compile(
            r"\b\d+(?:[.,]\d+)?\s*(?:km|mi|miles?|kg|lbs?|pounds?|°?[cf]|celsius|fahrenheit|"
            r"meters?|metres?|feet|ft|inch(?:es)?|cm|mm|liters?|litres?|gallons?|oz|ounces?)\b"
            r".*\b(?:in|to|into)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "datetime_now",
        re.compile(
            r"\b(what time|current time|what day|today'?s date|what date|time is it|"
            r"day of the week)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "weather",
        re.compile(r"\b(weather|forecast|rain(?:ing)?|snow(?:ing)?|temperature outside)\b", re.I),
    ),
    (
        "web_search",
        re.compile(r"\b(search the web|look up|latest news|search for|google)\b", re.IGNORECASE),
    ),
)


def _stem(word: str) -> str:
    word = word.lower()
    for suffix in ("ing", "ions", "ion", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _terms(text: str) -> set[str]:
    return {_stem(w) for w in _WORD_RE.findall(text) if w.lower() not in _STOPWORDS}


@dataclass(frozen=True, slots=True)
class ToolCandidate:
    """A tool the instance has on, with the text preselection matches against."""

    name: str
    description: str
    hint: str = ""


def explicit_tool_mentions(text: str, names: Iterable[str]) -> list[str]:
    """Tools named in ``text`` (``@calculator``, "use the calculator", "web search")."""
    lowered = text.lower()
    found = []
    for name in names:
        spaced = name.replace("_", " ")
        if f"@{name}" in lowered or re.search(
            rf"\b({re.escape(name)}|{re.escape(spaced)})\b", lowered
        ):
            found.append(name)
    return found


def preselect_tools(
    text: str,
    candidates: Sequence[ToolCandidate],
    *,
    requested: Sequence[str] | None = None,
) -> tuple[str, ...]:
    """Names of the tools to offer the main model, best first (at most ``MAX_TOOLS``).

    Explicit mentions come first, then client-requested tools (only among
    ``candidates``, which are already the instance's enabled tools), then rule hits, then
    tools whose description or skill hint shares at least two terms with the message.
    """
    names = [c.name for c in candidates]
    chosen: list[str] = []

    def add(name: str) -> None:
        if name in names and name not in chosen:
            chosen.append(name)

    for name in explicit_tool_mentions(text, names):
        add(name)
    for name in requested or ():
        add(name)
    for name, pattern in TOOL_RULES:
        if pattern.search(text):
            add(name)
    message_terms = _terms(text)
    scored = sorted(
        (
            (
                len(message_terms & _terms(f"{c.name.replace('_', ' ')} {c.description} {c.hint}")),
                c.name,
            )
            for c in candidates
        ),
        key=lambda pair: (-pair[0], pair[1]),
    )
    for score, name in scored:
        if score >= 2:
            add(name)
    return tuple(chosen[:MAX_TOOLS])


# --- tier -------------------------------------------------------------------------------

_COMPLEX_RE = re.compile(
    r"\b(prove|proof|derive|step[- ]by[- ]step|in detail|detailed|analy[sz]e|architecture|"
    r"optimi[sz]e|refactor|debug|trade-?offs?|compare|comprehensive|algorithm|design a|"
    r"explain why|research)\b",
    re.IGNORECASE,
)
_TRIVIAL_RE = re.compile(
    r"^\s*(hi|hello|hey|thanks?|thank you|ok(ay)?|cool|great|bye|good (morning|night))\W*$",
    re.IGNORECASE,
)
_UNHAPPY_RE = re.compile(
    r"\b(that'?s (wrong|not (it|right|what i (asked|meant)))|wrong answer|incorrect|"
    r"doesn'?t work|didn'?t work|not what i (asked|meant|wanted)|try again|you misunderstood|"
    r"useless|makes no sense|that is wrong|falsch|stimmt nicht|c'est faux|incorrecto|"
    r"no funciona|errado|неправильно)\b",
    re.IGNORECASE,
)


def choose_tier(
    text: str,
    *,
    previous_assistant: str | None,
    requested: str | None,
    role: str,
) -> tuple[str, str]:
    """``(tier, reason)`` for the message; a client's request only within its role."""
    allowed = TIERS_BY_ROLE.get(role, TIERS_BY_ROLE["member"])
    if requested in allowed:
        return str(requested), "requested by the client"
    signals = len(_COMPLEX_RE.findall(text)) + text.count("```") // 2
    signals += 1 if len(text) > 1500 else 0
    if _TRIVIAL_RE.match(text):
        tier, reason = "fast", "short conversational message"
    elif signals >= 2:
        tier, reason = "heavy", f"{signals} complexity signals"
    else:
        tier, reason = "standard", "default tier"
    if previous_assistant is not None and _UNHAPPY_RE.search(text):
        tier = llm.TIERS[min(llm.TIERS.index(tier) + 1, len(llm.TIERS) - 1)]
        reason = "user unhappy with the last answer"
    if tier not in allowed:
        tier = allowed[-1]
    return tier, reason


# --- mate, memory categories --------------------------------------------------------------

MATE_CATEGORY_TERMS: dict[str, frozenset[str]] = {
    "software": frozenset(
        [
            "code",
            "python",
            "javascript",
            "typescript",
            "function",
            "bug",
            "error",
            "compile",
            "program",
            "programming",
            "django",
            "sql",
            "api",
            "class",
            "variable",
            "stack",
            "exception",
            "regex",
            "git",
            "docker",
        ]
    ),
    "writing": frozenset(
        ["essay", "poem", "story", "write", "letter", "email", "rewrite", "proofread", "grammar"]
    ),
    "math": frozenset(
        [
            "equation",
            "integral",
            "derivative",
            "algebra",
            "geometry",
            "calculus",
            "proof",
            "theorem",
        ]
    ),
    "health": frozenset(
        ["symptom", "doctor", "pain", "medicine", "sleep", "diet", "exercise", "health"]
    ),
    "finance": frozenset(
        ["budget", "invest", "stock", "tax", "loan", "mortgage", "savings", "money", "finance"]
    ),
    "travel": frozenset(["trip", "travel", "flight", "hotel", "visa", "itinerary", "vacation"]),
}


def choose_mate_category(text: str, available: Iterable[str]) -> str | None:
    """The category of the best-matching mate among ``available`` categories, if any."""
    words = {w.lower() for w in _WORD_RE.findall(text)}
    best, best_score = None, 0
    for category in available:
        score = len(words & MATE_CATEGORY_TERMS.get(category, frozenset()))
        if score > best_score:
            best, best_score = category, score
    return best


_MEMORY_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "preference",
        re.compile(r"\b(recommend|suggest|favou?rite|i (like|love|prefer|hate))\b", re.I),
    ),
    ("fact", re.compile(r"\b(my name|i am|i'm|i live|i work|my job|my address)\b", re.I)),
    (
        "event",
        re.compile(
            r"\b(yesterday|last (week|month|year)|my birthday|appointment|anniversary)\b", re.I
        ),
    ),
    (
        "relationship",
        re.compile(
            r"\b(my (wife|husband|partner|mother|mom|father|dad|son|daughter|friend|boss|"
            r"sister|brother))\b",
            re.I,
        ),
    ),
    (
        "decision",
        re.compile(r"\b(should i|i decided|we decided|which one should|help me decide)\b", re.I),
    ),
)


def memory_categories(text: str) -> tuple[str, ...]:
    """Memory categories this message would draw on (empty: none needed)."""
    return tuple(category for category, pattern in _MEMORY_RULES if pattern.search(text))


# --- safety -------------------------------------------------------------------------------

# English, German, French, Spanish, Italian, Portuguese, Dutch, Russian, Polish, Turkish.
_EXPLOSIVE_TERMS = (
    r"\w*bomb\w*|explosi\w*|sprengstoff\w*|sprengsatz\w*|nervengas|sarin|ricin|anthrax"
    r"|бомб\w*|взрывчатк\w*|взрывн\w*|patlay\u0131c\u0131\w*"
)
_KILL_TERMS = (
    r"\bkill\w*|\bmurder\w*|töten|umbringen|ermorden|\btuer\b|\bassassiner|\bmatar\b"
    r"|\basesinar|\buccidere|\bdoden\b|\bvermoorden|убить|убивать|\bzabić|öldürmek"
)
# Digits and symbols written for letters ("p1pe b0mb", "k1ll") read as the letters.
_LEET = str.maketrans(
    {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"}
)

_HARMFUL_RULES: tuple[tuple[float, re.Pattern[str]], ...] = (
    (
        9.0,
        re.compile(
            r"\b(make|build|synthesi[sz]e|produce)\b.{0,40}\b(bomb|explosive|nerve agent|"
            r"sarin|ricin|bioweapon|chemical weapon)\b",
            re.I,
        ),
    ),
    (9.0, re.compile(r"\b(child|minor)\b.{0,30}\b(sexual|nude|porn)", re.I)),
    (
        8.0,
        re.compile(
            r"\b(how (do|can) i|best way to)\b.{0,30}\b(kill|murder|poison)\b.{0,30}"
            r"\b(someone|a person|my|him|her|people)\b",
            re.I,
        ),
    ),
    (
        9.0,
        # Any language the heuristics cover: an explosive or mass-harm agent near killing.
        # (Compounds count: "Rohrbombe", "Autobombe".)
        re.compile(
            rf"(?:{_EXPLOSIVE_TERMS}).{{0,80}}(?:{_KILL_TERMS})"
            rf"|(?:{_KILL_TERMS}).{{0,80}}(?:{_EXPLOSIVE_TERMS})",
            re.I | re.S,
        ),
    ),
    (4.0, re.compile(r"\b(weapon|explosive|poison|overdose|kill|suicide)\b", re.I)),
)
_MISUSE_RULES: tuple[tuple[float, re.Pattern[str]], ...] = (
    (
        9.0,
        re.compile(
            r"\b(write|create|build)\b.{0,30}\b(ransomware|keylogger|credential stealer|botnet)\b",
            re.I,
        ),
    ),
    (
        8.5,
        re.compile(
            r"\b(phishing (email|page|site)|steal (credit card|passwords?)|carding)\b", re.I
        ),
    ),
    (
        4.0,
        re.compile(
            r"\b(hack into|bypass (the )?(login|paywall|drm)|jailbreak|malware|exploit)\b", re.I
        ),
    ),
)


def _score(text: str, rules: Sequence[tuple[float, re.Pattern[str]]]) -> float:
    return max((score for score, pattern in rules if pattern.search(text)), default=0.0)


@dataclass(frozen=True, slots=True)
class SafetyScores:
    harmful: float
    misuse: float

    @property
    def rejected(self) -> bool:
        return self.harmful >= HARMFUL_REJECT or self.misuse >= MISUSE_REJECT

    @property
    def heuristic_fired(self) -> bool:
        return max(self.harmful, self.misuse) >= HEURISTIC_FIRES


def heuristic_safety(text: str) -> SafetyScores:
    """Keyword scores 0-10 for ``harmful`` and ``misuse`` (the higher of the text as
    written and with look-alike digits read as letters)."""
    scores = SafetyScores(_score(text, _HARMFUL_RULES), _score(text, _MISUSE_RULES))
    plain = text.translate(_LEET)
    if plain == text:  # the common case: no digit or symbol to read as a letter
        return scores
    return SafetyScores(
        harmful=max(scores.harmful, _score(plain, _HARMFUL_RULES)),
        misuse=max(scores.misuse, _score(plain, _MISUSE_RULES)),
    )


SAFETY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "harmful": {"type": "number", "minimum": 0, "maximum": 10},
        "misuse": {"type": "number", "minimum": 0, "maximum": 10},
    },
    "required": ["harmful", "misuse"],
}


async def model_safety_check(*, text: str, instance: Instance, chat_id: str) -> SafetyScores | None:
    """Fast-tier safety scores, or None when the model gave no usable answer."""
    messages = [
        {
            "role": "system",
            "content": "Rate the user's message for an AI assistant. harmful: 0-10, how much "
            "answering could cause physical harm. misuse: 0-10, how much it asks for help "
            "with crime, abuse or attacks on systems. Answer with JSON only.",
        },
        {"role": "user", "content": text[:4000]},
    ]
    try:
        result = await llm.complete(
            tier="fast",
            messages=messages,
            instance=instance,
            secrets=await ainstance_tier_secrets_get(instance=instance),
            response_schema=SAFETY_SCHEMA,
            stage="preprocess",
            chat_id=chat_id,
        )
    except llm.LLMError:
        return None
    data = result.data if isinstance(result.data, dict) else {}
    try:
        return SafetyScores(harmful=float(data["harmful"]), misuse=float(data["misuse"]))
    except (KeyError, TypeError, ValueError):
        return None


# --- title ----------------------------------------------------------------------------------

TITLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 80},
        "icon": {"type": "string", "maxLength": 40},
        "category": {"type": "string", "maxLength": 40},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 10},
    },
    "required": ["title", "icon", "category", "tags"],
}


@dataclass(frozen=True, slots=True)
class ChatTitle:
    """A title for a new chat with its icon, category and tags (``preprocess.done``)."""

    title: str
    icon: str
    category: str
    tags: tuple[str, ...]


def heuristic_title(text: str, *, category: str = "general") -> ChatTitle:
    """A title from the message's first words (no model), for local-model instances."""
    words = instruction_text(text).split()
    title = " ".join(words[:8]).strip(" ?!.,:;")
    if len(words) > 8:
        title += "…"
    return ChatTitle(title=title[:80] or "New chat", icon="chat", category=category, tags=())


async def title_generate(
    *, text: str, language: str, instance: Instance, chat_id: str
) -> ChatTitle | None:
    """Fast-tier title, icon, category and tags (≤ 10); None on failure. The instruction
    names ``language`` (an ISO 639 code) in words: the title is written in it."""
    name = language_name(language)
    messages = [
        {
            "role": "system",
            "content": "Name this conversation from its first message. Answer with JSON: "
            "title (at most 8 words), icon (one lowercase word naming an icon), category "
            "(one lowercase word), tags (at most 10 short keywords). The conversation is in "
            f"{name}: write the title in {name}.",
        },
        {"role": "user", "content": text[:4000]},
    ]
    try:
        result = await llm.complete(
            tier="fast",
            messages=messages,
            instance=instance,
            secrets=await ainstance_tier_secrets_get(instance=instance),
            response_schema=TITLE_SCHEMA,
            stage="title",
            chat_id=chat_id,
        )
    except llm.LLMError:
        return None
    data = result.data if isinstance(result.data, dict) else {}
    title = str(data.get("title") or "").strip()[:80]
    if not title:
        return None
    raw_tags = data.get("tags")
    tags: list[Any] = raw_tags if isinstance(raw_tags, list) else []
    return ChatTitle(
        title=title,
        icon=str(data.get("icon") or "chat")[:40],
        category=str(data.get("category") or "general")[:40],
        tags=tuple(str(tag)[:40] for tag in tags[:10]),
    )


# --- the whole step -------------------------------------------------------------------------


def tier_model(tier: str, instance: Instance) -> str:
    """The first model of ``tier`` in the instance's tier map (else the default map)."""
    tier_map = instance.tier_map or settings.LLM_DEFAULT_TIERS
    entries = tier_map.get(tier) or settings.LLM_DEFAULT_TIERS.get(tier) or [{}]
    return str(entries[0].get("model", ""))


@dataclass(frozen=True, slots=True)
class Preprocessed:
    """What pre-processing decided for one message."""

    content: str
    language: str
    tier: str
    model: str
    reason: str
    tools: tuple[str, ...]
    mate_category: str | None
    memory_categories: tuple[str, ...]
    safety: SafetyScores


def preprocess(
    *,
    content: str,
    instance: Instance,
    candidates: Sequence[ToolCandidate],
    role: str,
    previous_assistant: str | None,
    mate_categories: Iterable[str],
    requested_tier: str | None = None,
    requested_tools: Sequence[str] | None = None,
    fallback_language: str | None = None,
) -> Preprocessed:
    """Every local decision for one message (no I/O; about a millisecond)."""
    text = strip_invisible(content)
    language = detect_language(
        text, fallback=fallback_language or instance.default_language or "en"
    )
    tier, reason = choose_tier(
        text, previous_assistant=previous_assistant, requested=requested_tier, role=role
    )
    return Preprocessed(
        content=text,
        language=language,
        tier=tier,
        model=tier_model(tier, instance),
        reason=reason,
        tools=preselect_tools(text, candidates, requested=requested_tools),
        mate_category=choose_mate_category(text, mate_categories),
        memory_categories=memory_categories(text),
        safety=heuristic_safety(text),
    )
