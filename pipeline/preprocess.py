"""Pre-processing (docs/architecture.md §6): local, millisecond decisions before the main model.

``preprocess(...)`` runs without any model call: invisible Unicode stripped, language of
the instruction (not of quoted material) by py3langid, tools preselected lexically among
the instance's enabled tools (explicit mentions win; client overrides only within the
user's role), tier by complexity signals (an unhappy user gets a higher tier), mate by
category, memory categories, and heuristic safety scores.

Model-based parts, each one fast-tier call with a JSON schema: ``model_safety_check``
(first messages, or when a heuristic fired), ``amodel_tools_merge`` (first messages of
instances with ``model_tool_preselection``: the model's tool picks added to the local
ones) and ``title_generate`` (first messages, concurrently with the main call).
Instances whose fast tier is a base model (the bundled local one:
``openmates.llm.is_base_model``) skip them (``heuristic_title`` instead).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.utils.translation import get_language_info

from instances.models import Instance, InstanceMember
from instances.services import ainstance_tier_secrets_get
from openmates import llm
from pipeline import language as languages
from pipeline import tool_match
from pipeline.injection import strip_invisible

__all__ = ["strip_invisible"]

# Members may lower the tier; only instance owners and admins may ask for ``heavy``.
# The tiers a client may ask for per role: the instance membership's table, which the
# chat page's tier picker offers too.
TIERS_BY_ROLE = InstanceMember.TIERS_BY_ROLE
MAX_TOOLS = 5
# A question that reads like a memory save is a lookup when the lookup's regression gives
# it at least this (and more than the save's): set on the dev, held and fresh splits.
MEMORY_QUESTION_PROBABILITY = 0.3
HARMFUL_REJECT = 7.0
MISUSE_REJECT = 8.0
HEURISTIC_FIRES = 4.0
LANGUAGE_MIN_CONFIDENCE = 0.3
logger = logging.getLogger(__name__)
MEMORY_CATEGORIES = ("preference", "fact", "event", "relationship", "decision", "general")

# --- language --------------------------------------------------------------------------

_FENCE_RE = re.compile(r"```.*?(```|$)", re.DOTALL)
_INLINE_CODE_RE = re.compile(r"`[^`\n]*`")
_QUOTE_LINE_RE = re.compile(r"^\s*>.*$", re.MULTILINE)
_URL_RE = re.compile(r"\b(?:https?://|www\.)\S+", re.IGNORECASE)
# Quotations in the styles of the supported languages: straight and curly double quotes,
# the closing-quote pair of Swedish and Finnish, the low-high pairs of German, Polish,
# Czech and Romanian, single curly quotes, guillemets both ways (French, Russian; German,
# Danish), single guillemets, Japanese corner brackets and Chinese title marks, and a long
# phrase in straight single quotes (not from one elided word to another: "c'est … aujourd'hui").
# Written as escapes: the marks look like others.
_QUOTED_RE = re.compile(
    '"[^"]{3,}"|\u201c[^\u201d]{3,}\u201d|\u201d[^\u201d]{3,}\u201d'
    "|\u00ab[^\u00bb]{3,}\u00bb|\u00bb[^\u00ab]{3,}\u00ab"
    "|\u201e[^\u201c\u201d]{3,}[\u201c\u201d]|\u201a[^\u2018]{3,}\u2018|\u2018[^\u2019]{2,}\u2019"
    "|\u2039[^\u203a]{3,}\u203a|\u300c[^\u300d]{3,}\u300d|\u300e[^\u300f]{2,}\u300f"
    "|\u300a[^\u300b]{2,}\u300b|(?<!\\w)'[^']{24,}'(?!\\w)"
)
# A phrase in single quotes ("what does 'it's not my cup of tea' mean?"): opened by a quote
# not inside or after a word ("what's", "aujourd'hui" open none), closed by one not
# followed by a letter; apostrophes between letters inside it are part of it.
_SINGLE_QUOTED_RE = re.compile(r"(?<![\w'])'(?:[^'\n]|(?<=\w)'(?=\w)){2,60}'(?!\w)")
_COLON_TAIL_RE = re.compile(r"^(?P<head>[^:\uff1a\n]+?)\s*[:\uff1a]\s*(?P<tail>\S.*)$", re.DOTALL)
# Verbs that make a head of a word or three before a colon (or a full-width one) the
# instruction and the rest its material ("Übersetze: I'm running late", "Traduis : …"),
# by language.
_INSTRUCTION_VERB_WORDS: dict[str, str] = {
    "en": "translate summarize summarise rewrite rephrase paraphrase proofread correct explain "
    "mean",
    "de": "übersetze übersetz übersetzen zusammenfassen korrigiere korrigieren erkläre "
    "erklären umformulieren",
    "fr": "traduis traduisez traduire résume résumez résumer corrige corrigez corriger reformule "
    "reformulez reformuler explique expliquez",
    "es": "traduce traducir traduzca resume resumir corrige corregir explica",
    "it": "traduci tradurre traducimi riassumi riassumere correggi correggere spiega",
    "pt": "traduza traduzir traduz resuma resumir corrija corrigir explique",
    "nl": "vertaal vertalen samenvatten verbeter betekent",
    "pl": "przetłumacz przetłumaczyć streść popraw",
    "ru": "переведи переведите перевести перескажи исправь",
    "uk": "переклади перекладіть перекласти",
    "sv": "översätt",
    "da": "oversæt",
    "no": "oversett",
    "fi": "käännä",
    "tr": "çevir tercüme",
    "ja": "翻訳 翻訳して 要約 要約して 訳して",
    "zh": "翻译 翻譯 总结 總結",
    "ko": "번역 번역해 번역해줘 요약",
    "cs": "přelož přeložit shrň oprav",
    "sk": "prelož preložiť zhrň oprav",
    "hr": "prevedi sažmi ispravi",
    "sr": "prevedi sažmi ispravi",
    "sl": "prevedi povzemi popravi",
    "ro": "tradu traduce rezumă corectează",
    "hu": "fordítsd fordítsa foglald javítsd",
    "ca": "tradueix resumeix corregeix",
    "id": "terjemahkan ringkas ringkaskan",
    "vi": "dịch",
    "et": "tõlgi",
    "lv": "iztulko pārtulko",
    "lt": "išversk",
    "af": "vertaal",
}


def _verb_owners() -> dict[str, tuple[str, ...]]:
    owners: dict[str, tuple[str, ...]] = {}
    for language, verbs in _INSTRUCTION_VERB_WORDS.items():
        for verb in verbs.split():
            owners[verb] = (*owners.get(verb, ()), language)
    return owners


# Per verb, the languages that write it, in the table's order ("corrige": French and
# Spanish; "explique": French and Portuguese).
_INSTRUCTION_VERBS = _verb_owners()
_CJK_VERBS = tuple(
    (verb, owners[0])
    for verb, owners in _INSTRUCTION_VERBS.items()
    if owners[0] in ("ja", "zh", "ko")
)
# Besides the verb, such a head has at most this many words ("Bitte übersetze",
# "Please translate", "Por favor traduce").
INSTRUCTION_HEAD_WORDS = 3

_identifier_lock = threading.Lock()
_identifier: Any = None


def _language_identifier() -> Any:
    global _identifier
    with _identifier_lock:
        if _identifier is None:
            from py3langid import langid

            identifier = langid.LanguageIdentifier.from_modelpath(
                langid.MODEL_DIR / langid.MODEL_FILE, norm_probs=True
            )
            known = set(identifier.nb_classes)
            identifier.set_languages(
                [
                    code
                    for code in (*languages.SUPPORTED_LANGUAGES, *languages.ALIASES)
                    if code in known
                ]
            )
            _identifier = identifier
    return _identifier


def warm_up() -> None:
    """Load the language model and the tools' example vectors now (≈1 s) instead of on
    the first message."""
    _language_identifier()
    tool_match.warm_up()


def instruction_text(text: str) -> str:
    """The part of ``text`` that is the user's own instruction (quoted material removed).

    Removes code, URLs, ``>`` quote lines, quotations and, in "translate this: …" shapes,
    the material after the colon.
    """
    stripped = _quoted_removed(text)
    match = _COLON_TAIL_RE.match(stripped.strip())
    if match:
        head = match.group("head")
        if (len(head.split()) >= 3 and len(head) >= 8) or instruction_verb_language(head):
            stripped = head
    else:
        stripped = _instruction_head(stripped.strip()) or stripped
    return " ".join(stripped.split()) or " ".join(text.split())


def _quoted_removed(text: str) -> str:
    """``text`` without code, URLs, ``>`` quote lines and quotations (line breaks kept)."""
    stripped = _FENCE_RE.sub(" ", text)
    stripped = _INLINE_CODE_RE.sub(" ", stripped)
    stripped = _URL_RE.sub(" ", stripped)
    stripped = _QUOTE_LINE_RE.sub(" ", stripped)
    stripped = _QUOTED_RE.sub(" ", stripped)
    return _SINGLE_QUOTED_RE.sub(" ", stripped)


# A last line of at most this many words after material at least as long can be the
# request about it.
TAIL_INSTRUCTION_WORDS = 12
_QUESTION_END_RE = re.compile(r"[?\uff1f\u061f]\s*$")


def _instruction_tail(text: str) -> str | None:
    """The last line of ``text`` (quotations removed) when it is a request about the
    longer material pasted above it ("<an English e-mail>\\n\\nKannst du das
    zusammenfassen?"): two to :data:`TAIL_INSTRUCTION_WORDS` words, a question or holding
    an instruction verb, after at least as many words; else None. A signature
    ("Best regards,") or a name under a letter is no request."""
    material, _, tail = _quoted_removed(text).strip().rpartition("\n")
    words = tail.split()
    if not material or not 2 <= len(words) <= TAIL_INSTRUCTION_WORDS:
        return None
    if len(material.split()) < len(words):
        return None
    verbs = (word.strip(".,:;!¡¿?\"'«»").casefold() in _INSTRUCTION_VERBS for word in words)
    if _QUESTION_END_RE.search(tail) or any(verbs):
        return " ".join(words)
    return None


# Where an instruction sentence ends and unquoted material may follow: a sentence end, or
# a dash between spaces ("Translate this please - Je suis …", "翻訳して。The train …").
_HEAD_END_RE = re.compile(r"[?!.]\s+|[\u3002\uff1f\uff01]\s*|\s[-\u2013\u2014]\s")
# A head ending there is an instruction when it has at most this many words.
HEAD_SENTENCE_WORDS = 8


def _instruction_head(text: str) -> str | None:
    """The first sentence of ``text`` when it is a short instruction about material that
    follows unquoted ("Kannst du das übersetzen? The meeting …", "Corrige les fautes stp.
    I has went …"): at most :data:`HEAD_SENTENCE_WORDS` words holding an instruction verb
    (:data:`_INSTRUCTION_VERBS`, not one of :data:`_ABOUT_VERBS`), with more text after
    it; else None."""
    end = _HEAD_END_RE.search(text)
    if end is None or end.end() >= len(text):
        return None
    head = text[: end.start()]
    words = [word.strip(".,!¡¿?\"'«»") for word in head.casefold().split()]
    if not 0 < len(words) <= HEAD_SENTENCE_WORDS:
        return None
    if any(w in _INSTRUCTION_VERBS and w not in _ABOUT_VERBS for w in words):
        return head
    return head if _cjk_verb_language(head) else None


# Instruction verbs about a topic rather than material: "Explain this. What is 17 times
# 23?" asks the second sentence.
_ABOUT_VERBS = frozenset(
    ["explain", "erkläre", "erklären", "explique", "expliquez", "explica", "spiega"]
)


def _cjk_verb_language(head: str) -> str | None:
    # Chinese, Japanese and Korean write no spaces between a verb and its object
    # ("これを英語から訳して", "帮我翻译一下"): their verbs are looked for inside a short head.
    if len(head) > 20:
        return None
    return next((language for verb, language in _CJK_VERBS if verb in head), None)


def tool_vectors_prefetch(content: str) -> None:
    """Embed what :func:`preprocess` will compare with the tools for ``content`` (its
    :func:`tool_subject` and that one's clauses) into the vector cache, so that the
    preselection inside the turn finds them made. Blocking (about 2 ms a text): the turn
    runs it in a thread while the chat's history loads."""
    subject = tool_subject(strip_invisible(content))
    tool_match.vectors_prefetch(subject)


def instruction_verb_language(head: str, fallback: str = "") -> str | None:
    """The language of a short instruction head ("Übersetze" → "de", "Please translate"
    → "en", "翻訳して" → "ja"): at most :data:`INSTRUCTION_HEAD_WORDS` words, one of them
    an instruction verb of :data:`_INSTRUCTION_VERBS`; None for any other head. A verb
    several languages write ("Corrige mon texte", "Corrige el texto") is in the one of
    them whose function words the head has more of, else in ``fallback`` (an ISO 639
    code) when it is one of them, else in the first."""
    words = [word.strip(".,:;!¡¿?\"'«»\uff1a") for word in head.casefold().split()]
    words = [word for word in words if word]
    if not 0 < len(words) <= INSTRUCTION_HEAD_WORDS:
        return None
    owners = next((_INSTRUCTION_VERBS[w] for w in words if w in _INSTRUCTION_VERBS), ())
    if len(owners) > 1:
        hits = {
            owner: sum(w in languages.FUNCTION_WORDS.get(owner, ()) for w in words)
            for owner in owners
        }
        best = max(hits.values())
        leaders = [owner for owner in owners if hits[owner] == best]
        base = _base(fallback) if fallback else ""
        return base if base in leaders else leaders[0]
    return owners[0] if owners else _cjk_verb_language(head)


# Short messages langid cannot place (a word or two), by language, "|"-separated. A
# phrase listed for several languages is ambiguous: the fallback wins when it is one of
# them. Words every language uses ("ok", "super", "cool") are not listed: they keep the
# fallback.
_SHORT_MESSAGES: dict[str, str] = {
    "en": "thanks|thank you|thank you very much|thanks a lot|thx|cheers|hello|hi|hey|yes|"
    "yeah|please|bye|goodbye|good morning|good night|sorry|great|continue|go on|more|why|"
    "tell me more",
    "de": "danke|danke schön|dankeschön|vielen dank|danke sehr|bitte|hallo|guten morgen|"
    "guten tag|guten abend|gute nacht|tschüss|nein|genau|weiter|mehr|warum|gerne|nein danke|"
    "entschuldigung|servus|moin",
    "fr": "merci|merci beaucoup|bonjour|bonsoir|salut|oui|non|s'il te plaît|"
    "s'il vous plaît|au revoir|pourquoi|d'accord|bonne nuit",
    "es": "gracias|muchas gracias|hola|sí|por favor|adiós|buenos días|buenas noches|perdón|"
    "por qué|vale|claro",
    "it": "grazie|grazie mille|ciao|buongiorno|buonasera|buonanotte|sì|per favore|perché|"
    "prego|arrivederci",
    "pt": "obrigado|obrigada|muito obrigado|muito obrigada|olá|oi|bom dia|boa noite|"
    "por favor|sim|tchau|adeus|claro|beleza|valeu",
    "nl": "dank je|dank u|dankjewel|bedankt|hallo|goedemorgen|doei|nee|graag|nee dank je",
    "sv": "tack|tack så mycket|hej|hej då|nej|nej tack|ja tack|igen",
    "da": "mange tak|tusind tak|tak|hej|nej|nej tak|ja tak|igen",
    "no": "takk|tusen takk|mange takk|hei|ha det|nei|nei takk|ja takk|igjen",
    "fi": "kiitos|moi|hei|kyllä|ei kiitos",
    "pl": "dziękuję|dzięki|cześć|witam|dzień dobry|proszę|tak|dobrze|jasne|rozumiem|nie|nie wiem|"
    "oczywiście|świetnie|poproszę|przepraszam|dobranoc|do widzenia|tak proszę",
    "cs": "děkuji|děkuju|díky|dobrý den|ahoj|ano|nevím|rozumím|prosím|dobře|jasně|"
    "promiň|dobrou noc|na shledanou|ano prosím",
    "sk": "ďakujem|ďakujem pekne|áno|neviem|prosím|dobrý deň|dovidenia|áno prosím",
    "ca": "gràcies|moltes gràcies|bon dia|bona nit|bona tarda|adéu|d'acord|si us plau|"
    "sisplau|no ho sé|molt bé|fins demà|fins aviat|perdó",
    "tr": "teşekkürler|teşekkür ederim|sağol|sağ ol|merhaba|evet|hay\u0131r|tamam",
    "ru": "спасибо|большое спасибо|привет|здравствуйте|да|нет|пожалуйста|пока",
    "uk": "дякую|привіт|будь ласка|так|ні",
    "bg": "благодаря|здравей|моля",
    "ro": "mulțumesc|mulțumesc frumos|mersi|bună ziua|noapte bună",
    "hu": "köszönöm|köszönöm szépen|köszi|szia|igen|nem",
    "fa": "ممنون|مرسی|خیلی ممنون|خداحافظ|بله|سلام",
    "ar": "شكرا|شكرا جزيلا|شكراً|مرحبا|نعم|مع السلامة|سلام",
    "tl": "salamat|salamat po|maraming salamat|paalam|opo",
    # Croatian, Serbian and Slovene thank alike: the chat's language when it is one.
    "hr": "hvala|hvala lijepa|hvala puno|hvala ti|u redu",
    "sr": "hvala|hvala puno|hvala ti|u redu|хвала|хвала пуно",
    "sl": "hvala|najlepša hvala|hvala lepa|v redu",
    "et": "aitäh|tänan|suur aitäh|aitäh väga",
    "lv": "paldies|liels paldies|sveiki|labdien",
    "lt": "ačiū|labai ačiū|sveiki|laba diena",
    "sq": "faleminderit|përshëndetje",
    "is": "takk fyrir|kærar þakkir|góðan daginn",
    "ga": "go raibh maith agat|dia duit|slán",
    "cy": "diolch|diolch yn fawr|bore da|hwyl fawr",
    "eu": "eskerrik asko|kaixo|agur",
    "af": "dankie|baie dankie|goeie môre",
    "id": "terima kasih|makasih|selamat pagi|sama sama",
    "vi": "cảm ơn|cám ơn|cảm ơn bạn|xin chào|vâng",
    "sw": "asante|asante sana|habari|jambo|ndiyo|hapana|karibu",
    "mk": "благодарам|благодарам многу|фала|фала многу",
    "az": "çox sağ ol|təşəkkür edirəm|çox təşəkkür|bəli",
    "ja": "ありがとう|ありがとうございます|こんにちは|はい|いいえ|すみません",
    "zh": "谢谢|谢谢你|你好|好的|再见|是的",
}
# Greetings and farewells by the time of day: set phrases an n-gram model cannot place
# from two words ("Buenas tardes" in a Portuguese chat, "Доброе утро" in a Ukrainian one,
# "早上好" in a Japanese one). Turkish and Azerbaijani dotless i as an escape (\u0131).
_GREETINGS: dict[str, str] = {
    "en": "good afternoon|good evening|how are you",
    "de": "schönen tag|schönes wochenende|bis morgen|bis bald|alles gute|gute besserung|"
    "kein problem|keine ahnung|grüß gott",
    "fr": "bonne journée|bonne soirée|à demain|à bientôt|bon week end",
    "es": "buenas tardes|buenas|hasta luego|hasta mañana|buen día|buen fin de semana",
    "it": "buona giornata|buona serata|a domani|a presto|buon fine settimana",
    "pt": "boa tarde|até amanhã|até logo|bom fim de semana|tudo bem|boa semana",
    "nl": "goedenavond|goedemiddag|goedenacht|tot morgen|fijne dag",
    "sv": "god morgon|god kväll|god natt|ha det bra|hej hej",
    "da": "godmorgen|god morgen|godaften|godnat|hej hej|god dag",
    "no": "god morgen|god kveld|god natt|ha det bra|hei hei|god dag",
    "fi": "hyvää huomenta|hyvää iltaa|hyvää yötä|hyvää päivää|moikka|kiitti",
    "pl": "dobry wieczór|na razie|miłego dnia",
    "cs": "dobré ráno|dobrý večer|ahoj|hezký den",
    "sk": "dobré ráno|dobrý večer|ahoj|pekný deň",
    "ru": "доброе утро|добрый день|добрый вечер|спокойной ночи|до свидания",
    "uk": "доброго ранку|добрий ранок|добрий день|добрий вечір|на добраніч|до побачення|привіт",
    "be": "добрай раніцы|добры дзень|добры вечар|дабранач|дзякуй",
    "bg": "добро утро|добър ден|добър вечер|лека нощ",
    "mk": "добро утро|добар ден|добра вечер",
    "hr": "dobro jutro|dobar dan|dobra večer|laku noć",
    "sr": "dobro jutro|dobar dan|dobro veče|laku noć|добро јутро|добар дан|лаку ноћ",
    "sl": "dobro jutro|dober dan|dober večer|lahko noč",
    "tr": "günayd\u0131n|iyi akşamlar|iyi geceler|iyi günler|kolay gelsin|hoşça kal",
    "ro": "bună dimineața|bună seara|bună|la revedere",
    "hu": "jó reggelt|jó estét|jó éjszakát|jó napot|viszlát",
    "et": "tere|tere hommikust|tere õhtust|head ööd|head aega",
    "lv": "labrīt|labvakar|ar labu nakti",
    "lt": "labas|labas rytas|labas vakaras|labanakt",
    "ga": "dia dhuit|maidin mhaith|oíche mhaith",
    "cy": "noswaith dda|nos da",
    "eu": "egun on|arratsalde on",
    "ca": "bon vespre",
    "sq": "mirëmëngjes|mirëmbrëma|natën e mirë",
    "az": "sabah\u0131n\u0131z xeyir|axşam\u0131n\u0131z xeyir",
    "id": "selamat siang|selamat sore|selamat malam",
    "vi": "chào buổi sáng|chúc ngủ ngon|tạm biệt",
    "tl": "magandang umaga|magandang hapon|magandang gabi",
    "sw": "habari za asubuhi|usiku mwema|habari yako",
    "af": "goeienag|goeiemiddag|totsiens",
    "zh": "早上好|早安|下午好|晚上好|晚安|不客气|没问题",
}
_SHORT_MESSAGES = {
    language: "|".join(filter(None, (_SHORT_MESSAGES.get(language), _GREETINGS.get(language))))
    for language in dict.fromkeys([*_SHORT_MESSAGES, *_GREETINGS])
}


def _phrase_languages(table: dict[str, str]) -> dict[str, tuple[str, ...]]:
    languages: dict[str, tuple[str, ...]] = {}
    for language, phrases in table.items():
        for phrase in phrases.split("|"):
            languages[phrase] = (*languages.get(phrase, ()), language)
    return languages


# What a question about quoted words leaves once the quote is gone ("Vad betyder 'to be
# on the fence'?" → "vad betyder"): the question's words say its language.
_QUOTE_QUESTIONS: dict[str, str] = {
    "en": "what does mean|what is|what's|meaning of|what's the meaning of|how do you say"
    "|how do i say|what does it mean",
    "de": "was bedeutet|was heißt|was bedeutet eigentlich|was heißt eigentlich|wie sagt man"
    "|was meint man mit",
    "fr": "que veut dire|qu'est ce que veut dire|ça veut dire quoi|que signifie"
    "|comment dit on|qu'est ce que ça veut dire",
    "es": "qué significa|que significa|qué quiere decir|que quiere decir|cómo se dice|como se dice",
    "pt": "o que significa|o que quer dizer|como se diz|o que é",
    "it": "cosa significa|che significa|cosa vuol dire|che vuol dire|come si dice",
    "nl": "wat betekent|wat is de betekenis van|hoe zeg je",
    "sv": "vad betyder|vad menas med|hur säger man",
    "da": "hvad betyder|hvordan siger man",
    "no": "hva betyr|hvordan sier man",
    "pl": "co znaczy|co oznacza|jak się mówi|co to znaczy",
    "cs": "co znamená|co to znamená|jak se řekne",
    "fi": "mitä tarkoittaa|mitä tämä tarkoittaa|miten sanotaan",
    "tr": "ne demek|ne anlama geliyor|ne demektir|ne anlama gelir",
    "ru": "что значит|что означает|как сказать|как будет",
    "uk": "що означає|що значить|як сказати|як буде",
    "ro": "ce înseamnă|ce inseamna|cum se spune",
    "hu": "mit jelent|mit jelent az hogy|hogy mondják",
    # The same questions in more of the supported Latin-script languages (from their
    # grammars, each its own "what does … mean" and "how do you say …"); one two
    # languages write ("kako se kaže") keeps the chat's language when it is one of them.
    "ca": "què vol dir|que vol dir|què significa|com es diu",
    "sk": "čo znamená|čo to znamená|ako sa povie",
    "hr": "što znači|što znači riječ|kako se kaže",
    "sr": "šta znači|šta znači reč|kako se kaže",
    "sl": "kaj pomeni|kaj pomeni beseda|kako se reče",
    "id": "apa arti|apa artinya|apa arti kata|apa maksud|apa maksudnya|artinya apa",
    "vi": "nghĩa là gì|có nghĩa là gì",
    "tl": "ano ang ibig sabihin ng|ano ibig sabihin ng",
    "et": "mida tähendab",
    "lv": "ko nozīmē",
    "lt": "ką reiškia",
    "af": "wat beteken",
    "sw": "maana ya",
}
_SHORT_LANGUAGES = _phrase_languages(
    {
        language: "|".join(
            filter(None, (_SHORT_MESSAGES.get(language), _QUOTE_QUESTIONS.get(language)))
        )
        # In the tables' order: a phrase's first language is its default.
        for language in dict.fromkeys([*_SHORT_MESSAGES, *_QUOTE_QUESTIONS])
    }
)

# Below this many words, langid needs SHORT_TEXT_MIN_CONFIDENCE: on a word or two it is
# often sure of the wrong language ("Explain again" → Scottish Gaelic at 0.34).
SHORT_TEXT_WORDS = 4
SHORT_TEXT_MIN_CONFIDENCE = 0.5
# A single word (a loanword or a name more often than a change of language: "Weekend"
# in an Italian chat, py3langid Dutch at 0.61) needs this much.
ONE_WORD_MIN_CONFIDENCE = 0.8
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
# Letters that tell one language of a shared script from the others, or a few of them
# (the languages that write it, the first one the default): a letter two languages write
# keeps the chat's language when it is one of them ("Скопје" in a Macedonian chat, "Мінск"
# in a Belarusian one). Letters one language writes come first: "Київ" is Ukrainian.
_TELLTALE_LETTERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("їєґ", ("uk",)),
    ("ў", ("be",)),
    ("әғқңөұһ", ("kk",)),
    ("ђћ", ("sr",)),
    ("ѓќѕ", ("mk",)),
    # Urdu's own letters (tteh, ddal, rreh, noon ghunna, bari yeh, heh goal, do-chashmi
    # heh), before Persian: Urdu writes Persian's letters too.
    ("ٹڈڑںےہھ", ("ur",)),
    ("پچژگکی", ("fa",)),
    # Characters Japanese does not write: simplified forms (Japanese keeps 時, 気, 楽, 晩
    # where Chinese writes 时, 气, 乐, 晚), traditional forms Japanese simplified its own
    # way (氣, 們, 說, 對), and Chinese pronouns and particles (你, 吗, 呢; not 的, 是:
    # 目的, 是非 are Japanese too; 了 in _CHINESE_LE_RE). Shared forms (写, 担, 旧, 灯, 装,
    # 個, 為, 給, 漢, 謝, 還) are left out.
    (
        "吗呢吧么们这说没还对为谢个样什你她它哪怎啊呀嘛吃喝给让从过时间东车门问题请现发长开"
        "关见岁钱书电脑网买卖读听话语认识记边远爱欢应该够办场带乐气汉华晚几很继价简换举详级"
        "纸线红绿蓝设计务业节报经结约组终细练习飞马鱼鸟龙闻阅顺须领频风饭馆验处备复头实导层"
        "币帮广张归录忆态战护无显术权杂极构树桥检毕满热环疗确离种积稳笔签类纪纯绍统续维缩"
        "联脸药获虽补观规视览订讨训议讲许论访证评诉词译试诗调谁谈负财货质购贵费资赛转轮软"
        "轻较输达运进连选释铁银错键闭队阳阶际陆险难项预额饮鸡齐"
        "嗎麼們這說沒對樣讓從裡發關歲錢腦賣寫讀聽邊歡應夠辦帶樂氣國會學實體來覺點",
        ("zh",),
    ),
    # Written by two languages of the script each: Ukrainian and Belarusian i (U+0456);
    # Serbian and Macedonian je, lje, nje, dzhe (U+0458, U+0459, U+045A, U+045F).
    ("\u0456", ("uk", "be")),
    ("\u0458\u0459\u045a\u045f", ("sr", "mk")),
)


# The Chinese aspect particle 了, outside the Japanese words that write it (了解, 完了, 終了,
# 修了, 満了, 魅了): "明白了", "知道了" are Chinese.
_CHINESE_LE_RE = re.compile("(?<![\u5b8c\u7d42\u4fee\u6e80\u9b45])\u4e86(?!\u89e3)")


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
    writers = _SCRIPT_LANGUAGES[script]
    # A letter only one language of the script writes outweighs the chat's language
    # ("明白了吗" in a Japanese chat, Ukrainian "\u0456" in a Russian one), and so do
    # words only one of its close languages writes ("Це неправда": Ukrainian "це").
    for telltale, owners in _TELLTALE_LETTERS:
        if owners[0] in writers and any(ch in telltale for ch in sample):
            if _base(fallback) in owners:
                return fallback
            own = languages.own_words_language(sample, owners[0])
            return own if own in owners else owners[0]
    if script == "han" and _CHINESE_LE_RE.search(sample):
        return "zh"
    own = languages.own_words_language(sample, writers[0])
    if own is not None:
        return own
    if _base(fallback) in writers:
        return fallback
    return writers[0]


def detect_language(text: str, *, fallback: str) -> str:
    """ISO 639 code of the instruction in ``text``; ``fallback`` (the chat's previous
    language, else the instance default) when unsure.

    In order: a known short message ("Danke", "Merci", "ありがとう", or what a question
    about quoted words leaves: "Vad betyder 'on the fence'?"), a script only one language
    writes (kana, hangul, Greek, ...), py3langid restricted to
    :data:`pipeline.language.SUPPORTED_LANGUAGES` when confident enough (more so for texts
    under :data:`SHORT_TEXT_WORDS` words, which keep ``fallback`` when it is nearly as
    likely), close pairs settled by their own letters and words
    (:func:`pipeline.language.close_pair_language`), a guess from a shared script
    (Cyrillic, Arabic, Han, Devanagari), then ``fallback``. Only a supported language or
    ``fallback`` comes out, and ``fallback`` only when supported (else ``"en"``).
    """
    fallback = languages.supported_fallback(fallback)
    sample = instruction_text(text)
    if sample == " ".join(_quoted_removed(text).split()):
        # No instruction before its material: one after it ("<pasted text> Can you
        # translate this?") says the answer's language.
        sample = _instruction_tail(text) or sample
    # A one-word instruction ("Übersetze: …") is too short for py3langid; its verb says.
    told = instruction_verb_language(sample, fallback)
    if told:
        return fallback if _base(fallback) == told else told
    known = _short_message_language(sample, fallback) or _script_language(
        sample, fallback, shared=False
    )
    if known:
        return known
    if _names_only(sample, fallback):
        return fallback
    if _latin_share(sample) >= 0.9 and languages.romanized_hindustani(sample):
        # Hindi-Urdu in Latin letters: the chat's of the two, else Hindi.
        return fallback if _base(fallback) in ("hi", "ur") else "hi"
    if sum(ch.isalpha() for ch in sample) >= 4:
        guessed = _identified_language(sample, fallback)
        if guessed:
            return guessed
        if _latin_against(sample, fallback):
            # "Convert 5 miles to km" after a Japanese message is not Japanese, however
            # unsure py3langid is of which Latin language it is.
            return _latin_guess(sample)
    return _script_language(sample, fallback, shared=True) or fallback


def _name_like(word: str) -> bool:
    # A capitalised word, an acronym ("BMW"), a model number ("S24", "256GB") or a
    # brand's inner capital ("iPhone", "PlayStation"); not a shouted word ("WHAT").
    letters = [ch for ch in word if ch.isalpha()]
    if not letters or any(ch.isdigit() for ch in word):
        return True
    shouted = len(letters) > 3 and "".join(letters).isupper()
    capitalised = letters[0].isupper() and not shouted
    inner = any(ch.islower() for ch in letters) and any(ch.isupper() for ch in letters[1:])
    return capitalised or inner


def _product_like(word: str) -> bool:
    return any(ch.isalpha() for ch in word) and (
        any(ch.isdigit() for ch in word) or any(ch.isupper() for ch in word[1:])
    )


def _names_only(sample: str, fallback: str) -> bool:
    """Whether ``sample`` is two words or more of names only ("iPhone 15 Pro Max 256GB",
    "Samsung Galaxy S24"), which keep the chat's language: with a model number or a
    brand's inner capital, or any such names in Latin letters in a chat of another
    script. A sentence has words in lower case."""
    words = [word.strip(".,;:!?()\"'") for word in sample.split()]
    words = [word for word in words if word]
    if len(words) < 2 or not all(_name_like(word) for word in words):
        return False
    if _base(fallback) in _NON_LATIN:
        return _latin_share(sample) >= 0.9
    return any(_product_like(word) for word in words)


# Supported languages not written in Latin letters (Serbian, written in Cyrillic and in
# Latin letters alike, is not among them).
_NON_LATIN = frozenset(
    [
        "am",
        "ar",
        "be",
        "bg",
        "bn",
        "el",
        "fa",
        "gu",
        "he",
        "hi",
        "hy",
        "ja",
        "ka",
        "kk",
        "km",
        "kn",
        "ko",
        "mk",
        "ml",
        "mn",
        "mr",
        "ne",
        "pa",
        "ps",
        "ru",
        "si",
        "ta",
        "te",
        "th",
        "uk",
        "ur",
        "zh",
    ]
)


def _latin_against(sample: str, fallback: str) -> bool:
    """True when ``sample`` is a sentence (three words or more: a name or two, "iPhone
    15", keeps the chat's language) in Latin letters and ``fallback`` is not written in
    them."""
    if len(sample.split()) < 3 or _base(fallback) not in _NON_LATIN:
        return False
    return _latin_share(sample) >= 0.9


def _latin_share(sample: str) -> float:
    """The share (0 to 1) of ``sample``'s letters that are Latin (below U+0250)."""
    letters = [ch for ch in sample if ch.isalpha()]
    return sum(ch < "\u0250" for ch in letters) / len(letters) if letters else 0.0


def _latin_guess(sample: str) -> str:
    """py3langid's most likely supported Latin-script language for ``sample``, else
    English."""
    for code, _ in _language_identifier().rank(sample):
        language = languages.supported(str(code))
        if language is not None and language not in _NON_LATIN:
            return language
    return "en"


# On a short text, the fallback stays when py3langid gives it at least this share of the
# winner's probability (a word or two carries little evidence against the chat's language).
SHORT_FALLBACK_RATIO = 0.2
# On a longer text, a close language of the chat's (Danish in a Norwegian chat) keeps the
# chat's when py3langid gives it at least this share of the winner's probability and the
# close pair's own letters and words do not favour the winner: the two spell many
# sentences alike.
CLOSE_FALLBACK_RATIO = 0.25


def _identified_language(sample: str, fallback: str) -> str | None:
    ranked = _language_identifier().rank(sample)
    top, confidence = ranked[0]
    short = len(sample.split()) < SHORT_TEXT_WORDS
    needed = SHORT_TEXT_MIN_CONFIDENCE if short else LANGUAGE_MIN_CONFIDENCE
    if len(sample.split()) == 1:
        needed = ONE_WORD_MIN_CONFIDENCE
    language = languages.supported(str(top))
    if language is not None:
        # py3langid splits Norwegian between "nb" and "nn": its confidence in the
        # language is the two labels' sum ("Gjør det kortere": 0.46 and 0.38).
        confidence = _probability_of(ranked, language)
    runners_up = [
        code for code in (languages.supported(str(c)) for c, _ in ranked[:4]) if code is not None
    ]
    if language is None or (confidence < needed and not _clear_lead(ranked, fallback, short)):
        # Unsure: a text that is mostly another candidate's function words ("Explain
        # again" in a Spanish chat) is in that language; else the caller's fallback.
        base = _base(fallback)
        worded = (_worded_language(sample) if short else None) or languages.close_pair_language(
            sample, base
        )
        if worded != base:
            return worded
        # py3langid's unsure first choice, settled within its close group by the words
        # only one member writes.
        own = languages.own_words_language(sample, language) if language else None
        if own is not None:
            return own
        chosen = languages.function_word_language(sample, base, runners_up)
        return chosen if chosen != base else None
    writes_script = _script_language(sample, fallback, shared=True) in (None, fallback)
    if short and writes_script:
        base = _base(fallback)
        # Words of one language only and none of the chat's ("Danke dir!", "Merci bien",
        # "Tak for hjælpen" in a Norwegian chat) say more than a few letters' n-grams.
        worded = _worded_language(sample) or languages.close_pair_language(sample, base)
        if worded != base:
            return worded
        if _probability_of(ranked, base) >= float(confidence) * SHORT_FALLBACK_RATIO:
            return fallback
    if language in languages.FUNCTION_WORDS or (
        language in _NON_LATIN and _latin_share(sample) > 0.5
    ):
        # A Latin-script language without a word list cannot be weighed by one: two of
        # its short words that English or Dutch also write ("a", "is"; "hoe", "kan")
        # would turn py3langid's sure Irish or Afrikaans into them. A guess in another
        # script than most of the letters is a borrowed term's pull ("What does 木漏れ日
        # mean?"); one in the letters' own script is no such pull.
        language = languages.function_word_language(
            sample, language, runners_up, margin=1 if _split(ranked, language) else 2
        )
    base = _base(fallback)
    close = _probability_of(ranked, base) >= float(confidence) * CLOSE_FALLBACK_RATIO
    kept = base if close else None
    return languages.close_pair_language(sample, language, kept, _likelihood(ranked))


def _likelihood(ranked: Sequence[tuple[Any, Any]]) -> dict[str, float]:
    """py3langid's probabilities (``rank``'s ``[(label, probability)]``) summed per
    supported language (its "nb" and "nn" are both Norwegian)."""
    likelihood: dict[str, float] = {}
    for code, probability in ranked:
        name = languages.supported(str(code))
        if name is not None:
            likelihood[name] = likelihood.get(name, 0.0) + float(probability)
    return likelihood


# py3langid spreads its probability over many Latin-script languages on a sentence of a
# few words with numbers or names ("Convert 5 miles to kilometers": English 0.30, then
# Norwegian 0.09): a first choice below LANGUAGE_MIN_CONFIDENCE still wins when it is at
# least this likely, this many times the second, and the chat's language is no contender.
CLEAR_LEAD_MIN_CONFIDENCE = 0.2
CLEAR_LEAD_RATIO = 3.0


def _clear_lead(ranked: Any, fallback: str, short: bool) -> bool:
    """Whether py3langid's first choice leads clearly enough to be taken below its
    confidence threshold (never on a text under :data:`SHORT_TEXT_WORDS` words)."""
    confidence = ranked[0][1]
    second = float(ranked[1][1]) if len(ranked) > 1 else 0.0
    return (
        not short
        and float(confidence) >= CLEAR_LEAD_MIN_CONFIDENCE
        and float(confidence) >= second * CLEAR_LEAD_RATIO
        and _probability_of(ranked, _base(fallback)) < float(confidence) * CLOSE_FALLBACK_RATIO
    )


# py3langid is split when its second supported language has at least this share of the
# first's probability ("Come si crea un virtualenv in Python?": Romanian 0.42, Italian
# 0.39): one function word more then tells them apart ("come").
SPLIT_RATIO = 0.75


def _split(ranked: Any, language: str) -> bool:
    """Whether py3langid's probability of its best supported language after ``language``
    is at least :data:`SPLIT_RATIO` of ``language``'s."""
    own = _probability_of(ranked, language)
    others = (languages.supported(str(code)) for code, _ in ranked[:4])
    second = next((code for code in others if code is not None and code != language), None)
    return second is not None and _probability_of(ranked, second) >= own * SPLIT_RATIO


def _probability_of(ranked: Any, language: str) -> float:
    """py3langid's probability of supported ``language`` (its labels summed: "nb", "nn")."""
    return sum(float(p) for code, p in ranked if languages.supported(str(code)) == language)


def _lexicon() -> dict[str, frozenset[str]]:
    words: dict[str, set[str]] = {}
    for language, phrases in _SHORT_MESSAGES.items():
        single = (phrase for phrase in phrases.split("|") if " " not in phrase)
        words.setdefault(language, set()).update(single)
    # A short message that is another language's function word counts for that one too:
    # French "non" is Italian's "not" ("Non è corretto").
    every = set().union(*words.values())
    for language, function_words in languages.FUNCTION_WORDS.items():
        words.setdefault(language, set()).update(function_words & every)
    return {language: frozenset(found) for language, found in words.items()}


# Per language, its one-word short messages (lower case: "danke", "merci", "vale",
# "tak"): a short text holding one says its language, whatever else it has ("Danke
# dir!", "Merci bien"). Words of longer phrases ("go" of "go on") say too little.
_LEXICON = _lexicon()
_QUESTION_OPENINGS = tuple(
    (phrase, language)
    for language, phrases in _QUOTE_QUESTIONS.items()
    for phrase in phrases.split("|")
    if " " in phrase
)


def _worded_language(sample: str) -> str | None:
    """The language of a short text by its words: the one whose one-word short messages
    (:data:`_LEXICON`) it holds more of than any other's, else the one whose question about
    quoted words it opens with ("vad betyder egentligen" once the quote is gone) or, for
    one of two words or more, ends with (Turkish asks after the word: "Awkward ne
    demek?"); None when neither or several tie."""
    tokens = re.findall(r"[^\W\d_]+(?:'[^\W\d_]+)?", sample.casefold())
    counts = {
        language: sum(token in words for token in tokens) for language, words in _LEXICON.items()
    }
    best = max(counts.values(), default=0)
    winners = [language for language, count in counts.items() if count == best]
    if best and len(winners) == 1:
        return winners[0]
    opening = " ".join(tokens) + " "
    found = {
        language
        for phrase, language in _QUESTION_OPENINGS
        if opening.startswith(phrase + " ") or opening.endswith(" " + phrase + " ")
    }
    return found.pop() if len(found) == 1 else None


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


def _stem(word: str) -> str:
    word = word.lower()
    for suffix in ("ing", "ions", "ion", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _terms(text: str) -> set[str]:
    return {_stem(w) for w in _WORD_RE.findall(text) if w.lower() not in _STOPWORDS}


@functools.lru_cache(maxsize=512)
def _description_terms(text: str) -> frozenset[str]:
    # Descriptions and hints repeat on every message: their terms are computed once.
    return frozenset(_terms(text))


@dataclass(frozen=True, slots=True)
class ToolCandidate:
    """A tool the instance has on, with the text preselection matches against."""

    name: str
    description: str
    hint: str = ""


# Words that ask for a tool by its name ("use the calculator", "mit dem web search"):
# a name alone ("I'm writing a calculator app") is a topic, not a request to use it.
_USE_WORDS = (
    r"use|using|uses|with|via|through|call|run|try|invoke|ask|utili[sz]e|nutze|benutze"
    r"|verwende|mit|utilise|utilisez|avec|usa|usar|usando|con|utilizza|gebruik|met|użyj"
    r"|używając|используй|\u0441 помощью"
)
_ARTICLES = r"the|your|a|an|my|den|dem|die|das|der|le|la|l'|el|il|lo|o|de|het|этим"
# What is built rather than used when it follows the name ("with the calculator app").
_BUILT = (
    r"app|apps|application|program|programme|project|class|function|code|widget|component"
    r"|module|script|library|ui|design|feature|page|website|game|clone"
)


@functools.lru_cache(maxsize=256)
def _mention_re(name: str) -> re.Pattern[str]:
    names = "|".join(dict.fromkeys(re.escape(n) for n in (name, name.replace("_", " "))))
    return re.compile(
        rf"@({names})\b|\b({_USE_WORDS})\s+(({_ARTICLES})\s*)?({names})"
        rf"(\s+tool)?\b(?!\s+({_BUILT})\b)",
        re.IGNORECASE,
    )


def explicit_tool_mentions(text: str, names: Iterable[str]) -> list[str]:
    """Tools ``text`` asks for by name: ``@calculator``, or the name after a word of use
    ("use the calculator", "with the web search", "benutze den calculator"). A name
    alone, or one followed by what is being built ("a calculator app"), is no request."""
    return [name for name in names if _mention_re(name).search(text)]


def preselect_tools(
    text: str,
    candidates: Sequence[ToolCandidate],
    *,
    requested: Sequence[str] | None = None,
    offer_all_up_to: int = 0,
    language: str = "en",
    semantic: bool = True,
) -> tuple[str, ...]:
    """Names of the tools to offer the main model, best first (at most ``MAX_TOOLS``);
    :func:`tool_choices` with the reasons."""
    return tuple(
        c.name
        for c in tool_choices(
            text,
            candidates,
            requested=requested,
            offer_all_up_to=offer_all_up_to,
            language=language,
            semantic=semantic,
        )
    )


# A request for code: a verb of writing shortly before a word for a piece of code, or
# that word beside a programming language's name, by language ("write a function that
# …", "Schreib eine Python-Funktion", "用Python写一个函数", "JavaScriptで関数を書いて"). Words
# with an everyday sense ("discount code", "loyalty program") need the verb.
_CODE_OBJECTS = (
    r"\b(?:functions?|scripts?|programs?|class(?:es)?|methods?|quer(?:y|ies)|regex|snippet|"
    r"code|unit tests?|funktion(?:en)?|skript|klasse|abfrage|fonctions?|requêtes?|programmes?|"
    r"funci[oó]n|funciones|consulta|programa|clase|funzione|programma|"
    r"функци\w*|скрипт\w*|программ\w*|класс\w*|запрос\w*|functie|funkcj\w*|zapytani\w*|"
    r"skrypt\w*|função|fonksiyon\w*|συνάρτηση|συναρτήσεις|κώδικα|funkc[ei]\w*|kód|hàm)\b"
    r"|関数|スクリプト|コード|プログラム|クエリ|函数|脚本|代码|程序|查询语句|함수|스크립트|코드|कोड|फ़ंक्शन"
    r"|फंक्शन|स्क्रिप्ट"
)
_CODE_VERBS = (
    r"\b(?:write|create|implement|generate|build|fix|debug|refactor|schreib\w*|erstell\w*|"
    r"programmier\w*|implementier\w*|écri[st]\w*|crée\w*|escrib\w*|crea|créame|programa|"
    r"implementa|scriv\w*|напиши|создай|реализуй|schrijf|maak|napisz|stwórz|escrev\w*|crie|"
    r"yaz|γράψε|napiš|skriv|kirjoita|viết)\b"
)
_CODE_LANGUAGES = (
    r"\b(?:python|javascript|typescript|java|golang|rust|sql|bash|powershell|c#|c\+\+|kotlin"
    r"|swift|php|ruby|vba)\b|python|javascript|पायथन|जावास्क्रिप्ट"
)
_CODE_REQUEST_RE = re.compile(
    rf"{_CODE_VERBS}\W+(?:[^\W\d_]+\W+){{0,6}}?(?:{_CODE_OBJECTS})"
    rf"|(?:{_CODE_LANGUAGES})[^.?!\n]{{0,40}}?(?:{_CODE_OBJECTS})"
    rf"|(?:{_CODE_OBJECTS})[^.?!\n]{{0,40}}?(?:{_CODE_LANGUAGES})"
    # Chinese, Japanese, Korean: the object with a verb of writing or making.
    rf"|(?:写|書いて|作って|작성|짜)[^\u3002\uff1f\uff01\n]{{0,20}}(?:{_CODE_OBJECTS})"
    rf"|(?:{_CODE_OBJECTS})[^\u3002\uff1f\uff01\n]{{0,20}}(?:写|書いて|作って|작성|짜)",
    re.IGNORECASE,
)


def is_code_request(subject: str) -> bool:
    """Whether ``subject`` asks for code (:data:`_CODE_REQUEST_RE`)."""
    return bool(_CODE_REQUEST_RE.search(subject))


# A request for a piece of writing: a verb of writing shortly before a poem, a story, a
# song ("write a haiku about rain on a tin roof", "Schreib mir ein Gedicht über den
# Regen", "напиши рассказ про кота, который боится грозы"), or the piece before the verb
# (Japanese, Chinese, Korean). The weather, the sums or the dates in it are its subject,
# not something to look up.
_CREATIVE_OBJECTS = (
    r"\b(?:poems?|poetry|haikus?|limericks?|sonnets?|stor(?:y|ies)|tales?|fables?|songs?|lyrics"
    r"|raps?|gedicht\w*|geschichte|märchen|lied\w*|reim\w*|poèmes?|poésie|histoire|conte"
    r"|chanson|poemas?|poesía|cuento|canción|poesi[ae]|storia|racconto|favola|canzone"
    r"|filastrocca|história|conto|canção|verhaal|verhaaltje|liedje|стих\w*|рассказ\w*"
    r"|сказк\w*|песн\w*|вірш\w*|оповідання|казк\w*|wiersz\w*|opowiadani\w*|bajk\w*"
    r"|piosenk\w*|básn\w*|povídk\w*|dikt|dikte|sagan?|runo|şiir|hikaye|masal|şark\u0131)\b"
)
# Verbs of making up a text; not those of telling ("tell me the story of the last
# launch" may want a search).
_CREATIVE_VERBS = (
    r"\b(?:write|compose|make up|invent|schreib\w*|dicht\w*|écri[st]\w*|compose\w*"
    r"|invente\w*|escrib\w*|compón\w*|inventa\w*|scriv\w*|componi|escrev\w*|schrijf|verzin"
    r"|напиши|сочини|придумай|napisz|wymyśl|napiš|vymysli|skriv|kirjoita|keksi|yaz)\b"
)
_CREATIVE_REQUEST_RE = re.compile(
    rf"{_CREATIVE_VERBS}\W+(?:[^\W\d_]+\W+){{0,4}}?(?:{_CREATIVE_OBJECTS})"
    r"|(?:詩|俳句|物語|歌詞|短歌|诗|故事|歌词|시를|이야기)[^\u3002\uff1f\uff01\n]{0,6}"
    r"(?:書いて|作って|写|作|써|지어)|(?:写|作)(?:一首|一个|一篇)",
    re.IGNORECASE,
)


def is_creative_request(subject: str) -> bool:
    """Whether ``subject`` asks for a poem, a story or a song
    (:data:`_CREATIVE_REQUEST_RE`)."""
    return bool(_CREATIVE_REQUEST_RE.search(subject))


def _memory_question(subject: str, *, semantic: bool) -> str | None:
    """For a question that reads like a memory save ("Remember that I told you my vet's
    name? What was it?"), whether it is a lookup: ``"instead"`` of the save when the
    tools' regressions say so (at least :data:`MEMORY_QUESTION_PROBABILITY` and more than
    the save's), ``"also"`` without them, None when it stays a save ("remember my rent;
    what is it a year?")."""
    likely = tool_match.tool_probabilities(subject) if semantic else None
    if likely is None:
        return "also"
    search = likely.get("memory_search", 0.0)
    if search >= max(MEMORY_QUESTION_PROBABILITY, likely.get("memory_save", 0.0)):
        return "instead"
    return None


def _description_matches(
    subject: str, candidates: Sequence[ToolCandidate]
) -> list[tuple[str, str]]:
    """The candidates whose name, description or skill hint shares at least two terms
    with ``subject``, with the reason. Only without the embedding: there, words shared
    with a description stand in for meaning; with it they only added near misses
    ("explain what a time zone is")."""
    message_terms = _terms(subject)
    found = []
    for c in candidates:
        shared = message_terms & _description_terms(
            f"{c.name.replace('_', ' ')} {c.description} {c.hint}"
        )
        if len(shared) >= 2:
            found.append(
                (c.name, f"shares terms with its description: {', '.join(sorted(shared)[:3])}")
            )
    return found


# Words of a head before a colon that point at the material after it ("Make this more
# polite: …", "Here's my friend's message: …", "She wrote: …"), by language: that material
# is no request of the user's. A head without them is a label ("For future reference: my
# blood type is A-", "Heads up: …") or a sentence of its own ("I'm calling my sister in
# London: is it raining there?"), and what follows it is asked too.
_MATERIAL_HEAD_RE = re.compile(
    r"\b(?:this|these|those|the following|below|text|message|e-?mail|sentence|paragraph|letter"
    r"|quote|wrote|writes|said|says|asked|dies\w*|folgend\w*|nachricht|satz|absatz|brief"
    r"|schreibt|schrieb|sagt|ceci|cette|suivant\w*|texte|phrase|courriel|lettre|écrit"
    r"|esto|siguiente|texto|mensaje|correo|frase|carta|escribió|dice"
    r"|seguente|testo|messaggio|scritto|isso|isto|seguinte|mensagem|escreveu|deze|dit"
    r"|volgende|tekst|bericht|zin|schreef|poniższ\w*|wiadomoś\w*|zdani\w*|napisał\w*"
    r"|это|этот|эту|следующ\w*|текст\w*|сообщени\w*|письм\w*|фраз\w*|написал\w*|сказал\w*"
    r"|цей|цю|це|наступн\w*|повідомлен\w*)\b|これ|この|以下|次の|这|這|下面|이것|이 |다음",
    re.IGNORECASE,
)


def tool_subject(text: str) -> str:
    """What tool preselection reads of ``text``: :func:`instruction_text`, but all of a
    message whose head before a colon is no instruction about material after it (no
    instruction verb, no word pointing at the material, :data:`_MATERIAL_HEAD_RE`)."""
    subject = instruction_text(text)
    stripped = " ".join(_quoted_removed(text).split())
    match = _COLON_TAIL_RE.match(stripped)
    if (
        match
        and " ".join(match.group("head").split()) == subject
        and not instruction_verb_language(match.group("head"))
        and not _MATERIAL_HEAD_RE.search(match.group("head"))
    ):
        return stripped
    return subject


def _memory_pair(
    chosen: dict[str, str], subject: str, names: Sequence[str], *, semantic: bool
) -> None:
    """Settle the memory save against the lookup in ``chosen`` (tool → reason, changed in
    place): a question that reads like a save may be a lookup (:func:`_memory_question`);
    a save a rule chose, asked without a question, is no lookup as well."""
    if "memory_save" in chosen and subject.rstrip().endswith(("?", "\uff1f")):
        lookup = _memory_question(subject, semantic=semantic)
        if lookup == "instead":
            del chosen["memory_save"]
        if lookup and "memory_search" in names:
            chosen.setdefault("memory_search", "a question about what the user said")
    elif chosen.get("memory_save", "").startswith("rule") and _by_meaning_only(
        chosen.get("memory_search")
    ):
        # A fact the user asks to keep: its words are the memories' words, so the
        # lookup's examples are near by meaning, but nothing is looked up.
        del chosen["memory_search"]


def _by_meaning_only(reason: str | None) -> bool:
    """Whether a tool was chosen (``reason``) by similarity alone: not by a rule, a
    mention or the client."""
    return reason is not None and not reason.startswith(("rule", "mentioned", "requested"))


def tool_choices(
    text: str,
    candidates: Sequence[ToolCandidate],
    *,
    requested: Sequence[str] | None = None,
    offer_all_up_to: int = 0,
    language: str = "en",
    semantic: bool = True,
) -> tuple[tool_match.ToolChoice, ...]:
    """The tools to offer the main model with the reason of each, best first (at most
    ``MAX_TOOLS``, only among ``candidates``, the instance's enabled tools).

    Explicit mentions first, then client-requested tools; a request for code
    (:func:`is_code_request`) gets nothing more; else the tools' triggers and similarity
    to their examples (``pipeline.tool_match.tools_by_meaning``), then, without the
    embedding (``semantic`` off), tools whose description or skill hint shares at least
    two terms with the message. An
    instance with at most ``offer_all_up_to`` enabled tools (0: never) is offered all of
    them, the main model deciding. The multilingual embedding model is asked only with
    ``semantic``.
    """
    names = [c.name for c in candidates]
    chosen: dict[str, str] = {}

    def add(name: str, reason: str) -> None:
        if name in names and name not in chosen:
            chosen[name] = reason

    for name in explicit_tool_mentions(text, names):
        add(name, "mentioned")
    for name in requested or ():
        add(name, "requested by the client")
    profiles = [tool_match.tool_profile(c.name, c.description, c.hint) for c in candidates]
    # What the user asks, not what they quote: "how do you say 'what time is it' in
    # Italian?" needs no clock.
    subject = tool_subject(text)
    if is_code_request(subject):
        # The model writes the code ("a function that converts miles to km"): no tool
        # computes, converts or looks up anything for it.
        return tuple(tool_match.ToolChoice(n, r) for n, r in chosen.items())[:MAX_TOOLS]
    # Nor for the poem it writes ("about the rain in Hamburg"); a small instance still
    # offers all its tools below, the main model deciding.
    if not is_creative_request(subject):
        for choice in tool_match.tools_by_meaning(
            subject, profiles, chosen=chosen, embed=semantic, language=language
        ):
            add(choice.name, choice.reason)
        _memory_pair(chosen, subject, names, semantic=semantic)
        if not semantic:
            for name, reason in _description_matches(subject, candidates):
                add(name, reason)
    if 0 < len(names) <= offer_all_up_to:
        for name in names:
            add(name, f"offered: the instance has only {len(names)} tools")
    return tuple(
        tool_match.ToolChoice(name, reason) for name, reason in list(chosen.items())[:MAX_TOOLS]
    )


# --- model-based tool preselection ----------------------------------------------------

# The whole model preselection, retries and fallbacks included, in seconds: it runs
# beside the safety check on a first message, and the turn waits for both.
MODEL_TOOLS_TIMEOUT_S = 3.0
MODEL_TOOLS_REASON = "chosen by the fast model"


def model_tools_schema(names: Sequence[str]) -> dict[str, Any]:
    """The JSON schema of the fast tier's answer: ``{"tools": [name, ...]}``, names only
    from ``names`` (the instance's enabled tools), at most :data:`MAX_TOOLS`."""
    return {
        "type": "object",
        "properties": {
            "tools": {
                "type": "array",
                "items": {"type": "string", "enum": list(names)},
                "maxItems": MAX_TOOLS,
            }
        },
        "required": ["tools"],
        "additionalProperties": False,
    }


def _model_tools_messages(text: str, candidates: Sequence[ToolCandidate]) -> list[dict[str, str]]:
    listing = "\n".join(f"- {c.name}: {c.description} {c.hint}".rstrip() for c in candidates)
    return [
        {
            "role": "system",
            "content": "Pick the tools an assistant needs to answer the user's message, "
            "from this list (none when it can answer from knowledge alone):\n"
            f'{listing}\nAnswer with JSON only: {{"tools": [names]}}.',
        },
        {"role": "user", "content": text[:2000]},
    ]


def _model_tool_names(data: Any, names: Sequence[str]) -> list[str] | None:
    picked = data.get("tools") if isinstance(data, dict) else None
    if not isinstance(picked, list):
        return None
    return [name for name in dict.fromkeys(str(p) for p in picked) if name in names]


async def amodel_tools_merge(
    decided: Preprocessed,
    *,
    candidates: Sequence[ToolCandidate],
    instance: Instance,
    chat_id: str,
    timeout_s: float = MODEL_TOOLS_TIMEOUT_S,
) -> Preprocessed:
    """``decided`` with the fast tier's tool picks added after the local ones (reason
    :data:`MODEL_TOOLS_REASON`; at most :data:`MAX_TOOLS` in all, only ``candidates``).

    One ``fast``-tier call with :func:`model_tools_schema`, bounded by ``timeout_s``
    seconds in all. A failed, late or malformed answer keeps ``decided`` as it is (logged
    with the reason): the local choice never waits on or depends on the model.
    """
    names = [c.name for c in candidates]
    if not names:
        return decided
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            result = await llm.complete(
                tier="fast",
                messages=_model_tools_messages(decided.content, candidates),
                instance=instance,
                secrets=await ainstance_tier_secrets_get(instance=instance),
                response_schema=model_tools_schema(names),
                stage="preprocess",
                chat_id=chat_id,
            )
        picked = _model_tool_names(result.data, names)
        problem = None if picked is not None else "no tools list in the answer"
    except TimeoutError:
        picked, problem = None, f"no answer within {timeout_s:g} s"
    except llm.LLMError as exc:
        picked, problem = None, f"the call failed: {exc}"
    if picked is None:
        logger.warning(
            "chat %s: local tool choice only (model preselection: %s, after %.0f ms)",
            chat_id,
            problem,
            (time.perf_counter() - started) * 1000,
        )
        return decided
    chosen = dict(
        zip(decided.tools, decided.tool_reasons or [""] * len(decided.tools), strict=True)
    )
    for name in picked:
        chosen.setdefault(name, MODEL_TOOLS_REASON)
    kept = list(chosen.items())[:MAX_TOOLS]
    return replace(
        decided,
        tools=tuple(name for name, _ in kept),
        tool_reasons=tuple(reason for _, reason in kept),
    )


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
    allowed = TIERS_BY_ROLE.get(role, TIERS_BY_ROLE[InstanceMember.Role.MEMBER])
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


# Which memory categories a message would draw on, in the product's languages (English,
# German, French, Spanish, Italian, Portuguese, Dutch, Japanese, Chinese, Russian). They
# decide what a client chat is asked consent for and which categories are searched; what
# enters the prompt is then the search's best memories above a relevance floor
# (docs/architecture.md §12). Stems rather than whole words where languages inflect;
# bounded gaps only (pre-processing stays linear in the text).
_MEMORY_PATTERNS: dict[str, str] = {
    "preference": (
        r"\b(?:recommend|suggest|favou?rite|i (?:like|love|prefer|hate|enjoy))\b"
        r"|\b(?:empfiehl|empfehl|schlag\w{0,3} (?:mir )?\w{0,20} ?vor|lieblings"
        r"|ich (?:mag|liebe|hasse)|bevorzuge)"
        r"|\b(?:recommand|conseill|sugg[èé]r|préféré|j'aime|j'adore|je préfère|je déteste)"
        r"|\b(?:recomi[ée]nd|recomend|sug[ie]r|favorit|me gusta|me encanta|prefiero|odio)"
        r"|\b(?:consigli|raccomand|suggeris|preferit|mi piace|adoro|preferisco)"
        r"|\b(?:eu gosto|gosto de|prefiro|odeio)"
        r"|\b(?:aanbevel|aanraden|raad\w{0,2} (?:me )?\w{0,20} ?aan|favoriet|lievelings"
        r"|ik hou van|voorkeur)"
        r"|おすすめ|オススメ|お勧め|好き|嫌い|好み|推荐|推薦|建议|建議|喜欢|喜歡|最爱|讨厌|偏好"
        r"|\b(?:посовет|рекоменд|любим|мне нравится|я люблю|предпочита|ненавижу)"
    ),
    "fact": (
        r"\b(?:my name|i am|i'm|i live|i work|my job|my address|where do i live|who am i)\b"
        r"|\b(?:mein name|ich heiße|ich bin|ich wohne|ich lebe|ich arbeite|mein beruf"
        r"|meine adresse|wo wohne ich|wer bin ich)\b"
        r"|\b(?:je m'appelle|mon nom|je suis|j'habite|je vis|je travaille|mon métier|mon adresse)"
        r"|\b(?:me llamo|mi nombre|vivo en|trabajo (?:en|como)|mi trabajo|mi dirección)\b"
        r"|\b(?:mi chiamo|il mio nome|abito|vivo a|lavoro (?:a|come|in)|il mio lavoro"
        r"|il mio indirizzo)\b"
        r"|\b(?:meu nome|me chamo|eu sou|moro em|eu trabalho|meu emprego|meu endereço)"
        r"|\b(?:mijn naam|ik heet|ik ben|ik woon|ik werk|mijn baan|mijn adres)\b"
        r"|私の名前|名前は|住んで|働いて|仕事|住所|我的名字|我叫|我住|我的工作|地址"
        r"|\b(?:меня зовут|мо[её] имя|я живу|я работаю|моя работа|мой адрес)"
    ),
    "event": (
        r"\b(?:yesterday|last (?:week|month|year)|my birthday|appointment|anniversary)\b"
        r"|\b(?:gestern|letzte woche|letzten monat|letztes jahr|geburtstag|termin|jahrestag)"
        r"|\b(?:hier (?:soir|matin|midi)|la semaine dernière|le mois dernier|l'année dernière"
        r"|anniversaire|rendez-vous)"
        r"|\b(?:ayer|la semana pasada|el mes pasado|el año pasado|cumpleaños|aniversario)"
        r"|\b(?:ieri|la settimana scorsa|il mese scorso|l'anno scorso|compleanno|appuntamento"
        r"|anniversario)"
        r"|\b(?:ontem|semana passada|mês passado|ano passado|aniversário|compromisso)"
        r"|\b(?:gisteren|vorige (?:week|maand)|vorig jaar|verjaardag|afspraak)"
        r"|昨日|先週|先月|去年|誕生日|予約|記念日|昨天|上周|上个月|生日|预约|纪念日"
        r"|\b(?:вчера|на прошлой неделе|в прошлом (?:месяце|году)|день рождения|годовщин)"
    ),
    "relationship": (
        r"\bmy (?:wife|husband|partner|mother|mom|mum|father|dad|son|daughter|friend|boss"
        r"|sister|brother|girlfriend|boyfriend)\b"
        r"|\bmein(?:e|em|en|er)? (?:frau|mann|partner|mutter|mama|vater|papa|sohn|tochter"
        r"|freund|chef|schwester|bruder)"
        r"|\b(?:mon|ma|mes) (?:femme|mari|partenaire|mère|maman|père|papa|fils|fille|ami"
        r"|patron|chef|s(?:œ|oe)ur|frère|copain|copine)"
        r"|\bmis? (?:esposa|esposo|marido|mujer|pareja|madre|mamá|padre|papá|hij[oa]|amig[oa]"
        r"|jef[ea]|herman[oa]|novi[oa])"
        r"|\b(?:mia|mio|miei|mie) (?:moglie|marito|partner|madre|mamma|padre|papà|figli[oa]"
        r"|amic[oa]|capo|sorella|fratello|ragazz[oa])"
        r"|\b(?:minha|meu|meus|minhas) (?:esposa|marido|mulher|parceir[oa]|mãe|pai|filh[oa]"
        r"|amig[oa]|chefe|irmã|irmão|namorad[oa])"
        r"|\bmijn (?:vrouw|man|partner|moeder|mama|vader|papa|zoon|dochter|vriend|baas|zus"
        r"|broer)"
        r"|(?:私|僕|俺)の(?:妻|夫|母|父|息子|娘|友達|友人|上司|姉|妹|兄|弟|彼氏|彼女)"
        r"|我的?(?:妻子|老婆|丈夫|老公|男朋友|女朋友|妈妈|媽媽|母亲|爸爸|父亲|儿子|兒子|女儿|女兒|朋友"
        r"|老板|姐姐|妹妹|哥哥|弟弟)"
        r"|\bмо(?:я|й|его|ей|ему|ю|им|ем) (?:жен|муж|мам|мат|пап|отц|отец|сын|доч|друг|подруг"  # noqa: RUF001
        r"|начальни|сестр|брат)"
    ),
    "decision": (
        r"\b(?:should i|i decided|we decided|which one should|help me decide)\b"
        r"|\b(?:soll(?:te)? ich|ich habe (?:mich )?entschieden|wir haben (?:uns )?entschieden"
        r"|hilf mir\w{0,3} (?:zu )?entscheiden)"
        r"|\b(?:dois-je|devrais-je|j'ai décidé|nous avons décidé|on a décidé"
        r"|aide-moi à (?:choisir|décider))"
        r"|\b(?:debería|decidí|he decidido|hemos decidido|ayúdame a (?:decidir|elegir))"
        r"|\b(?:dovrei|ho deciso|abbiamo deciso|aiutami a (?:decidere|scegliere))"
        r"|\b(?:deveria|eu decidi|decidimos|me ajude a (?:decidir|escolher))"
        r"|\b(?:moet ik|zou ik|ik heb besloten|we hebben besloten|help me (?:kiezen|beslissen))"
        r"|べきか|べきです|決めた|決めました|迷って|我应该|我應該|我决定|我們決定|我们决定|帮我(?:决定|选)"
        r"|\b(?:стоит ли|следует ли|я решил|мы решили|помоги (?:мне )?(?:выбрать|решить))"
    ),
    # Questions about what the assistant knows or remembers of the user; ``general`` is
    # also wanted with every other category (memory_categories).
    "general": (
        r"\b(?:(?:do|did) you (?:know|remember)|about me|remember (?:that|when|my|what)"
        r"|what did i (?:tell|say))\b"
        r"|\b(?:erinnerst du dich|weißt du noch|über mich|was weißt du)"
        r"|\b(?:tu te souviens|te souviens-tu|te rappelles-tu|sur moi)"
        r"|\b(?:recuerdas|te acuerdas|sobre mí)"
        r"|\b(?:ti ricordi|ricordi|su di me)"
        r"|\b(?:se lembra|lembra|sobre mim)"
        r"|\b(?:weet je nog|herinner je|over mij)"
        r"|覚えて|私について|私のこと|记得|記得|关于我|關於我"
        r"|\b(?:помнишь|обо мне|про меня)"  # noqa: RUF001
    ),
}
_MEMORY_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (category, re.compile(pattern, re.IGNORECASE)) for category, pattern in _MEMORY_PATTERNS.items()
)


def memory_categories(text: str) -> tuple[str, ...]:
    """Memory categories this message would draw on, in :data:`MEMORY_CATEGORIES` order
    (empty: none needed); ``general`` whenever another one is, since a memory saved
    without a category (the ``memory_save`` tool's and the memories page's default) may
    be about anything."""
    found = {category for category, pattern in _MEMORY_RULES if pattern.search(text)}
    if found:
        found.add("general")
    return tuple(category for category in MEMORY_CATEGORIES if category in found)


# --- safety -------------------------------------------------------------------------------

# English, German, French, Spanish, Italian, Portuguese, Dutch, Russian, Polish, Turkish.
# Stems without ``\w*`` around them: a search finds a stem inside a compound anyway, and an
# unbounded ``\w*`` before a literal makes the search quadratic in a long run of letters
# (seconds for 8 KiB of one letter, on the event loop).
_EXPLOSIVE_TERMS = (
    r"bomb|explosi|sprengstoff|sprengsatz|nervengas|sarin|ricin|anthrax"
    r"|бомб|взрывчатк|взрывн|patlay\u0131c\u0131"
)
_KILL_TERMS = (
    r"\bkill|\bmurder|töten|umbringen|ermorden|\btuer\b|\bassassiner|\bmatar\b"
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


# Every span is bounded: an unbounded lazy ``.+?`` looking for a closing mark restarts at
# each opening mark, quadratic in a text made of marks ("*_#[" repeated).
_MARKDOWN_RES: tuple[tuple[re.Pattern[str], str], ...] = (
    # Links and images: their text. A target may hold one level of parentheses, as
    # Markdown allows ("f(x)"); the two alternatives start differently, so no backtracking.
    (re.compile(r"!?\[([^\]]{0,300})\]\((?:[^()\n]|\([^()\n]{0,500}\)){0,2000}\)"), r"\1"),
    (re.compile(r"^\s{0,3}(#{1,6}|>+|[-*+]|\d+[.)])\s+", re.MULTILINE), ""),  # headings, lists
    (re.compile(r"(\*\*|__|~~|\*|_|`{1,3})(?=\S)(.{1,300}?)(?<=\S)\1"), r"\2"),  # emphasis, code
    (re.compile(r"[*_`#|]+"), " "),  # what is left of markup
)
NEW_CHAT = "New chat"
# The part of a message a heuristic title is taken from.
TITLE_SOURCE_CHARS = 4000


def plain_text(text: str) -> str:
    """``text`` without Markdown markup (headings, emphasis, code ticks, links' targets,
    list and quote markers), whitespace collapsed."""
    for pattern, replacement in _MARKDOWN_RES:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())


# C0 and C1 control characters (tabs and line breaks become spaces first).
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f]")


def display_line(text: str) -> str:
    """``text`` fit to show on one line of the UI (a title, a follow-up suggestion):
    without invisible characters (:func:`pipeline.injection.strip_invisible`: a bidi
    override such as U+202E shows what follows it reversed, so U+202E + "txt.exe" reads
    as "exe.txt"; emoji joiners and ZWNJ where a script needs it stay) and control
    characters, whitespace collapsed to single spaces."""
    return _CONTROL_RE.sub("", " ".join(strip_invisible(text).split()))


def heuristic_title(text: str, *, category: str = "general") -> ChatTitle:
    """A title from the message's first eight words (no model; Markdown stripped), in the
    message's own language; :data:`NEW_CHAT` only for a message without words."""
    # Eight words need only the text's start (the whole text may be megabytes).
    unquoted = _QUOTE_LINE_RE.sub(" ", _FENCE_RE.sub(" ", text[:TITLE_SOURCE_CHARS]))
    plain = display_line(plain_text(unquoted))
    words = instruction_text(plain).split()
    if len(words) < 3:  # "Übersetze: <text>": the head alone names nothing
        words = plain.split()
    # Opening and closing punctuation ("¿…?", «…») is no part of a title.
    title = " ".join(words[:8]).strip(" ?!.,:;-–—\"'¿¡«»„“”「」")  # noqa: RUF001
    if len(words) > 8:
        title += "…"
    return ChatTitle(title=title[:80] or NEW_CHAT, icon="chat", category=category, tags=())


def _title_problem(title: str) -> str | None:
    """Why a model's title is junk (None: usable)."""
    if not title:
        return "empty title"
    if not any(ch.isalnum() for ch in title):
        return "no letters in the title"
    if title.casefold() == NEW_CHAT.casefold():
        return "placeholder title"
    if title.lstrip().startswith(("{", "[")):
        return "JSON instead of a title"
    return None


async def title_generate(
    *, text: str, language: str, instance: Instance, chat_id: str
) -> ChatTitle:
    """Fast-tier title, icon, category and tags (≤ 10). The instruction names
    ``language`` (an ISO 639 code) in words: the title is written in it. When the call
    fails or returns junk, :func:`heuristic_title` of ``text`` (logged with the reason),
    so a chat never keeps "New chat" after its first answer."""
    name = language_name(language)
    messages = [
        {
            "role": "system",
            "content": "Name this conversation from its first message. Answer with JSON: "
            "title (at most 8 words, plain text without Markdown), icon (one lowercase word "
            "naming an icon), category (one lowercase word), tags (at most 10 short "
            f"keywords). The conversation is in {name}: write the title in {name}.",
        },
        {"role": "user", "content": text[:4000]},
    ]
    started = time.perf_counter()
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
    except llm.LLMError as exc:
        return title_fallback(text, chat_id, f"the title call failed: {exc}", started)
    data = result.data if isinstance(result.data, dict) else {}
    title = display_line(plain_text(str(data.get("title") or "")))[:80]
    problem = _title_problem(title)
    if problem:
        return title_fallback(text, chat_id, problem, started)
    raw_tags = data.get("tags")
    tags: list[Any] = raw_tags if isinstance(raw_tags, list) else []
    return ChatTitle(
        title=title,
        icon=display_line(str(data.get("icon") or ""))[:40] or "chat",
        category=display_line(str(data.get("category") or ""))[:40] or "general",
        tags=tuple(line[:40] for tag in tags[:10] if (line := display_line(str(tag)))),
    )


def title_fallback(text: str, chat_id: str, reason: str, started: float) -> ChatTitle:
    """:func:`heuristic_title` of ``text``, logged as a warning with ``reason`` (why the
    model's title is missing) and the milliseconds since ``started``
    (``time.perf_counter()`` when the title call began)."""
    logger.warning(
        "chat %s: heuristic title (%s, after %.0f ms)",
        chat_id,
        reason,
        (time.perf_counter() - started) * 1000,
    )
    return heuristic_title(text)


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
    # Why each of ``tools`` was chosen, in the same order.
    tool_reasons: tuple[str, ...] = ()


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
    offer_all_tools_up_to: int | None = None,
) -> Preprocessed:
    """Every local decision for one message (no I/O but the local embedding model, whose
    vectors :func:`tool_vectors_prefetch` may have made already; a few milliseconds:
    bench/preprocess_quality.py).

    ``offer_all_tools_up_to`` (None: the instance's ``tools_offer_all_up_to``; 0: never)
    offers every candidate when there are at most that many (:func:`tool_choices`).
    """
    if offer_all_tools_up_to is None:
        offer_all_tools_up_to = instance.tools_offer_all_up_to
    text = strip_invisible(content)
    # The chat's language, else the instance's, else English: the first the product offers.
    fallback = languages.supported_fallback(fallback_language, instance.default_language)
    language = detect_language(text, fallback=fallback)
    tier, reason = choose_tier(
        text, previous_assistant=previous_assistant, requested=requested_tier, role=role
    )
    choices = tool_choices(
        text,
        candidates,
        requested=requested_tools,
        offer_all_up_to=offer_all_tools_up_to,
        language=language,
    )
    return Preprocessed(
        content=text,
        language=language,
        tier=tier,
        model=tier_model(tier, instance),
        reason=reason,
        tools=tuple(choice.name for choice in choices),
        tool_reasons=tuple(choice.reason for choice in choices),
        mate_category=choose_mate_category(text, mate_categories),
        memory_categories=memory_categories(text),
        safety=heuristic_safety(text),
    )
