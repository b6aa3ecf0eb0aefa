# ruff: noqa: RUF001 (number words in many scripts)
"""Numbers written as words, read as digits, for the tools' rules (docs/architecture.md §6).

Users write arithmetic in words as often as in digits ("how much is nineteen plus
twenty-three", "Wir teilen 84 Euro durch drei", "Сколько будет семь умножить на восемь"):
:func:`numbers_as_digits` gives the rules a copy of the message with such words as
digits, so that one rule of digits and operators reads both. Only the value's presence
matters to a rule, so a compound ("twenty-three", "dix-sept") becomes two numbers.

Words that are also everyday words of another supported language are left out ("one",
"un", "ein" and "uno" are articles; Italian "sei" and "sto" are verbs; Spanish "once" and
English "once", Norwegian "to", "ti" and "fire", Swedish "sex", Hungarian "hat" and "hét",
Romanian "opt", Spanish "tío" and "ni"), as are "cent" and "mil" (per cent, a thickness).
"""

from __future__ import annotations

import re

_WORDS: dict[int, str] = {
    2: "two zwei deux dos due dois duas twee два две дві dwa dwie dva dvě två kaksi iki "
    "δύο dua kettő két doi două",
    3: "three drei trois tres tre três drie три trzy tři kolme üç τρία tiga három trei",
    4: "four vier quatre cuatro quattro quatro четыре чотири cztery čtyři fyra fire neljä dört "
    "τέσσερα empat négy patru",
    5: "five fünf cinq cinco cinque vijf пять п'ять pięć pět fem viisi beş πέντε öt cinci",
    6: "six sechs seis zes шесть шість sześć šest kuusi altı έξι enam șase",
    7: "seven sieben sept siete sette sete zeven семь сім siedem sedm sju syv seitsemän yedi "
    "επτά εφτά tujuh șapte",
    8: "eight acht huit ocho otto oito восемь вісім osiem osm åtta otte åtte kahdeksan sekiz "
    "οκτώ delapan nyolc",
    9: "nine neun neuf nueve nove negen девять дев'ять dziewięć devět nio yhdeksän dokuz "
    "εννέα sembilan kilenc nouă",
    10: "ten zehn dix diez dieci dez tien десять dziesięć deset kymmenen δέκα sepuluh tíz zece",
    11: "eleven elf onze undici одиннадцать",
    12: "twelve zwölf douze doce dodici doze twaalf двенадцать dwanaście tolv",
    13: "thirteen dreizehn treize trece tredici treze dertien",
    14: "fourteen vierzehn quatorze catorce quattordici catorze veertien",
    15: "fifteen fünfzehn quinze quince quindici vijftien пятнадцать piętnaście",
    16: "sixteen sechzehn seize dieciséis sedici dezesseis zestien",
    17: "seventeen siebzehn diecisiete diciassette dezessete zeventien",
    18: "eighteen achtzehn dieciocho diciotto dezoito achttien",
    19: "nineteen neunzehn diecinueve diciannove dezenove negentien",
    20: "twenty zwanzig vingt veinte venti vinte twintig двадцать dwadzieścia tjugo tyve tjue "
    "yirmi είκοσι",
    30: "thirty dreißig trente treinta trenta trinta dertig тридцать trzydzieści",
    40: "forty vierzig quarante cuarenta quaranta quarenta veertig сорок czterdzieści",
    50: "fifty fünfzig cinquante cincuenta cinquanta cinquenta vijftig пятьдесят",
    100: "hundred hundert cien cento honderd сто hundra hundrede sata yüz",
    1000: "thousand tausend mille duizend тысяча tysiąc tusen",
}
_VALUE = {word: value for value, words in _WORDS.items() for word in words.split()}
# Tens joined to their units in one word ("veinticinco", "ventitré", "trentacinque",
# "dreiundzwanzig", "dezessete"): a number, whichever ("ventilatore" is a fan).
_COMPOUND_RE = re.compile(
    r"(?:veinti|venti[dtcqsn]|trenta|quaranta|cinquanta|dieci|dezes|dezo|dezen)\w+"
    r"|\w+und(?:zwanzig|dreißig|vierzig|fünfzig|sechzig|siebzig|achtzig|neunzig)",
    re.IGNORECASE,
)
_WORD_RE = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")


def _value(word: str) -> int | None:
    folded = word.casefold()
    if folded in _VALUE:
        return _VALUE[folded]
    return 20 if _COMPOUND_RE.fullmatch(folded) else None


def numbers_as_digits(text: str) -> str:
    """``text`` with the number words of :data:`_WORDS` (two to a thousand, in the
    supported languages) as digits; ``text`` itself when it has none."""
    changed = False

    def digit(match: re.Match[str]) -> str:
        nonlocal changed
        value = _value(match.group(0))
        if value is None:
            return match.group(0)
        changed = True
        return str(value)

    result = _WORD_RE.sub(digit, text)
    return result if changed else text
