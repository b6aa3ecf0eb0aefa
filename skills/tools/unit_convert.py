# ruff: noqa: RUF001 (patterns in many scripts: their look-alike letters are meant)
"""``unit_convert``: converts a quantity between units with the Pint units library."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from skills.registry import ToolContext, register_tool

DEFAULT_SIGNIFICANT_DIGITS = 6
MAX_UNIT_CHARS = 64


if TYPE_CHECKING:
    import pint


@lru_cache(maxsize=1)
def _units() -> pint.UnitRegistry:
    # Pint (and NumPy under it, about 30 MiB) is imported on the first conversion, not
    # when the tool registers at start-up; building the registry parses Pint's
    # definitions file (~0.1 s): once per process.
    import pint

    return pint.UnitRegistry(autoconvert_offset_to_baseunit=True)


def _rounded(value: float, digits: int) -> float:
    return float(f"{value:.{digits}g}")


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Convert ``value`` from ``from_unit`` to ``to_unit``; rounds to significant digits."""
    value = params.get("value")
    source, target = str(params.get("from_unit") or ""), str(params.get("to_unit") or "")
    digits = params.get("significant_digits") or DEFAULT_SIGNIFICANT_DIGITS
    if not isinstance(value, int | float) or not math.isfinite(value):
        return {"success": False, "error": "value must be a finite number"}
    if not source or not target or max(len(source), len(target)) > MAX_UNIT_CHARS:
        return {"success": False, "error": "both units are required (at most 64 characters)"}
    import pint

    units = _units()
    try:
        converted = units.Quantity(value, source).to(target)
    except pint.DimensionalityError:
        return {"success": False, "error": f"cannot convert {source} to {target}"}
    except Exception as exc:
        return {"success": False, "error": f"unknown unit: {exc}"}
    exact = float(converted.magnitude)
    return {
        "success": True,
        "result": {
            "value": _rounded(exact, int(digits)),
            "exact": exact,
            "unit": f"{converted.units:~P}" or str(converted.units),
            "from": f"{value} {source}",
        },
    }


