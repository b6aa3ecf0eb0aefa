# ruff: noqa: RUF001, E501 (patterns in many scripts: their look-alike letters are meant; long alternations)
"""``calculator``: evaluates an arithmetic expression with simpleeval (never ``eval``).

Names, functions and operators are a fixed allow-list; attribute access, calls to
anything else, huge powers and long strings are refused by simpleeval itself.
"""

from __future__ import annotations

import math
from typing import Any

from simpleeval import SimpleEval

from skills.registry import ToolContext, register_tool

MAX_EXPRESSION_CHARS = 500

_FUNCTIONS: dict[str, Any] = {
    "sqrt": math.sqrt,
    "cbrt": lambda x: math.copysign(abs(x) ** (1 / 3), x),
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
    "exp": math.exp,
    "ln": math.log,
    "log": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "degrees": math.degrees,
    "radians": math.radians,
    "factorial": math.factorial,
    "hypot": math.hypot,
}
_NAMES: dict[str, Any] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("the expression did not produce a number")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("the result is not a finite number")
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
    return value


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Evaluate ``params["expression"]``; ``^`` is read as a power, like ``**``."""
    expression = str(params.get("expression") or "").strip()
    if not expression:
        return {"success": False, "error": "the expression is empty"}
    if len(expression) > MAX_EXPRESSION_CHARS:
        return {"success": False, "error": f"the expression is longer than {MAX_EXPRESSION_CHARS}"}
    evaluator = SimpleEval(functions=_FUNCTIONS, names=_NAMES)
    try:
        value = _number(evaluator.eval(expression.replace("^", "**")))
    except Exception as exc:
        return {"success": False, "error": f"cannot evaluate {expression!r}: {exc}"}
    return {"success": True, "result": {"expression": expression, "value": value}}


# Preselection (docs/architecture.md §6): requests in several languages, and phrasings
# that need this tool: an operator between numbers, a percentage of a number, a power or
# root, a verb of calculating next to a number.
EXAMPLES = (
    "What is 48 divided by 6?",
    "Add up 120, 75 and 310",
    "How much is 7% of 900?",
    "Was ist 3 hoch 4?",
    "Berechne 45 mal 19",
    "Combien font 13 plus 29 ?",
    "¿Cuánto es 90 dividido entre 3?",
    "Quanto fa 8 per 125?",
    "Сколько будет 14 плюс 38?",
    "45かける12は？",
    "计算一下 88 加 12",
    "Oblicz 12 razy 12",
    "Work out 15% of 240 for me",
    "If dinner costs 186 and we are five, how much each?",
    "What's the square root of 729?",
    "2 to the power of 10?",
    "Average of 12, 19 and 30",
    "Rechne mal 1280 geteilt durch 16",
    "Wie viel Prozent sind 45 von 300?",
    "Calcule la moyenne de 14, 16 et 9",
    "Ça fait combien, 250 moins 87 ?",
    "Divide 950 entre 38, por favor",
    "¿Cuánto da 12 al cuadrado?",
    "Fammi la somma di 35, 48 e 102",
    "Quanto fa il 15 percento di 80?",
    "Посчитай 250 умножить на 4",
    "Чему равен корень из 144?",
    "350の20%はいくら？",
    "1500を12で割ると？",
    "Quanto é 72 dividido por 8?",
    "Hoeveel is 17 keer 24?",
    "Ile to jest 350 podzielić przez 7?",
    "三百乘以二十五等于多少？",
    "I bought 3 shirts at 24.90 each, how much did I spend?",
    "If I save 150 a month, how much will I have after 14 months?",
    "What's 2,500 at 4% interest compounded yearly after 5 years?",
    "we're 7 people and the bill is 238 euros plus a 10% tip, what does each pay",
    "I wonder what 3.2 times 45 is",
    "Ich habe 1200 Euro und gebe 37 % aus, wie viel bleibt übrig?",
    "Si j'ai 480 € et que j'en dépense un quart, il me reste combien ?",
    "Tengo 3 facturas de 45,60, 89,90 y 12,35, ¿cuánto suman?",
    "Se guadagno 2100 al mese, quanto fa in un anno?",
    "У меня 5 коробок по 24 штуки, сколько всего?",
    "1個180円のりんごを7個買うといくら？",
    "Se eu pagar 89 por mês durante 18 meses, quanto dá no total?",
    "Als ik 15% korting krijg op 240 euro, wat betaal ik dan?",
    "Ile wyjdzie 1250 zł po odjęciu 23% podatku?",
    "每个月存800元，两年一共存多少？",
    "What's 15 percent off 80 dollars?",
    "Split 245 euros between 7 people",
    "Multiply 36 by 48",
    "Was ergibt 1.250 minus 17 Prozent?",
    "Teile 960 durch 24",
    "Combien font 7 fois 86 ?",
    "¿Cuánto es 18 por 37?",
    "Quanto fa 1.200 diviso 16?",
    "Сколько будет 125 умножить на 16?",
    "84の3倍はいくつ？",
    "Quanto é 15% de 640?",
    "Hoeveel is 348 gedeeld door 12?",
    "Ile to jest 45 razy 28?",
    "128乘以45是多少？",
    "36 곱하기 48은?",
    "240'ın yüzde 15'i kaç?",
    "I earn 3,400 a month and rent is 1,150, what share of my income is that?",
    "need the total: 4 tickets at 37.50 plus 2 at 22",
    "what's 18 percent tip on 64.80",
    "how much is 2400 after a 12% raise",
    "Our team sold 340, 415 and 298 units, what's the total and the average?",
    "Ich brauche 15 % von 2.380 Euro",
    "Wenn ich 3 Stunden à 45 Euro arbeite, was bekomme ich?",
    "Rechnest du mir 7,5 mal 12 aus?",
    "Il me faut le total de 12,50 + 8,90 + 23,40",
    "Je gagne 2 300 par mois, ça fait combien sur l'année ?",
    "Si divido 1.500 euros entre 4 personas, ¿cuánto toca a cada una?",
    "Súmame 23, 45 y 78",
    "Mi fai il conto di 3 pizze a 8,50 e 2 birre a 5?",
    "Quanto viene 15 per 32?",
    "Помоги посчитать: 3 по 250 плюс 120",
    "Сколько будет 15% от 4800?",
    "3人で12,600円を割り勘するといくら？",
    "1万2千円の3割引はいくら？",
    "三个人平分360元，每人多少？",
    "15乘以24是多少",
    "Hoeveel is 21% btw op 350 euro?",
    "Ile to 15% z 2400 zł?",
    "Oblicz, ile zapłacę za 3 bilety po 45 zł",
    "Quanto dá 340 vezes 12?",
    "Se eu ganhar 3.500 por mês, quanto é por ano?",
    "3만원의 15%는 얼마야?",
    "1200'ün yüzde 18'i ne kadar?",
    "Compute 17.5% of 2,460 please",
    "my car did 540 km on 38 litres, what's the consumption per 100 km",
    "If a pizza costs 14 and we order 6, plus 5 delivery, what's the total?",
    "Mein Auto hat 620 km mit 41 Litern geschafft, wie viel ist das auf 100 km?",
    "J'ai payé 84 € pour 6 personnes, ça fait combien chacun ?",
    "Tengo que pagar 1.240 en 8 cuotas, ¿de cuánto es cada una?",
    "Ho speso 45, 32 e 18 euro, quanto in tutto?",
    "Зарплата 85000, налог 13%, сколько останется?",
    "時給1200円で8時間働くといくら？",
    "月薪一万二，扣掉两千五房租还剩多少？",
    "Ik heb 3 uur gewerkt à 27,50 per uur, wat krijg ik?",
    "Mam 1200 zł i wydam 35%, ile mi zostanie?",
    # Swedish, Danish, Norwegian: languages the embedding model was not trained on.
    "Vad blir 37 gånger 24?",
    "Räkna ut 12,5 % av 3 200 kr",
    "Hur mycket är 1 450 delat med 5?",
    "Vi var fyra som åt middag för 1 860 kronor, vad blir det per person?",
    "Jag tjänar 32 000 i månaden och skatten är 31 procent, hur mycket får jag ut?",
    "Vad är kvadratroten ur 529?",
    "Om jag sparar 500 kr i månaden i tre år, hur mycket har jag då?",
    "Lägg ihop 129, 349 och 89",
    "Hvad giver 45 gange 18?",
    "Udregn 25 procent af 1.200 kr.",
    "Vi er fem om regningen på 1.350 kr, hvad skal hver betale?",
    "Hva er 17 ganger 23?",
    "Regn ut 15 prosent av 2 400",
    "Hvor mye blir 3 billetter til 249 kr til sammen?",
    # Fractions and numbers written as words.
    "what's a quarter of 1,380",
    "how much is twelve times fifteen",
    "half of 3,750 plus 120?",
    "C'est combien, le tiers de 4 500 ?",
    "Combien font douze fois quinze ?",
    "Si j'achète 4 places à 32,50, ça me coûte combien ?",
    "Wie viel ist ein Drittel von 2.700?",
    "¿Cuánto es la mitad de 3.480?",
    # Quantities in arithmetic, not in a change of unit: scaling, rates over time, paces.
    "Scale this recipe from 4 to 10 servings: 250 g butter, 2 eggs",
    "I cycle 12 km a day, how far is that in a month?",
    "My car uses 6 litres per 100 km, how much petrol for 320 km?",
    "If I walk 8 km in 95 minutes, what is my pace per km?",
)
# Near misses that need no tool (skills.registry).
COUNTER_EXAMPLES = (
    "My maths teacher in school was really strict",
    "Explain what an integral is",
    "Write a calculator app in JavaScript",
    "Why is dividing by zero undefined?",
    "Mathe war nie mein Lieblingsfach",
    "Explique-moi ce qu'est une fraction",
    "¿Quién inventó el álgebra?",
    "Что такое простое число?",
    "数学の勉強法を教えて",
    "What's the difference between mean and median?",
    "Was ist der Unterschied zwischen Durchschnitt und Median?",
    "C'est quoi un pourcentage, en gros ?",
    "¿Qué diferencia hay entre media y mediana?",
    "Come si calcola una percentuale, in generale?",
    "Что такое квадратный корень?",
    "微分って何？",
    "Help my son understand long division, no answers please",
    "Why is pi an irrational number?",
    "Explain long multiplication step by step in general",
    "Warum ist null mal unendlich nicht definiert?",
    "Qu'est-ce qu'un nombre premier ?",
    "¿Qué es un logaritmo?",
    "Cos'è un numero primo?",
    "Что такое логарифм?",
    "素数ってなに？",
    "O que é um número primo?",
    "Wat is een priemgetal?",
    "什么是质数？",
    "Varför kan man inte dela med noll?",
    "Vad är ett primtal?",
    "Hvad er en brøk? Forklar det enkelt",
    "Hvorfor er matematikk viktig på skolen?",
    # Numbers that are facts about the user, not a sum to work out.
    "My kids are 4 and 9, what games can they play together?",
    "We're 2 adults and 3 children, which car is big enough for us?",
    "Meine Kinder sind 5 und 8, welches Brettspiel passt?",
    "On est 4 adultes et 2 enfants, quel gîte nous conseilles-tu ?",
)
_OPERATOR_WORDS = (
    r"times|multiplied by|divided by|plus|minus|over|mal|geteilt durch|durch|fois|divisé par"
    r"|multiplié par|moins|por|dividido (?:entre|por)|entre|más|menos|per|diviso|più|meno"
    r"|vezes|mais|keer|gedeeld door|razy|podzielone przez|przez|умножить на|разделить на|hoch"
    r"|to the power of|puissance|elevado a|elevato a|в степени"
    r"|krát|děleno|kertaa|jaettuna|помножити на|поділити на|мінус"
    r"|gånger|delat (?:med|på)|gange|ganger|divideret med|delt (?:med|på)"
    r"|плюс|минус|乘以|乘|除以|加上|加|减去|减|足す|引く|掛ける|かける|割る|곱하기|나누기|더하기"
    r"|çarpı|bölü|artı|eksi|επί|διά|συν|πλην|kali|dibagi|tambah|kurang|nhân|chia|cộng|trừ"
    r"|szorozva|osztva|plusz|mínusz|ori|împărțit la|כפול|חלקי|ועוד|פחות|ضرب|مقسوم على"
    r"|زائد|ناقص|गुणा|भाग|जोड़|घटा"
)
_PERCENT = (
    r"%|percent|per cent|prozent|pour ?cent|por ?ciento|per ?cento|por ?cento|procent\w*|prosent"
    r"|процент\w*|відсот\w*|パーセント|퍼센트|százalék\w*|τοις εκατό|persen|phần trăm|la sută"
    r"|prosentti\w*|yüzde|אחוז|بالمئة|في المئة|٪"
)
# Verbs that share an amount out, by language; a rule wants the amount, then who or what
# shares it (:data:`_SHARED_BY`) and a number.
_SPLIT_VERBS = (
    r"split|divide|teilen|teile|aufteilen|partager|partage|partageons|dividir|divide"
    r"|dividimos|repartir|reparte|dividere|dividiamo|dividi|divida|delen|verdelen|dela|delar"
    r"|dele|deler|dzielimy|podziel|podzielić|rozděl|rozdělit|разделить|раздели|разделим"
    r"|поділити|поділи|поділимо|μοιράζουμε|μοίρασε|μοιράσουμε|bagi|membagi|chia|împarte"
    r"|împărțim"
)
# Who or what it is shared by ("between 3", "auf 5 Leute", "entre cinco", "på tre"), by
# language: "split into 3 teams for the 2-hour workshop" shares no amount.
_SHARED_BY = (
    r"between|among|amongst|by|across|durch|auf|unter|zwischen|entre|à|a|tra|fra|per|in|over"
    r"|tussen|mellan|på|mellem|mellom|na|между|на|між|mezi|σε|untuk|kepada|cho|la"
)
# Verbs of sharing where words are not set apart by spaces, \b does not hold (Arabic
# marks, Devanagari vowel signs, Hebrew prefixes) or the numbers come first (Japanese,
# Korean, Turkish, Hungarian, Finnish): two numbers beside them are enough.
_SPLIT_UNSPACED = (
    r"割る|割って|割ったら|割り勘|平分|均分|分摊|(?<![a-z])AA(?![a-z])|나누면|나눠|قس[\u0651]?م"
    r"|बाँट|बांट|תחלק|לחלק|נחלק|\bjaa\b|\bjaetaan\b|\bböl\w*|\boszd el\b|\bosszuk el\b"
)
# A preposition before the amount a percentage is taken of or added to, by language.
_OF_AMOUNT = (
    r"of|on|auf|von|sur|de|des|du|sobre|su|di|op|van|på|af|av|на|от|із|з|od|z|ze|din|dari"
    r"|của|من|του|'?(?:den|dan|ten|tan)|מ"
)
TRIGGERS = (
    r"\d\s*(?:[+*×÷^]|\*\*)\s*\(?\s*-?\d",
    r"\d\s+[-/x]\s+\(?\d",
    rf"\d[\d.,]*\s*(?:{_OPERATOR_WORDS})\s*\(?\s*-?\d",
    rf"\d[\d.,]*\s*(?:{_PERCENT})\s*(?:of|von|de|des|du|di|del|dos|da|z|av|af|от|из|の)\s*\d",
    r"百分之\s*\d|\d+\s*的\s*\d+\s*%",
    r"(?:square root|cube root|squared|cubed|to the power|raised to|hoch \d|wurzel|au carré"
    r"|racine|al cuadrado|raíz|al quadrato|radice|ao quadrado|raiz|kwadrat|pierwiastek"
    r"|в квадрате|корень|в степени|乗|平方根|平方|次方|제곱)[\s\S]*\d"
    r"|\d[\s\S]*(?:squared|cubed|au carré|al cuadrado|al quadrato|ao quadrado|в квадрате"
    r"|の\d+乗|乗|次方|平方)",
    r"\b(?:calculate|compute|evaluate|work out|ausrechnen|rechne(?![^.?!]*\bum\b)|berechne|calcule\w*|calcula"
    r"|calcola|calcoli|bereken|oblicz|policz|посчитай|вычисли|подсчитай|hesapla|multiply"
    r"|divide|subtract|add up|multipliziere|dividiere|multiplie|divise|multiplica|moltiplica"
    r"|dividi|умножь|раздели|сложи|räkna ut|beräkna|regn ut|udregn|beregn|lägg ihop)\b[^.?!]*\d",
    r"(?:計算|算一下|计算|帮我算|계산)[\s\S]*\d|\d[\s\S]*(?:計算して|を計算|算一下|계산해)",
    # An amount shared out: a verb of splitting and two quantities in one sentence ("split
    # 84 euros between 3 of us", "Wir teilen 84 Euro durch drei", "3人で8400円を割ったら").
    # (Gaps bounded and free of digits where they can be: every message meets this rule.)
    rf"\b(?:{_SPLIT_VERBS})\b[^\d.?!\n]{{0,40}}\d[^.?!\n]{{0,40}}?\b(?:{_SHARED_BY})\s+"
    r"(?:\S+\s+){0,2}?-?\d",
    rf"(?:{_SPLIT_UNSPACED})[^\d.?!\n]{{0,40}}\d[^.?!\n]{{0,40}}?\d"
    rf"|\d[^\d.?!\n]{{0,40}}\d[^.?!\n]{{0,40}}?(?:{_SPLIT_UNSPACED})",
    # A percentage of an amount a few words apart ("7% VAT on 129", "19 % Mehrwertsteuer
    # auf 249", "la TVA à 20 % sur 149,90"), and a share as a percentage ("38 out of 45,
    # what percentage is that?").
    rf"\d\s*(?:{_PERCENT})(?:\s+\S+){{0,3}}?\s+(?:{_OF_AMOUNT})\s*-?\d",
    rf"\d\s*(?:out of|von|sur|de|su|z|из|з|av|af|van|ze|od)\s+\d[^.?!\n]*"
    rf"(?:percentage|{_PERCENT}|pourcentage|porcentaje|percentuale|porcentagem)",
    r"\d+\s*का\s*\d+\s*(?:%|प्रतिशत)",
    # A number of things at a price ("6 biljetter à 95 kr", "4 билета по 750 рублей", "6
    # biglietti da 14,50"): a price has cents or a currency, a time ("3 friends at 7") none.
    r"\d+\s+[^\W\d_]+\s+(?:at|à|á|zu(?: je)?|je|po|по|da|por|a)\s+(?:[$€£¥]\s*)?\d+"
    r"(?:[.,]\d{2}\b|\s*(?:€|\$|£|kr\b|zł|euros?\b|dollars?\b|pounds?\b|руб|грн|lei\b|kč"
    r"|ft\b|chf\b|reais\b|yen\b|円|元))",
    # A tip on an amount, the mean of listed numbers, a change between two amounts in
    # percent ("a 20% tip on $84.50", "average of 78, 85 and 92", "percent change from
    # 1200 to 950").
    r"\btip (?:on|for|to) (?:a |an |the )?[$€£]?\d|\d\s*%\s*tip\b"
    r"|\b(?:average|mean|durchschnitt|moyenne|media|promedio)\s+(?:of|von|de|di|des)\s+"
    r"\d[\d.,]*(?:\s*,\s*\d[\d.,]*)*,?\s+(?:and|und|et|y|e)\s+\d"
    r"|\bpercent(?:age)? (?:change|increase|decrease|drop|rise) (?:from|between) [$€£]?\d",
)


register_tool(
    name="calculator",
    description=(
        "Evaluate an arithmetic expression exactly. Supports + - * / // % ** (or ^), "
        "parentheses, pi, e and the functions sqrt, cbrt, abs, round, min, max, floor, ceil, "
        "exp, ln, log, log10, log2, sin, cos, tan, asin, acos, atan, degrees, radians, "
        "factorial, hypot (angles in radians)."
    ),
    category="math",
    parameters={
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "description": "The expression to evaluate, e.g. '2**10 + sqrt(16)'.",
            }
        },
        "required": ["expression"],
        "additionalProperties": False,
    },
    execute=execute,
    examples=EXAMPLES,
    counter_examples=COUNTER_EXAMPLES,
    triggers=TRIGGERS,
)
