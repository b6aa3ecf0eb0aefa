# ruff: noqa: RUF001 (patterns in many scripts: their look-alike letters are meant)
"""Which languages can come out of language detection, and the letters and words that
tell close languages apart (docs/architecture.md §6).

:data:`SUPPORTED_LANGUAGES` are the languages the product answers in: py3langid is
restricted to them, so a label outside them (a regional language the product does not
offer) cannot come out. :func:`close_pair_language` settles the pairs py3langid confuses
on short texts (Spanish/Portuguese/Catalan, Swedish/Danish/Norwegian, Russian/Ukrainian/
Belarusian, Czech/Polish/Slovak, Croatian/Serbian/Slovene in Latin letters) by letters or
words only one of them writes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

# The list lives below the apps that check an instance's default language.
from instances.languages import ALIASES as ALIASES
from instances.languages import SUPPORTED_LANGUAGES as SUPPORTED_LANGUAGES
from instances.languages import supported as supported


def supported_fallback(*codes: str | None) -> str:
    """The first of ``codes`` that names a supported language (kept as given: "pt-BR"),
    else ``"en"``: the language answers fall back to (the chat's, then the instance's)."""
    return next((code for code in codes if code and supported(code)), "en")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Per group of close languages: per member, letters only it writes and frequent words only
# it uses (lower case). Sources: the languages' alphabets; the words are common function
# words whose spelling differs between the members.
# Words Danish and Norwegian (bokmål) write alike and Swedish does not ("är", "och",
# "till", "var", "vem", "när", "också", "vill", "detta"): evidence for both against
# Swedish, a tie between the two (which the chat's language then settles).
_DANISH_NORWEGIAN = ("er", "og", "til", "hvor", "hvem", "når", "også", "vil", "dette")
_GROUPS: tuple[dict[str, tuple[str, frozenset[str]]], ...] = (
    {
        "es": (
            "ñ¿¡",
            frozenset(
                [
                    "el",
                    "los",
                    "y",
                    "pero",
                    "qué",
                    "cómo",
                    "muy",
                    "también",
                    "hay",
                    "usted",
                    "gracias",
                    "vale",
                    "puedes",
                    "necesito",
                    "entiendo",
                    "ayuda",
                    "eso",
                    "ahora",
                    "más",
                    "mucho",
                    "cuál",
                    "dónde",
                    "hoy",
                    "corto",
                    # Everyday words Portuguese spells otherwise (its: "boa", "tenho",
                    # "com", "isso", "ontem", ...).
                    *_words(
                        "buenas buenos tardes días noches noche tengo tienes quiero puedo "
                        "estoy soy él ella ellos nosotros con sin aquí después todavía "
                        "sólo entonces ya bien bueno buena hacer cierto cierta correcto "
                        "correcta un una esa ese esto yo sí donde cuando cuándo cuánto "
                        "cuántos mejor mañana ayer película cocinar aprender reunión"
                    ),
                ]
            ),
        ),
        "pt": (
            "ãõ",
            frozenset(
                [
                    "o",
                    "os",
                    "e",
                    "mas",
                    "não",
                    "você",
                    "muito",
                    "também",
                    "há",
                    "ao",
                    "uma",
                    "seu",
                    "obrigado",
                    "obrigada",
                    "valeu",
                    "pode",
                    "preciso",
                    "entendi",
                    "ajuda",
                    "isso",
                    "mais",
                    "hoje",
                    "curto",
                    "onde",
                    "qual",
                    "meu",
                    "teu",
                    "minha",
                    "tua",
                    *_words(
                        "boa bom boas bons noite dia tenho tens quero posso estou sou "
                        "ele ela eles nós com sem aqui depois ainda só então já bem fazer "
                        "certo certa correto correta um umas uns essa esse isto eu sim "
                        "quando quanto quantos melhor amanhã ontem filme cozinhar aprender "
                        "reunião das nas"
                    ),
                ]
            ),
        ),
        # Catalan: è, ò, ï and the middle dot of "l·l" are written by neither Spanish nor
        # Portuguese; its own spellings of the commonest words.
        "ca": (
            "èòï·",
            frozenset(
                [
                    "amb",
                    "però",
                    "perquè",
                    "molt",
                    "molta",
                    "molts",
                    "això",
                    "aquest",
                    "aquesta",
                    "avui",
                    "demà",
                    "vull",
                    "puc",
                    "pots",
                    "tinc",
                    "fer",
                    "és",
                    "són",
                    "els",
                    "dels",
                    "pels",
                    "què",
                    "quan",
                    "gràcies",
                    "sisplau",
                    "adéu",
                    "ara",
                    "jo",
                    "ho",
                    "hi",
                    "ens",
                    "meva",
                    "teva",
                    "també",
                    "doncs",
                    "estic",
                    "sóc",
                    "feina",
                    "fa",
                    "agradaria",
                    "diu",
                    "tothom",
                    # Also Spanish's article and Portuguese's "my", "with" ("com", Catalan
                    # "how"), "day": evidence against the third member.
                    "un",
                    "una",
                    "com",
                    "dia",
                    "el",
                    "meu",
                    "teu",
                    "quin",
                    "quina",
                    "quants",
                    "quantes",
                    "on",
                ]
            ),
        ),
    },
    {
        "sv": (
            "äö",
            frozenset(
                [
                    "och",
                    "jag",
                    "inte",
                    "att",
                    "hur",
                    "vad",
                    "är",
                    "mig",
                    "dig",
                    "med",
                    "tack",
                    "hjälp",
                    "hjälpen",
                    "hjälpa",
                    "förstår",
                    "göra",
                    "igen",
                    "snälla",
                    # Also Danish's greeting; Norwegian writes "hei".
                    "hej",
                ]
            ),
        ),
        "da": (
            "æø",
            frozenset(
                [
                    "hvad",
                    "mig",
                    "dig",
                    "sig",
                    "af",
                    "efter",
                    "jeg",
                    "ikke",
                    "hvordan",
                    "nu",
                    "gerne",
                    "tak",
                    "tusind",
                    "hjælp",
                    "hjælpen",
                    "hjælpe",
                    "gøre",
                    "igen",
                    *_DANISH_NORWEGIAN,
                    "lave",
                    "laver",
                    "noget",
                    "nogen",
                    "meget",
                    "uge",
                    "spørgsmål",
                    "købe",
                    "aften",
                    "bog",
                    "sprog",
                    "mad",
                    "ved",
                    "blive",
                    "anden",
                    "andet",
                    "måske",
                    "dej",
                    "rigtig",
                    "oversætte",
                    "oversæt",
                    # Neuter possessives (Norwegian "ditt", "mitt", "sitt") and the
                    # greetings Danish writes as one word (Norwegian "god morgen").
                    "dit",
                    "mit",
                    "sit",
                    "godmorgen",
                    "godnat",
                    "godaften",
                    "hej",
                    "gør",
                    # Where Norwegian writes otherwise ("forskjell", "mellom", "uten").
                    *_words(
                        "forskel forskellen forskellige mellem sådan måde spørge uden altid "
                        "aldrig lidt nogle"
                    ),
                ]
            ),
        ),
        "no": (
            "æø",
            frozenset(
                [
                    "hva",
                    "meg",
                    "deg",
                    "seg",
                    "av",
                    "etter",
                    "jeg",
                    "ikke",
                    "hvordan",
                    "ei",
                    "bli",
                    "takk",
                    "hjelp",
                    "hjelpen",
                    "hjelpe",
                    "lage",
                    "gjøre",
                    "igjen",
                    "skjønner",
                    *_DANISH_NORWEGIAN,
                    "lager",
                    "noe",
                    "noen",
                    "mye",
                    "veldig",
                    "uke",
                    "spørsmål",
                    "kjøpe",
                    "kveld",
                    "bok",
                    "språk",
                    "mat",
                    "vet",
                    "annen",
                    "annet",
                    "kanskje",
                    "gjerne",
                    "deig",
                    "oversette",
                    "oversett",
                    "nå",
                    "ditt",
                    "mitt",
                    "sitt",
                    "natt",
                    "hei",
                    "gjør",
                    *_words(
                        "forskjell forskjellen forskjellige mellom sånn måte spørre uten "
                        "alltid aldri litt"
                    ),
                ]
            ),
        ),
    },
    {
        # Not "не": every member writes it, so it is evidence for none.
        "ru": (
            "ыэё",
            frozenset(
                [
                    "что",
                    "это",
                    "и",
                    "в",
                    "значит",
                    "сколько",
                    "почему",
                    "где",
                    "этот",
                    "эта",
                    "эти",
                    "можешь",
                    "мне",
                    "тебе",
                    "очень",
                    "ещё",
                    "еще",
                    "его",
                    "если",
                    "когда",
                    "объясни",
                    "пожалуйста",
                    "спасибо",
                    "ты",
                    "понимаю",
                    "помоги",
                    "сделай",
                    "короче",
                    "какой",
                    "какая",
                    "сейчас",
                    "нужно",
                    "надо",
                    "можно",
                    "который",
                ]
            ),
        ),
        "bg": (
            "",
            frozenset(
                [
                    "какво",
                    "това",
                    "е",
                    "съм",
                    "си",
                    "ли",
                    "се",
                    "за",
                    "защо",
                    "къде",
                    "мога",
                    "благодаря",
                    "искам",
                    "много",
                    "моля",
                    "здравей",
                    "разбирам",
                    "отново",
                ]
            ),
        ),
        "uk": (
            "іїєґ",
            frozenset(
                [
                    "що",
                    "як",
                    "це",
                    "і",
                    "та",
                    "цей",
                    "ця",
                    "ці",
                    "можеш",
                    "мені",
                    "тобі",
                    "дуже",
                    "ще",
                    "його",
                    "чи",
                    "якщо",
                    "коли",
                    "де",
                    "поясни",
                    "дякую",
                    "зроби",
                    "коротше",
                    "будь",
                    "ласка",
                    "який",
                    "яка",
                    "яке",
                    "чому",
                    "скільки",
                    "також",
                    "зараз",
                    "потрібно",
                    "треба",
                    "можна",
                ]
            ),
        ),
        # Belarusian writes Russian's ы, э, ё too: evidence for both against Ukrainian
        # and Bulgarian, what tells them apart is the letters each never writes.
        "be": (
            "ўіыэё",
            frozenset(["што", "як", "гэта", "мне", "сваё", "калі", "дзе", "чаму", "дзякуй"]),
        ),
        # Macedonian and Serbian Cyrillic: gje, kje, dze (U+0453, U+045C, U+0455) and
        # dje, tshe (U+0452, U+045B) their own; je, lje, nje, dzhe both's.
        "mk": (
            "\u0453\u045c\u0455\u0458\u0459\u045a\u045f",
            frozenset(
                ["што", "како", "ова", "сум", "зошто", "каде", "можам", "благодарам", "сакам"]
            ),
        ),
        "sr": (
            "\u0452\u045b\u0458\u0459\u045a\u045f",
            frozenset(["шта", "како", "ово", "сам", "зашто", "где", "могу", "хвала", "желим"]),
        ),
    },
    {
        "cs": (
            "řěů",
            frozenset(
                [
                    "je",
                    "a",
                    "se",
                    "na",
                    "jak",
                    "co",
                    "chtěl",
                    "bych",
                    "děkuji",
                    "díky",
                    "moc",
                    "ano",
                    "můžeš",
                    "ještě",
                    "znovu",
                    "nerozumím",
                    "proč",
                    "kdy",
                    "kdo",
                    "který",
                    "která",
                    "které",
                    "jaký",
                    "jaká",
                    "jsem",
                    "jsi",
                    "jsou",
                    "není",
                    "jen",
                    "taky",
                    "velmi",
                ]
            ),
        ),
        "pl": (
            "łąęśźżń",
            frozenset(
                [
                    "jest",
                    "i",
                    "się",
                    "na",
                    "jak",
                    "co",
                    "chciałbym",
                    "czy",
                    # Also Slovak's "no", "not": evidence against Czech ("ne").
                    "nie",
                    "mnie",
                    "w",
                    "że",
                    "dla",
                    "jestem",
                    "są",
                    "możesz",
                    "proszę",
                    "dziękuję",
                    "dzięki",
                    "bardzo",
                    "też",
                    "tylko",
                    "dlaczego",
                    "gdzie",
                    "kiedy",
                    "który",
                    "która",
                    "które",
                    "jaki",
                    "jaka",
                    "kto",
                    "twój",
                    "twoja",
                    "twojej",
                    "mój",
                    "moja",
                ]
            ),
        ),
        "sk": (
            "äôľĺŕ",
            frozenset(
                [
                    "je",
                    "a",
                    "sa",
                    "na",
                    "ako",
                    "čo",
                    "ďakujem",
                    "pekne",
                    "áno",
                    "nie",
                    "môžeš",
                    "ešte",
                    "nerozumiem",
                    "vysvetliť",
                    "prečo",
                    "kedy",
                    "kto",
                    "ktorý",
                    "ktorá",
                    "ktoré",
                    "aký",
                    "aká",
                    "som",
                    "sú",
                    "len",
                    "iba",
                    "tiež",
                    "veľmi",
                ]
            ),
        ),
    },
)
# Dutch and Afrikaans: Afrikaans writes ê, ô, û (Dutch's ë it writes too); the commonest
# words they spell apart (Dutch "ik", "niet", "het", "een"; Afrikaans "ek", "nie", "die").
_GROUPS = (
    *_GROUPS,
    {
        "nl": (
            "",
            frozenset(
                [
                    "het",
                    "de",
                    "een",
                    "ik",
                    "niet",
                    "je",
                    "jij",
                    "jou",
                    "jouw",
                    "mijn",
                    "zijn",
                    "zal",
                    "zou",
                    "er",
                    "wat",
                    "hoe",
                    "ook",
                    "alsjeblieft",
                    "bedankt",
                    "dank",
                    "graag",
                ]
            ),
        ),
        "af": (
            "\u00ea\u00f4\u00fb",
            frozenset(
                [
                    "die",
                    "ek",
                    "nie",
                    "jy",
                    "jou",
                    "my",
                    "sal",
                    "hulle",
                    "baie",
                    "asseblief",
                    "dankie",
                    "wat",
                    "hoe",
                    "ook",
                ]
            ),
        ),
    },
)
# Hindi, Marathi and Nepali share Devanagari; their commonest words differ ("मुझे चाहिए",
# "मला हवी आहे", "मलाई चाहिन्छ").
_GROUPS = (
    *_GROUPS,
    {
        "hi": (
            "",
            frozenset(
                [
                    "है",
                    "हैं",
                    "मुझे",
                    "चाहिए",
                    "क्या",
                    "का",
                    "की",
                    "के",
                    "में",
                    "और",
                    "नहीं",
                    "आप",
                    "मैं",
                    "यह",
                    "कैसे",
                ]
            ),
        ),
        "mr": (
            "",
            frozenset(
                [
                    "आहे",
                    "आहेत",
                    "मला",
                    "हवी",
                    "हवा",
                    "काय",
                    "चा",
                    "ची",
                    "चे",
                    "मध्ये",
                    "आणि",
                    "नाही",
                    "तुम्ही",
                    "मी",
                    "कसे",
                ]
            ),
        ),
        "ne": ("", frozenset(["छ", "छन्", "मलाई", "हो", "र", "छैन", "तपाईं", "म", "कसरी", "चाहिन्छ"])),
    },
)
# Croatian, Serbian (in Latin letters) and Slovene: Croatian writes the long yat as "ije"
# and "je" (vrijeme, gdje) where Serbian writes "e" (vreme, gde), and its own words for
# many everyday things (tjedan, kruh, tko; Serbian nedelja, hleb, ko); Slovene writes
# neither "ć" nor "đ" and its own function words (kaj, kje, tudi, zelo).
_LATIN_SOUTH_SLAVIC: dict[str, tuple[str, frozenset[str]]] = {
    "hr": (
        "",
        _words(
            "što tko gdje ovdje vrijeme lijep lijepo lijepa mlijeko rijeka dijete uvijek "
            "trebam trebaš trebate tjedan tjedna tjedno kruh kava tisuća glazba obitelj "
            "sveučilište kazalište zrak točno sretan sretno jučer vlak nogomet povijest "
            "uvjet općenito cijena cijeli pjesma vjerujem sjećam htio htjela tvrtka"
        ),
    ),
    "sr": (
        "",
        _words(
            "šta ko gde ovde vreme lep lepo lepa mleko reka dete uvek nedelja nedelje "
            "nedelju hleb kafa hiljada hiljadu muzika porodica univerzitet pozorište "
            "vazduh tačno srećan srećno juče voz fudbal istorija uslov uopšte cena ceo "
            "pesma verujem sećam hteo htela firma"
        ),
    ),
    "sl": (
        "",
        _words(
            "kaj kje zakaj kdo sem smo ste so lahko prosim tudi ker ampak zelo danes "
            "jutri včeraj rad rada nisem in pri vprašanje načrt tem tega lepo"
        ),
    ),
}
_GROUPS = (*_GROUPS, _LATIN_SOUTH_SLAVIC)
# Words: letters, with the Devanagari block whole (its vowel signs are no letters to \w).
_WORDS_RE = re.compile(r"(?:[^\W\d_]|[\u0900-\u097f])+", re.UNICODE)


# Per member of a group, the group's letters it never writes (its alphabet's): each one in
# a text counts against it as much as one of its own letters counts for it. Belarusian
# writes Russian's ы, э, ё but never и, щ, ъ; Polish none of Czech's and Slovak's č, š,
# á, é; Danish and Norwegian no ä, ö; Spanish no ç, ã, à.
_MK_SR = "\u0453\u045c\u0455\u0452\u045b\u0458\u0459\u045a\u045f"
_NOT_MK_SR = "\u0439\u0449\u044a\u044c\u044e\u044f\u044b\u044d\u0451\u0456\u0457\u0454\u0491\u045e"
_UNWRITTEN: dict[str, str] = {
    "es": "\u00e7\u00e3\u00f5\u00e0\u00e8\u00f2\u00ef\u00b7",
    "pt": "\u00f1\u00bf\u00a1\u00e8\u00f2\u00ef\u00b7",
    "ca": "\u00f1\u00e3\u00f5\u00bf\u00a1",
    "sv": "\u00e6\u00f8",
    "da": "\u00e4\u00f6",
    "no": "\u00e4\u00f6",
    # Macedonian's and Serbian's own letters (\u0453-\u045f but \u0456, \u0457, \u045e)
    # no other member writes.
    "ru": "\u0456\u0457\u0454\u0491\u045e" + _MK_SR,
    "uk": "\u044b\u044d\u0451\u044a\u045e" + _MK_SR,
    "bg": "\u044b\u044d\u0451\u0456\u0457\u0454\u0491\u045e" + _MK_SR,
    "be": "\u0438\u0449\u044a\u0457\u0454\u0491" + _MK_SR,
    # Neither writes й, щ, ъ, ь, ю, я, ы, э, ё nor Ukrainian's and Belarusian's letters.
    "mk": _NOT_MK_SR + "\u0452\u045b",
    "sr": _NOT_MK_SR + "\u0453\u045c\u0455",
    "cs": "\u0142\u0105\u0119\u015b\u017a\u017c\u0144\u00e4\u00f4\u013e\u013a\u0155",
    "pl": "\u0159\u011b\u016f\u010d\u0161\u017e\u0165\u010f\u0148\u00e1\u00e9\u00ed\u00fd\u00fa"
    "\u00e4\u00f4\u013e\u013a\u0155",
    "sk": "\u0159\u011b\u016f\u0142\u0105\u0119\u015b\u017a\u017c\u0144",
    "sl": "\u0107\u0111",
}
_CYRILLIC_RE = re.compile("[\u0400-\u04ff]")


def _group_of(guess: str, lowered: str) -> dict[str, tuple[str, frozenset[str]]] | None:
    """The group of close languages ``guess`` is in, for the script ``lowered`` is written
    in: Serbian is among Russian's close languages in Cyrillic, Croatian's in Latin."""
    cyrillic = _CYRILLIC_RE.search(lowered) is not None
    return next(
        (
            group
            for group in _GROUPS
            if guess in group and (guess != "sr" or ("ru" in group) == cyrillic)
        ),
        None,
    )


# Letter clusters only one member of a group writes, each counting as a word: Norwegian
# "kj", "gj", "øy" (kjøpe, gjøre, høy) where Danish writes "k", "g", "øj" (købe, gøre, høj).
_CLUSTERS: dict[str, tuple[str, ...]] = {"no": ("kj", "gj", "\u00f8y"), "da": ("\u00f8j",)}


def _evidence(
    text: str, code: str, letters: str, words: frozenset[str], tokens: list[str]
) -> float:
    # A letter only one member writes counts more than a shared-spelling word; a letter
    # the member never writes counts as much against it.
    unwritten = _UNWRITTEN.get(code, "")
    return (
        2.0 * sum(ch in letters for ch in text)
        - 2.0 * sum(ch in unwritten for ch in text)
        + sum(token in words for token in tokens)
        + sum(text.count(cluster) for cluster in _CLUSTERS.get(code, ()))
    )


# How much py3langid's odds between two members of a group weigh against their own
# letters and words: its natural log odds times this, in units of one own word (a member
# py3langid finds 20 times less likely needs one and a half more of its own words). Its
# n-grams see the whole text where the word lists see a few words, but on a few words of
# two close languages they are often wrong: half a word per factor e, set once on the
# dev split (0.3 to 0.7 measure alike; 1.0 lets them outweigh a close pair's own words).
ODDS_WEIGHT = 0.5
# Odds below this floor say no more: a member py3langid all but rules out is not
# outweighed without bound by a lucky n-gram of the others.
ODDS_FLOOR = 1e-4


def _odds_evidence(group: Iterable[str], likelihood: Mapping[str, float]) -> dict[str, float]:
    """Per member of ``group`` (codes), ``ODDS_WEIGHT`` times the natural log of py3langid's
    probability of it over that of the group's most likely member (0 for that one,
    negative for the others; ``likelihood``: supported code → probability)."""
    group = list(group)
    top = max((likelihood.get(code, 0.0) for code in group), default=0.0)
    if top <= 0.0:
        return dict.fromkeys(group, 0.0)
    return {
        code: ODDS_WEIGHT * math.log(max(likelihood.get(code, 0.0) / top, ODDS_FLOOR))
        for code in group
    }


def close_pair_language(
    text: str,
    guess: str,
    fallback: str | None = None,
    likelihood: Mapping[str, float] | None = None,
) -> str:
    """``guess``, or the member of its group of close languages whose own letters and
    words ``text`` has clearly more of (``guess`` when it is in no group or the evidence
    does not point elsewhere). A ``fallback`` (the chat's language) of the same group
    with some evidence, and as much as the winner's, wins: a sentence spelled alike in
    Danish and Norwegian ("Jeg har ikke tid i dag") stays in the chat's language. With
    ``likelihood`` (py3langid's probability per supported code), each member's evidence
    also holds the log odds py3langid gives it against the group's likeliest
    (:data:`ODDS_WEIGHT`): a word or two of a neighbour's does not outweigh a text
    py3langid finds far more likely in one member ("Я не разумею, растлумач яшчэ раз")."""
    lowered = text.lower()
    group = _group_of(guess, lowered)
    if group is None:
        return guess
    tokens = _WORDS_RE.findall(lowered)
    scores = {
        code: _evidence(lowered, code, letters, words, tokens)
        for code, (letters, words) in group.items()
    }
    # The chat's language keeps a tie of the members' own letters and words, whatever
    # py3langid's odds: n-grams do not tell apart a sentence both spell alike.
    own = dict(scores)
    if likelihood is not None:
        odds = _odds_evidence(group, likelihood)
        scores = {code: score + odds[code] for code, score in scores.items()}
    best = max(scores, key=lambda code: scores[code])
    if scores[best] <= scores[guess]:
        best = guess
    if fallback in group and fallback != best and own[fallback] >= own[best] > 0:
        return fallback
    return best


def own_words_language(text: str, guess: str) -> str | None:
    """The member of ``guess``'s group of close languages whose own letters and words
    ``text`` has more of than any other member's (None: ``guess`` is in no group, or no
    member has any, or two tie): "Зроби коротше" is Ukrainian by its words however
    unsure py3langid is."""
    lowered = text.lower()
    group = _group_of(guess, lowered)
    if group is None:
        return None
    tokens = _WORDS_RE.findall(lowered)
    scores = sorted(
        (
            (_evidence(lowered, code, letters, words, tokens), code)
            for code, (letters, words) in group.items()
        ),
        reverse=True,
    )
    if scores[0][0] > 0 and scores[0][0] > scores[1][0]:
        return scores[0][1]
    return None


# Frequent function words of the most used Latin-script languages (lower case; written
# here from the languages' grammars). A text's instruction is carried by such words while
# names and borrowed terms ("Jürgen", "Grüße aus Köln") pull a character n-gram model
# towards their language: when py3langid's first choice and a close runner-up differ,
# the one whose function words the text uses clearly more wins.
FUNCTION_WORDS: dict[str, frozenset[str]] = {
    "en": _words(
        "the a an and or but of to for with from about is are was were be been do does did "
        "can could would should will you your i me my we our it this that these what which "
        "who how why when where please tell me explain again not"
    ),
    "de": _words(
        "der die das den dem des ein eine einen und oder aber von zu für mit aus über ist "
        "sind war waren sein kann könnte würde soll wird du dein ich mich mein wir unser es "
        "dies diese was welche wer wie warum wann wo bitte erkläre nochmal nicht auf noch"
    ),
    "fr": _words(
        "le la les un une des et ou mais de du à pour avec sur est sont était être peux "
        "pourrais voudrais tu ton je me mon nous notre il ce cette ces que quoi qui comment "
        "pourquoi quand où s'il plaît explique encore ne pas"
    ),
    "es": _words(
        "el la los las un una unos y o pero de del a para con sobre es son era ser puedes "
        "podrías tú tu yo me mi nosotros nuestro esto esta estos qué cuál quién cómo por "
        "cuándo dónde favor explica otra vez no"
    ),
    "it": _words(
        "il lo la i gli le un una e o ma di del della a per con su è sono era essere puoi "
        "potresti tu tuo io mi mio noi nostro questo questa che cosa chi come perché quando "
        "dove favore spiega ancora non"
    ),
    "pt": _words(
        "o a os as um uma e ou mas de do da para com sobre é são era ser pode poderia você "
        "seu eu me meu nós nosso isto esta estes que qual quem como por quando onde favor "
        "explique novamente não"
    ),
    "nl": _words(
        "de het een en of maar van naar voor met over is zijn was waren kan zou wil jij je "
        "jouw ik mij mijn wij ons dit deze wat welke wie hoe waarom wanneer waar alsjeblieft "
        "leg nog eens niet"
    ),
    # Latin-script languages outside the close groups, so that a text py3langid is unsure
    # of ("Cum instalez Python pe Windows?") can be placed by its grammar words too.
    "ro": _words(
        "și să este sunt nu cum ce care unde când pentru cu pe din mai foarte vreau poți "
        "poate îmi mă te acest această acum vă rog o un mi în la de despre"
    ),
    "tr": _words(
        "ve bir bu şu ne nasıl neden için ile çok daha ama değil var yok mi mı mu mü ben sen "
        "biz bana beni benim lütfen"
    ),
    "hu": _words(
        "és az egy hogy nem van mi mit hogyan miért ez ezt meg vagy kérlek nekem engem "
        "szeretnék tudsz"
    ),
    "fi": _words(
        "ja on ei se että mitä miten miksi kun jos tämä tuo minä minun sinä sinun voit "
        "voitko onko kanssa myös mutta"
    ),
    "id": _words(
        "dan yang di ke dari ini itu untuk dengan tidak apa bagaimana kenapa mengapa saya "
        "aku kamu anda bisa ada juga tolong"
    ),
    "et": _words("ja on ei see et mis kuidas miks kui ma mina sa sina minu sinu palun ka aga kas"),
    "lv": _words("un ir ar kā kas ko par no uz es tu man tev lūdzu vai bet nav arī šis"),
    "lt": _words("ir yra su kaip kas ką apie iš į aš tu man tau prašau ar bet nėra šis"),
    # Catalan: a sure guess of it is weighed too ("Cum fac un pull request pe GitHub?" is
    # Romanian by "cum", "un", "pe", whatever the n-grams of its English terms say).
    "ca": _words(
        "el la els les un una i o però de del dels a per amb sobre és són era ser pots "
        "podries tu teu jo em meu nosaltres nostre aquest aquesta això què quin quina qui "
        "com quan on si us plau explica no també molt"
    ),
}

# The runner-up replaces the first choice only with at least this many function words
# and this many more than the first choice has.
FUNCTION_WORDS_MIN = 2
FUNCTION_WORDS_MARGIN = 2


def function_word_language(
    text: str, guess: str, candidates: list[str], *, margin: int = FUNCTION_WORDS_MARGIN
) -> str:
    """``guess``, or the one of ``candidates`` (py3langid's next choices, supported codes)
    whose function words (:data:`FUNCTION_WORDS`) ``text`` uses clearly more: at least
    :data:`FUNCTION_WORDS_MIN` and ``margin`` more than ``guess`` (a smaller margin when
    py3langid is split between the two). A ``guess`` without a word list counts no
    function words."""
    tokens = _WORDS_RE.findall(text.lower())
    hits = {
        code: sum(token in FUNCTION_WORDS[code] for token in tokens)
        for code in dict.fromkeys(candidates)
        if code in FUNCTION_WORDS and code != guess
    }
    if not hits:
        return guess
    own = sum(token in FUNCTION_WORDS[guess] for token in tokens) if guess in FUNCTION_WORDS else 0
    best = max(hits, key=lambda code: hits[code])
    if hits[best] >= FUNCTION_WORDS_MIN and hits[best] - own >= margin:
        return best
    return guess


# Hindi and Urdu are one spoken language (Hindustani) and often written in Latin letters
# in chats ("mujhe ek email likhni hai"), which py3langid has no class for (it guesses
# Estonian, Finnish or Indonesian). Its grammar words as commonly romanised (copula,
# postpositions, pronouns, question words, negation, modal verbs; written here from the
# grammar), leaving out those other languages write as words ("se", "me", "to", "wo";
# Vietnamese "tha", "thi"; Danish "hun").
ROMANIZED_HINDUSTANI = _words(
    "hai hain hoon kya kyaa kaise kaisa kaisi kyun kyon kyu kab kahan mujhe "
    "mujhko mujhse mera meri mere tera teri tere aap aapka aapki apna apni tum tumhe "
    "tumhara humein hume yeh woh nahi nahin nhi aur bhi karo karna karein kijiye sakte "
    "sakta sakti chahiye raha rahi rahe mein liye kuch bahut bohot zyada kitna kitne kitni "
    "abhi batao bataiye samjhao accha acha achha theek thik haan shukriya dhanyavad madad"
)
# A text is romanised Hindustani with at least this many of those words making at least
# this share of its words: two grammar words of a sentence are no chance match.
ROMANIZED_HINDUSTANI_MIN = 2
ROMANIZED_HINDUSTANI_SHARE = 0.3


def romanized_hindustani(text: str) -> bool:
    """Whether ``text`` is Hindi-Urdu in Latin letters by its grammar words
    (:data:`ROMANIZED_HINDUSTANI`: at least :data:`ROMANIZED_HINDUSTANI_MIN`, and
    :data:`ROMANIZED_HINDUSTANI_SHARE` of its words)."""
    tokens = _WORDS_RE.findall(text.lower())
    hits = sum(token in ROMANIZED_HINDUSTANI for token in tokens)
    return hits >= ROMANIZED_HINDUSTANI_MIN and hits >= ROMANIZED_HINDUSTANI_SHARE * len(tokens)