# Preselection (docs/architecture.md §6): requests in several languages, and two units
# named beside a number (or "how many …"), or a verb of converting with a number and unit.
EXAMPLES = (
    "Convert 12 miles to kilometres",
    "How many litres are in 5 gallons?",
    "What is 180 pounds in kilograms?",
    "Wie viel sind 20 Grad Celsius in Fahrenheit?",
    "Wie viele Unzen sind 250 Gramm?",
    "Convertis 6 pieds en mètres",
    "¿Cuántos centímetros tiene un pie?",
    "Quanti litri sono 3 galloni?",
    "Quantos pés são 2 metros?",
    "Сколько миль в 42 километрах?",
    "100グラムは何オンス？",
    "5公斤是多少磅？",
    "How many centimetres is 6 feet 2 inches?",
    "Convert 350 Fahrenheit to Celsius",
    "What's 3 cups in millilitres?",
    "How many miles is a marathon in km? 42.2 km to miles",
    "Rechne 15 Meilen in Kilometer um",
    "Wie viel sind 2 Pfund in Gramm?",
    "Combien font 10 miles en kilomètres ?",
    "Convierte 70 grados Fahrenheit a Celsius",
    "¿Cuántas onzas son 500 gramos?",
    "Quanti chilometri sono 26 miglia?",
    "Переведи 30 футов в метры",
    "Сколько литров в 3 галлонах?",
    "5マイルは何キロ？",
    "華氏100度は摂氏何度？",
    "Converta 10 libras em quilos",
    "Hoeveel inches is 30 centimeter?",
    "Ile to kilogramów 150 funtów?",
    "把60英里每小时换算成公里每小时",
    "I never know how much 180 grams of flour is in cups",
    "my new bike does 25 mph, what's that in km/h",
    "Das Rezept sagt 2 cups Mehl, wie viel Gramm sind das?",
    "La recette dit 8 onces de beurre, ça fait combien de grammes ?",
    "Mi coche gasta 40 millas por galón, ¿cuántos litros a los 100 km son?",
    "La ricetta dice 350 gradi Fahrenheit, quanti sono in Celsius?",
    "Рецепт на 2 чашки муки, это сколько грамм?",
    "6フィートって何センチ？",
    "How many kilometres is 13 miles?",
    "What's 70 kg in pounds?",
    "Turn 2 pints into millilitres",
    "How many square feet is 40 square metres?",
    "Wie viele Zoll hat ein 65-cm-Bildschirm?",
    "Wie viel sind 3 Liter in Gallonen?",
    "Combien de litres fait un gallon américain ?",
    "150 pieds carrés, ça fait combien de mètres carrés ?",
    "¿Cuántos kilos son 12 libras?",
    "¿Cuántas millas son 100 kilómetros?",
    "Quanti piedi sono 3 metri?",
    "Quanti chili sono 20 libbre?",
    "Сколько дюймов в 30 сантиметрах?",
    "Сколько фунтов в 5 килограммах?",
    "10キロは何マイル？",
    "2リットルは何ガロン？",
    "Quantos quilômetros são 50 milhas?",
    "Hoeveel pond is 3 kilo?",
    "Ile to mil 100 kilometrów?",
    "10英里是多少公里？",
    "100파운드는 몇 킬로그램이야?",
    "5 mil kaç kilometre eder?",
    "the recipe wants 350F, what's that for my oven in celsius",
    "I weigh 11 stone, how many kilos is that",
    "my suitcase is 23 kg, what is it in pounds",
    "Wie viel sind 5 Fuß 9 in Zentimetern?",
    "Wie viele Kilometer sind 30 Meilen?",
    "Ça fait combien 5 pieds en centimètres ?",
    "Combien de tasses dans 500 ml ?",
    "¿Cuántos grados Celsius son 100 Fahrenheit?",
    "¿Cuánto es una pulgada en centímetros?",
    "Quanti grammi sono 4 once?",
    "Quanti gradi Celsius sono 80 Fahrenheit?",
    "Сколько килограммов в 200 фунтах?",
    "Сколько сантиметров в 5 футах?",
    "72華氏度是多少摄氏度？",
    "1マイルは何メートル？",
    "Hoeveel gram is een ounce?",
    "Ile to stopni Celsjusza 90 Fahrenheita?",
    "Quantos centímetros tem 1 pé?",
    "100마일은 몇 킬로미터야?",
    "60 fahrenheit kaç derece?",
    "the tyre pressure says 32 psi, what's that in bar?",
    "I ran 10 km, how many miles was that?",
    "Mein Fernseher hat 55 Zoll, wie viele Zentimeter sind das?",
    "J'ai roulé 60 miles, c'est combien en km ?",
    "Mi maleta pesa 50 libras, ¿cuántos kilos son?",
    "Ho corso 5 miglia, quanti chilometri sono?",
    # Swedish, Danish, Norwegian: languages the embedding model was not trained on.
    "Hur många liter är 5 gallon?",
    "Konvertera 180 pund till kilo",
    "Hur mycket är 6 fot i centimeter?",
    "Vad blir 100 grader Fahrenheit i Celsius?",
    "Räkna om 2 koppar mjöl till deciliter",
    "Jag sprang 10 engelska mil, hur långt är det i kilometer?",
    "Hvor mange centimeter er 12 tommer?",
    "Omregn 30 miles til kilometer",
    "Hvor mye er 8 unser i gram?",
    "Gjør om 75 grader Fahrenheit til Celsius",
    "I'm 5 foot 9, what is that in cm?",
    "my recipe says 180C, what's that for an American oven",
    "how heavy is 12 stone in kilos",
    "Ile to jest 6 stóp w metrach?",
    "Mam 2 szklanki mąki, ile to gramów?",
    "Przelicz 75 mil na godzinę na km/h",
    "5フィート8インチは何センチ？",
    "華氏90度は摂氏何度？",
    "2カップは何ミリリットル？",
    # Sizes between sizing systems.
    "What's a women's US shoe size 8 in EU?",
    "Ich trage Schuhgröße 43, was ist das in UK?",
    "Je fais du 40 en taille européenne, c'est quoi en US ?",
)
# Near misses that need no tool (skills.registry).
COUNTER_EXAMPLES = (
    "Why does the US still use the imperial system?",
    "Explain what a kilogram is defined by",
    "Warum hat England Meilen?",
    "¿Qué es un año luz?",
    "Расскажи историю метрической системы",
    "メートル法の歴史を教えて",
    "Why do Americans measure in Fahrenheit?",
    "Warum benutzen die Briten noch Meilen?",
    "Pourquoi les Américains n'utilisent pas le système métrique ?",
    "¿Por qué en Estados Unidos usan libras?",
    "Perché gli inglesi guidano a sinistra e usano le miglia?",
    "Почему в Америке не перешли на метрическую систему?",
    "なぜアメリカはマイルを使うの？",
    "What is the difference between mass and weight?",
    "Who invented the Celsius scale?",
    "Was ist ein Lichtjahr genau?",
    "Qui a inventé le mètre ?",
    "¿Por qué un galón británico es distinto del americano?",
    "Chi ha inventato il sistema metrico?",
    "Откуда взялся дюйм?",
    "ヤードポンド法の由来は？",
    "Por que os Estados Unidos usam milhas?",
    "Waarom gebruiken de Britten nog mijlen?",
    "为什么美国用华氏度？",
    "Varför använder amerikanerna tum och fot?",
    "Hvorfor bruker briter fortsatt miles?",
)
_UNITS = (
    r"kilomet\w*|kilomèt\w*|kilómet\w*|chilometr\w*|quilômet\w*|quilomet\w*|километр\w*"
    r"|miles?|meile\w*|milles?|millas?|miglia|miglio|milhas?|mijl\w*|mil\b|mila\b|mile|миль\w*"
    r"|милях|meters?|metres?|mètres?|metros?|metri|metr\w*|метр\w*|centimet\w*|centimèt\w*"
    r"|centímet\w*|zentimeter\w*|сантиметр\w*|millimet\w*|feet|foot|fuß|fuss|pieds?|pies"
    r"|piedi|piede|pés|voet|stóp|stopy|фут\w*|inch\w*|zoll|pouces?|pulgadas?|pollici"
    r"|pollice|polegadas?|duim|cali|дюйм\w*|yards?|pounds?|pfund|livres?|libras?|libbre"
    r"|libbra|pond|funt\w*|фунт\w*|kilo|kilos|kilogram\w*|kilogramm\w*|kilogramme\w*|chili"
    r"|chilogramm\w*|quilos?|килограмм\w*|кило|grams?|gramm\w*|grammes?|gramos?|grammi"
    r"|gramas?|грамм\w*|ounces?|unzen?|onces?|onzas?|oncia|onças?|унци\w*|liters?|litres?"
    r"|litros?|litri|litr\w*|литр\w*|millilit\w*|mililit\w*|миллилитр\w*|gallons?|gallonen?"
    r"|galloni|gallone|galones?|galão|galões|galon\w*|галлон\w*|cups?|tassen?|tasses?|tazas?"
    r"|tazze|tazza|xícaras?|kopjes?|szklank\w*|стакан\w*|чашк\w*|celsius|fahrenheit\w*"
    r"|kelvin|celsjusz\w*|цельси\w*|фаренгейт\w*|km/h|mph|kmh|knots?|kwh|joules?|calories?"
    r"|kcal|megabytes?|gigabytes?|terabytes?|acres?|hectares?|hektar\w*|psi|pascal"
    r"|fot\b|fod\b|tum\b|tommer?\b|pund\b|unse\b|kopp(?:ar|er)?\b|decilit\w*"
)
# Abbreviations no word is spelled as count alone; the others only after a number.
_AFTER_NUMBER = r"km|cm|mm|m|kg|g|mg|lb|lbs|oz|ft|in|mi|l|ml|gal|°[cf]"
_UNIT = rf"(?:\b(?:{_UNITS})|\b(?:km|cm|mm|kg|lbs?|oz|ft|ml)\b|\d\s*(?:{_AFTER_NUMBER})\b)"
_CJK_UNIT = (
    r"キロ\w*|マイル|メートル|センチ|フィート|インチ|ポンド|グラム|オンス|リットル|ガロン|カップ|摂氏|華氏"
    r"|公里|千米|英里|厘米|英尺|英寸|磅|公斤|千克|盎司|毫升|加仑|摄氏|华氏|킬로|마일|파운드|섭씨|화씨"
)
_ANY_UNIT = rf"(?:{_UNIT}|{_CJK_UNIT})"
_HOW_MANY = (
    r"how (?:many|much)|wie ?viele?|combien|cuánt[oa]s?|quant[ie]|quant[oa]s?|hoeveel|ile"
    r"|сколько|何|多少|몇|kaç|hur (?:många|mycket)|hvor (?:mange|mye|meget)"
)
# Arithmetic on quantities, not a change of unit: a recipe scaled for more people, a rate
# over a period or a pace ("7 litres per 100 km, fuel for 450 km?", "35 miles a day, how
# many a year?"): the calculator's.
_SCALED = (
    r"^(?![\s\S]*\b(?:halve|double|triple|for \w+ (?:people|persons|servings|guests)"
    r"|servings|pace|per (?:person|head|ticket|serving|day|week|month|year)"
    r"|(?:a|each|every) (?:day|week|month|year)|how much (?:fuel|petrol|gas))\b)"
)
# Two sizing systems named beside a size ("a UK size 12 dress in US sizes", "taille EU
# pour un US 9"): a size conversion (the region codes in capitals, "us" being a word).
_SIZE_WORDS = r"shoes?|sizes?|taille|pointure|talla|größe|schuhgröße|taglia|maat|rozmiar|размер"
_REGIONS = r"(?-i:US|UK|EU)|european|american|british|italian|french|japanese"
TRIGGERS = (
    rf"{_SCALED}(?=[\s\S]*(?:\d|{_HOW_MANY}))[\s\S]*?{_ANY_UNIT}[\s\S]{{0,60}}?{_ANY_UNIT}",
    rf"^(?=[\s\S]*\d)(?=[\s\S]*\b(?:{_SIZE_WORDS})\b)[\s\S]*\b(?:{_REGIONS})\b"
    rf"[\s\S]{{0,60}}\b(?:{_REGIONS})\b",
    rf"{_SCALED}[\s\S]*\b(?:convert|umrechnen|rechne|umwandeln|convertis|convertir|convierte|converti"
    rf"|converta|omrekenen|omvandla|konvertera|räkna om|omregn|konverter|gjør om"
    rf"|przelicz|переведи|перевести|pasa)\b[\s\S]*\d[\s\S]*{_ANY_UNIT}",
    rf"(?:換算|変換|换算|转换|환산)[\s\S]*{_ANY_UNIT}|{_ANY_UNIT}[\s\S]*(?:換算|変換|换算|转换|환산)",
)


register_tool(
    name="unit_convert",
    description=(
        "Convert a quantity from one unit to another (length, mass, volume, temperature, "
        "speed, energy, pressure, data size, …)."
    ),
    category="units",
    parameters={
        "type": "object",
        "properties": {
            "value": {"type": "number", "description": "The amount to convert, e.g. 5."},
            "from_unit": {
                "type": "string",
                "description": "The unit of the value, e.g. 'km', 'degF', 'lb', 'mph'.",
            },
            "to_unit": {
                "type": "string",
                "description": "The unit to convert to, e.g. 'mi', 'degC', 'kg', 'km/h'.",
            },
            "significant_digits": {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": 15,
                "description": "Significant digits of the rounded value; null means 6.",
            },
        },
        "required": ["value", "from_unit", "to_unit"],
        "additionalProperties": False,
    },
    execute=execute,
    examples=EXAMPLES,
    counter_examples=COUNTER_EXAMPLES,
    triggers=TRIGGERS,
)
