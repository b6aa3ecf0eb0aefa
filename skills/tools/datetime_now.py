# ruff: noqa: RUF001 (patterns in many scripts: their look-alike letters are meant)
"""``datetime_now``: the current date and time in a time zone (IANA names, zoneinfo)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from skills.registry import ToolContext, register_tool

DEFAULT_TIMEZONE = "UTC"


def _offset(moment: datetime) -> str:
    delta = moment.utcoffset()
    minutes = int(delta.total_seconds() // 60) if delta is not None else 0
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Return the current time in ``params["timezone"]`` (default UTC)."""
    name = (params.get("timezone") or DEFAULT_TIMEZONE).strip()
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return {"success": False, "error": f"unknown time zone {name!r} (use an IANA name)"}
    moment = datetime.now(UTC).astimezone(zone)
    return {
        "success": True,
        "result": {
            "timezone": name,
            "iso": moment.isoformat(timespec="seconds"),
            "date": moment.date().isoformat(),
            "time": moment.strftime("%H:%M:%S"),
            "weekday": moment.strftime("%A"),
            "utc_offset": _offset(moment),
            "unix": int(moment.timestamp()),
        },
    }


# Preselection (docs/architecture.md §6): requests in several languages, and the
# questions for the current time, date or weekday that need this tool.
EXAMPLES = (
    "What's the time now?",
    "What is the date today?",
    "What time is it in Singapore?",
    "Welcher Tag ist heute?",
    "Wie viel Uhr ist es in London?",
    "Quelle heure est-il à Tokyo ?",
    "¿Qué hora es en Lima?",
    "Che giorno della settimana è oggi?",
    "Que horas são em Lisboa?",
    "Какой сегодня день недели?",
    "今日は何日ですか？",
    "现在北京时间几点？",
    "Do you know what time it is right now?",
    "Which day of the week is it today?",
    "What's today's date, please?",
    "Current time in Los Angeles?",
    "Wie spät ist es gerade in New York?",
    "Den Wievielten haben wir heute?",
    "On est quel jour aujourd'hui ?",
    "Il est quelle heure à Montréal ?",
    "¿A qué fecha estamos hoy?",
    "Dimmi che ore sono a Sydney",
    "Который сейчас час во Владивостоке?",
    "Какое сегодня число?",
    "今日は何曜日？",
    "ロンドンは今何時ですか？",
    "Que dia é hoje?",
    "Hoe laat is het nu in Tokio?",
    "Która jest teraz godzina w Londynie?",
    "今天几号？",
    "no idea what time it is over in Sydney right now",
    "I need today's date for a form",
    "Keine Ahnung, welcher Tag heute ist, sag mal",
    "Aucune idée de l'heure qu'il est à New York",
    "Necesito la fecha de hoy para un formulario",
    "Non so che ore sono a Tokyo adesso",
    "Понятия не имею, какое сегодня число",
    "今、ニューヨークは何時くらい？",
    "Is it still morning in Honolulu?",
    "What day is it today, Monday or Tuesday?",
    "How late is it in Dubai right now?",
    "Ist es in Tokio schon Abend?",
    "Welches Datum ist heute?",
    "Quelle est la date d'aujourd'hui ?",
    "Il est quelle heure à Pékin maintenant ?",
    "¿Qué día es hoy?",
    "¿Es de noche ya en Sídney?",
    "Che giorno è oggi?",
    "Che ora è adesso a New York?",
    "Сколько сейчас времени в Лондоне?",
    "Какое сегодня число и день недели?",
    "今何時？",
    "シドニーは今夜ですか？",
    "Que horas são agora em Tóquio?",
    "Welke dag is het vandaag?",
    "Jaki dziś jest dzień?",
    "伦敦现在几点？",
    "지금 몇 시야?",
    "Bugün günlerden ne?",
    "quick one: is it still Sunday over in Auckland?",
    "what's the date, I keep losing track",
    "my watch died, got the time?",
    "Is it already past midnight in Tokyo?",
    "What day of the month are we on?",
    "Sag mal schnell, wie spät es ist",
    "Ist in Sydney schon Montag?",
    "Haben wir heute den 12. oder den 13.?",
    "Tu as l'heure, s'il te plaît ?",
    "À Los Angeles, il est quelle heure là maintenant ?",
    "On est le combien aujourd'hui ?",
    "¿Me dices la hora, porfa?",
    "¿Qué fecha es hoy, que no me acuerdo?",
    "Oggi è il 14 o il 15?",
    "Mi sai dire l'ora esatta?",
    "Подскажи, сколько сейчас времени",
    "Какое сегодня число, не напомнишь?",
    "今日って何月何日だっけ？",
    "いまニューヨークって何時？",
    "现在纽约是几点？",
    "今天是星期几来着？",
    "Hoe laat is het daar nu in New York?",
    "Którego dzisiaj mamy?",
    "Która godzina jest teraz w Tokio?",
    "Que horas são aí em Nova Iorque agora?",
    "Hoje é dia quantos?",
    "오늘 며칠이야?",
    "Şu an Tokyo'da saat kaç?",
    "Is it the weekend yet? What's today",
    "What's the local time for my colleague in Bangalore?",
    "Is the US east coast awake yet? What time is it there",
    "Wie spät ist es gerade bei meinem Bruder in Kalifornien?",
    "Quelle heure est-il chez ma sœur à Montréal ?",
    "¿Qué hora tienen ahora mismo en Ciudad de México?",
    "Che ore sono adesso in California?",
    "Который час сейчас у брата в Нью-Йорке?",
    "今、ロサンゼルスは朝？夜？",
    "Hoe laat is het nu bij mijn zus in Sydney?",
    "Która jest godzina u mojej siostry w Nowym Jorku?",
    "How many days until Christmas?",
    "How long is it until New Year's Eve from today?",
    "What year is it?",
    "Which week number are we in?",
    "Wie viele Tage sind es noch bis Weihnachten?",
    "Welche Kalenderwoche haben wir?",
    "Combien de jours avant Noël ?",
    "On est en quelle année ?",
    "¿Cuántos días faltan para Navidad?",
    "¿En qué mes estamos?",
    "Quanti giorni mancano a Natale?",
    "Сколько дней осталось до Нового года?",
    "Какой сейчас месяц?",
    "クリスマスまであと何日？",
    "离春节还有几天？",
    "Hoeveel dagen is het nog tot Kerstmis?",
    "Ile dni zostało do świąt?",
    "Quantos dias faltam para o Natal?",
    "크리스마스까지 며칠 남았어?",
    # Swedish, Danish, Norwegian: languages the embedding model was not trained on.
    "Hur mycket är klockan just nu?",
    "Vad är klockan i New York?",
    "Vilket datum är det idag?",
    "Vilken veckodag är det i dag?",
    "Vilken vecka är det nu?",
    "Hur många dagar är det kvar till midsommar?",
    "Hvad er klokken nu?",
    "Hvilken dato er det i dag?",
    "Hvor mange dage er der til jul?",
    "Hva er klokka i Oslo nå?",
    "Hvilken ukedag er det i dag?",
    "Hvor mange dager er det igjen til 17. mai?",
    # Greek, Vietnamese, Czech, Scandinavian, Turkish, Korean, Arabic: now, today,
    # what day, week number, days until a date.
    "Τι ώρα είναι;",
    "Τι ημερομηνία έχουμε σήμερα;",
    "Ποια μέρα της εβδομάδας είναι σήμερα;",
    "Τι ώρα είναι τώρα στη Νέα Υόρκη;",
    "Πόσες μέρες έχουμε μέχρι το Πάσχα;",
    "Σε ποια εβδομάδα του χρόνου είμαστε;",
    "Τι ημερομηνία θα είναι σε δύο εβδομάδες;",
    "Mấy giờ rồi?",
    "Bây giờ ở Tokyo là mấy giờ?",
    "Hôm nay ngày mấy?",
    "Hôm nay là ngày gì trong tuần?",
    "Còn mấy ngày nữa là đến Giáng sinh?",
    "Kolikátého je dnes?",
    "Jaký je dnes den?",
    "Kolik je hodin v Tokiu?",
    "Kolik dní zbývá do Vánoc?",
    "Kolikátý je teď týden?",
    "Hvor mange dage er der til nytår?",
    "Hvilken dato er det om to uger?",
    "Vilket datum är det om tio dagar?",
    "Şu an saat kaç?",
    "Bugün hangi gün?",
    "Bugün ayın kaçı, söyler misin?",
    "Bayrama kaç gün var?",
    "Tokyo'da saat kaç?",
    "지금 몇 시인지 알려줘",
    "오늘이 며칠이야?",
    "크리스마스까지 며칠 남았지?",
    "뉴욕은 지금 몇 시야?",
    "ما الوقت الآن؟",
    "ما هو اليوم؟",
    "كم التاريخ اليوم؟",
    "كم الساعة في لندن الآن؟",
    "كم يوما بقي على العيد؟",
)
# Near misses that need no tool (skills.registry).
COUNTER_EXAMPLES = (
    "Write a function that parses ISO 8601 dates",
    "How do I format a date in Python?",
    "Tips for a weekend in Lisbon",
    "What's the history of the Gregorian calendar?",
    "Wie organisiere ich meinen Tag besser?",
    "Je n'ai jamais le temps de lire",
    "Recomiéndame qué ver en Tokio",
    "Как научиться вставать рано?",
    "時間の使い方のコツを教えて",
    "Those were the days!",
    "Good old times, I miss them",
    "Das waren noch Zeiten",
    "C'était le bon temps",
    "¡Qué tiempos aquellos!",
    "Bei tempi quelli",
    "Эх, были времена",
    "あの頃は良かったなあ",
    "Bons tempos aqueles",
    "How do you say 'what time is it' in German?",
    "Is it a good time to buy a house?",
    "Write a cron expression that runs every Monday at 9",
    "Why does a day have 24 hours?",
    "Schreib eine Funktion, die den Wochentag eines Datums berechnet",
    "Pourquoi change-t-on d'heure en été ?",
    "¿Cómo calculo la diferencia entre dos fechas en Excel?",
    "Come si scrive una data in inglese?",
    "Как в Excel посчитать количество дней между датами?",
    "日付の書き方は国によってどう違うの？",
    "Como formatar datas no Excel?",
    "Hoe schrijf je een datum in het Engels?",
    "用Excel怎么计算两个日期之间的天数？",
    "What time does the bakery open on Sundays?",
    "When does the match start tonight?",
    "Um wie viel Uhr öffnet das Schwimmbad am Sonntag?",
    "¿A qué hora cierra el supermercado hoy?",
    "Hur skriver man datum på engelska?",
    "Varför har vi sommartid?",
    "Hvorfor har uken syv dager?",
)
TRIGGERS = (
    r"\bwhat time is it\b|\bwhat time it is\b|\bwhat'?s the time\b|\bthe time (?:now|in)\b"
    r"|\bcurrent (?:time|date|day)\b|\blocal time\b|\bwhat (?:day|date) is (?:it|today)\b"
    r"|\btoday'?s date\b|\bwhat(?:'s| is) (?:the )?date\b|\bday of the week\b"
    r"|\bis it (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b"
    r"|\bwhich day is (?:it|today)\b|\bdate today\b",
    r"\bwie spät\b|(?<!\bum )\bwie ?viel uhr\b|\buhrzeit\b|\bwelche[rs]? (?:wochen)?(?:tag|datum)"
    r" (?:ist|haben wir) (?:heute|es|morgen)\b|\bwelches datum\b|\bder wievielte\b"
    r"|\bden wievielten\b|\bdatum (?:ist )?heute\b|\bheutige[sn]? datum\b",
    r"\bquelle heure est[- ]il\b|\bil est quelle heure\b|\bl'heure (?:actuelle|qu'il est)\b"
    r"|\bquel jour (?:sommes|on est|est[- ]on|est[- ]il|nous sommes)\b|\bon est quel jour\b"
    r"|\bquelle (?:est la )?date\b|\bdate d'aujourd'hui\b|\bla date (?:d')?aujourd'hui\b",
    r"\bqué hora es\b|\bla hora (?:en|actual|que es)\b|\bqué día es hoy\b|\bqué fecha es\b"
    r"|\bfecha de hoy\b|\bqué día de la semana\b",
    r"\bche ore sono\b|\bche ora è\b|\bche giorno è\b|\bche data è\b|\bdata di oggi\b"
    r"|\bl'ora (?:in|a)\b|\bche giorno della settimana\b",
    r"\bque horas são\b|\bque dia é hoje\b|\bque data é hoje\b|\bdata de hoje\b"
    r"|\bhoe laat is het\b|\bwelke dag is het\b|\bwelke datum\b|\bdatum van vandaag\b",
    r"\bktóra (?:jest )?godzina\b|\bjaki (?:jest )?(?:dzisiaj|dziś)? ?dzień\b"
    r"|\bjaka (?:jest )?(?:dzisiaj |dziś )?data\b|\bdzień tygodnia\b",
    r"\bкоторый час\b|\bсколько (?:сейчас )?времени\b|\bкакое сегодня число\b"
    r"|\bкакой сегодня день\b|\bкакая сегодня дата\b|\bдень недели\b|\bкотра година\b"
    r"|\bсаат кач\b|\bsaat kaç\b|\bbugünün tarihi\b",
    r"\bvad är klockan\b|\bhur mycket är klockan\b"
    r"|\bvilke[nt] (?:dag|datum|veckodag|vecka) är det\b|\bveckonummer\b|\bdagens datum\b"
    r"|\bhva(?:d)? er klokk(?:en|a)\b|\bhvor mange er klokk(?:en|a)\b"
    r"|\bhvilken (?:dag|dato|ugedag|ukedag) er det\b|\bdagens dato\b|\b(?:uge|uke)nummer\b",
    r"\bкотра (?:зараз |тепер )?година\b|\bяке сьогодні число\b|\bякий сьогодні день\b"
    r"|\bяка сьогодні дата\b|\bkolik je hodin\b|\bkolikátého je\b|\bkoľko je hodín\b"
    r"|\b(?:paljonko|mitä) kello on\b|\bmikä päivä (?:tänään )?on\b|\bmonesko päivä\b",
    r"今何時|何時ですか|は今何時|は何時|何曜日|今日の日付|今日は何日|何日ですか|几点了|几点钟|现在几点"
    r"|几号|星期几|今天的日期|몇 시|무슨 요일|오늘 날짜|며칠",
    # Greek, Hindi, Vietnamese, Czech, Finnish, Scandinavian, Turkish, Arabic.
    r"\bτι ώρα είναι\b|\bτι (?:μέρα|ημέρα|ημερομηνία) (?:είναι|έχουμε)\b|\bποια ημερομηνία\b"
    r"|\bποια μέρα της εβδομάδας\b|\bπόσες (?:μέρες|ημέρες) (?:μένουν|έχουμε|είναι) (?:μέχρι"
    r"|ως)\b",
    r"कितने बजे|क्या (?:समय|टाइम) (?:है|हुआ|हो)|आज कौन सा (?:दिन|वार)|आज की तारीख"
    r"|कितने दिन (?:बाकी|रह गए|बचे)|कौन सी तारीख होगी",
    r"\bmấy giờ rồi\b|\blà mấy giờ\b|\bhôm nay (?:là )?(?:thứ mấy|ngày (?:mấy|bao nhiêu|gì))\b"
    r"|\bcòn (?:bao nhiêu|mấy) ngày\b|\btuần thứ mấy\b|\bngày mai là thứ mấy\b",
    r"\bkolik (?:je )?(?:teď |ted |právě )?hodin\b|\bjaký je dnes den\b|\bkolik dní zbývá\b"
    r"|\bkolikátý\b|\bmonesko viikko\b|\bmikä viikko (?:nyt )?on\b|\b(?:montako"
    r"|kuinka monta) päivää (?:on )?(?:vielä )?\w+(?:un|iin|aan|ään|yyn|oon)\b",
    r"\bhvad er datoen om\b|\bhvilken dato er det om\b|\bvilket datum är det om\b"
    r"|\bhur (?:många dagar|länge) är det kvar till\b|\bbugün günlerden ne\b|\bayın kaçı\b"
    r"|\bkaç gün kaldı\b|\w+(?:na|ne|ya|ye) kaç gün var\b",
    r"كم الساعة|الوقت الآن|تاريخ اليوم|التاريخ اليوم|كم يوما? (?:بقي|تبقى|باقي)",
    # The hour, the date or the weekday asked in the forms a language has for them, not
    # only its textbook phrase: "is it Tuesday today?", "what's the date tomorrow?",
    # "is it morning or night there now?" (Hindi, Czech, Finnish, Greek, Danish,
    # Norwegian, Swedish, Vietnamese).
    r"(?:कितना|कितने) बजा|(?:समय|टाइम|वक्त|वक़्त) क्या (?:है|हुआ|हो)|तारीख क्या है"
    r"|(?:कौन सी|क्या) तारीख (?:है|होगी)|आज (?:सोमवार|मंगलवार|बुधवार|गुरुवार|शुक्रवार|शनिवार"
    r"|रविवार) है|अभी (?:सुबह|दोपहर|शाम|रात) है",
    r"\b(?:je|bude) (?:dnes|dneska|zítra) (?:pondělí|úterý|středa|čtvrtek|pátek|sobota|neděle)\b"
    r"|\b(?:který|jaký) (?:den|datum)(?: v týdnu)? (?:je|bude|máme)\b|\bjaké je (?:dnes |dneska )"
    r"?datum\b|\bkolikátého (?:je|bude|máme)\b|\bmikä päivämäärä\b|\bonko (?:tänään|huomenna)"
    r" (?:maanantai|tiistai|keskiviikko|torstai|perjantai|lauantai|sunnuntai)\b"
    r"|\bmikä (?:viikonpäivä|päivä) (?:tänään|huomenna|nyt) on\b",
    r"\bσήμερα είναι (?:Δευτέρα|Τρίτη|Τετάρτη|Πέμπτη|Παρασκευή|Σάββατο|Κυριακή)\b"
    r"|\bτι ώρα έχει\b(?! (?:ο|η|το) )|\bποια μέρα είναι\b|\bτι ημερομηνία θα είναι\b"
    r"|\b(?:er|är) det (?:mandag|tirsdag|onsdag|torsdag|fredag|lørdag|søndag|måndag|tisdag"
    r"|lördag|söndag) (?:i dag|idag)\b|\bhva(?:d)? dato (?:har vi|er det)\b|\bhvor sent er det\b"
    r"|\bhvilken dag er det i morgen\b",
    r"\b(?:hôm nay|ngày mai|mai) (?:là )?(?:thứ mấy|ngày mấy|ngày bao nhiêu)\b"
    r"|\b(?:bây giờ|giờ này)\b[^?.!]{0,30}\b(?:mấy giờ|sáng hay tối|tối hay sáng|ngày hay đêm)\b"
    r"|\b(?:bây giờ|hiện tại) là (?:tháng|năm) mấy\b|\btháng mấy rồi\b|\bngày mấy tháng mấy\b",
)


register_tool(
    name="datetime_now",
    description="Get the current date, time and weekday in a time zone.",
    category="time",
    parameters={
        "type": "object",
        "properties": {
            "timezone": {
                "type": ["string", "null"],
                "description": "IANA time zone such as 'Europe/Berlin'; null means UTC.",
            }
        },
        "required": [],
        "additionalProperties": False,
    },
    execute=execute,
    examples=EXAMPLES,
    counter_examples=COUNTER_EXAMPLES,
    triggers=TRIGGERS,
)
