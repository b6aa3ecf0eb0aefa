# ruff: noqa: RUF001, E501 (patterns in many scripts: their look-alike letters are meant; long alternations)
"""``weather``: current weather from OpenWeatherMap (needs ``OPENWEATHERMAP_API_KEY``)."""

from __future__ import annotations

from typing import Any

import httpx
from django.conf import settings

from skills.registry import ToolContext, register_tool

API_KEY_SECRET = "OPENWEATHERMAP_API_KEY"  # noqa: S105 (a secret's name)
DEFAULT_UNITS = "metric"
TIMEOUT_S = 15.0
_UNIT_LABELS = {"metric": ("°C", "m/s"), "imperial": ("°F", "mph")}


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Current conditions at ``location``: temperature, feels-like, humidity, wind, sky."""
    location = str(params.get("location") or "").strip()
    if not location:
        return {"success": False, "error": "the location is empty"}
    units = params.get("units") or DEFAULT_UNITS
    query = {"q": location, "units": units, "appid": context.secrets[API_KEY_SECRET]}
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            response = await client.get(
                f"{settings.SKILLS_WEATHER_API_BASE.rstrip('/')}/data/2.5/weather", params=query
            )
        if response.status_code == httpx.codes.NOT_FOUND:
            return {"success": False, "error": f"no weather found for {location!r}"}
        if response.status_code != httpx.codes.OK:
            return {
                "success": False,
                "error": f"weather lookup failed: HTTP {response.status_code}",
            }
        found = response.json()
        main, wind = found["main"], found.get("wind", {})
        sky = found.get("weather") or [{}]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        return {"success": False, "error": f"weather lookup failed: {type(exc).__name__}"}
    temperature_unit, speed_unit = _UNIT_LABELS[units]
    return {
        "success": True,
        "result": {
            "location": str(found.get("name") or location),
            "temperature": main.get("temp"),
            "feels_like": main.get("feels_like"),
            "temperature_unit": temperature_unit,
            "humidity_percent": main.get("humidity"),
            "wind_speed": wind.get("speed"),
            "wind_speed_unit": speed_unit,
            "conditions": str(sky[0].get("description", "")),
        },
    }


# Preselection (docs/architecture.md §6): requests in several languages, and the words
# for weather, rain, snow, forecasts and umbrellas.
EXAMPLES = (
    "What's the weather in Chicago?",
    "Will it snow in Denver tomorrow?",
    "Is it cold outside in Oslo right now?",
    "Wie ist das Wetter in Zürich?",
    "Schneit es morgen in Innsbruck?",
    "Quel temps fera-t-il demain à Genève ?",
    "¿Llueve ahora en Bilbao?",
    "Com'è il meteo a Palermo?",
    "Como está o clima em Porto hoje?",
    "Какая погода завтра в Минске?",
    "名古屋の天気は？",
    "广州明天天气如何？",
    "Do I need an umbrella in Seattle today?",
    "How hot is it in Phoenix right now?",
    "What's the forecast for Boston this weekend?",
    "Regnet es gerade in Hamburg?",
    "Wie warm wird es morgen in Wien?",
    "Il fait quel temps à Lyon ?",
    "Va-t-il pleuvoir demain à Bordeaux ?",
    "¿Qué tiempo hace hoy en Sevilla?",
    "¿Va a llover mañana en Valencia?",
    "Che tempo fa a Milano oggi?",
    "Piove a Firenze?",
    "Будет ли дождь завтра в Москве?",
    "Сколько градусов сейчас в Казани?",
    "札幌は今日雪が降りますか？",
    "Vai chover em São Paulo amanhã?",
    "Wat voor weer is het in Utrecht?",
    "Jaka jest pogoda w Krakowie?",
    "上海今天下雨吗？",
    "Should I take a jacket to Edinburgh today?",
    "Is it beach weather in Malaga this weekend?",
    "Brauche ich heute in Köln einen Regenschirm?",
    "Est-ce qu'il va faire beau à Nantes samedi ?",
    "¿Hace frío ahora en Burgos?",
    "Serve l'ombrello oggi a Torino?",
    "Нужен ли сегодня зонт в Петербурге?",
    "明日の大阪は傘いる？",
    "Will I need sunscreen in Madrid tomorrow?",
    "Is there a storm coming to Miami tonight?",
    "How windy is it in Wellington today?",
    "Wird es am Wochenende in Berlin regnen?",
    "Gibt es heute Gewitter in München?",
    "Fait-il froid à Strasbourg en ce moment ?",
    "Y a-t-il du vent à Marseille aujourd'hui ?",
    "¿Va a hacer calor en Córdoba el sábado?",
    "¿Hay tormenta hoy en Barcelona?",
    "Farà bel tempo a Venezia domenica?",
    "C'è vento oggi a Trieste?",
    "Какая погода сейчас в Сочи?",
    "Будет ли снег в Новосибирске на выходных?",
    "福岡は明日晴れる？",
    "今、沖縄は暑い？",
    "Vai fazer frio em Curitiba amanhã?",
    "Gaat het morgen regenen in Amsterdam?",
    "Czy jutro będzie padać w Poznaniu?",
    "北京明天会下雪吗？",
    "내일 부산 날씨 어때?",
    "Yarın Ankara'da yağmur yağacak mı?",
    "Is it freezing there right now?",
    "Is it raining over there at the moment?",
    "Fait-il froid là-bas en ce moment ?",
    "¿Hace calor allí ahora?",
    "Ist es da gerade kalt?",
    "Fa freddo lì adesso?",
    "Там сейчас холодно?",
    "そっちは今寒い？",
    "gonna go cycling in Ghent this afternoon, will it stay dry?",
    "Is it t-shirt weather in Rome today?",
    "Any chance of sun in Dublin tomorrow?",
    "Kann ich morgen in Hamburg grillen oder gießt es?",
    "Wird es heute Nacht in Graz frieren?",
    "Je sors courir à Lille, il fait combien dehors ?",
    "Faut-il prévoir un manteau à Bruxelles demain ?",
    "¿Necesito chaqueta esta noche en Madrid?",
    "¿Qué temperatura hace en Quito ahora?",
    "Domani a Bologna posso andare al mare o piove?",
    "Quanti gradi ci sono adesso a Napoli?",
    "Какая температура сейчас в Екатеринбурге?",
    "明日の京都、洗濯物外に干せる？",
    "杭州这周末适合出去玩吗，会下雨吗？",
    "Wordt het zonnig in Rotterdam morgen?",
    "Jaka jest temperatura w Gdańsku?",
    "Está fazendo calor em Recife agora?",
    "오늘 서울 미세먼지랑 날씨 어때?",
    "İstanbul'da bugün hava nasıl?",
    "We're hiking near Zermatt tomorrow, what are the conditions looking like?",
    "Flying to Reykjavik tonight, is it stormy there?",
    "On part à Biarritz demain, il va faire beau ?",
    "Vamos a la playa en Cádiz mañana, ¿hará sol?",
    "Domani vado in montagna in Trentino, com'è previsto?",
    "Завтра едем на дачу под Тверь, будет солнечно?",
    # Swedish, Danish, Norwegian: languages the embedding model was not trained on.
    "Hur blir vädret i Uppsala i helgen?",
    "Kommer det att regna i Göteborg i eftermiddag?",
    "Hur varmt är det i Luleå just nu?",
    "Blir det snö i Kiruna i natt?",
    "Vad säger väderprognosen för Visby på lördag?",
    "Vi ska grilla i kväll i Västerås, blir det uppehåll?",
    "Hvordan er vejret i Aarhus i dag?",
    "Bliver det regn i Odense i morgen?",
    "Hvordan blir været i Oslo i morgen?",
    "Er det kaldt i Tromsø nå?",
    "Hvor mange grader er det ute i Bergen?",
)
# Near misses that need no tool (skills.registry).
COUNTER_EXAMPLES = (
    "Tips for a weekend in Barcelona",
    "What's the best time of year to visit Iceland?",
    "Explain how hurricanes form",
    "Was kann man in München unternehmen?",
    "Quels sont les plus beaux quartiers de Lyon ?",
    "Расскажи о климате Сибири",
    "京都のおすすめの観光地は？",
    "What should I see in Prague in three days?",
    "Qu'est-ce qu'il faut visiter à Lisbonne ?",
    "¿Qué ver en Sevilla en un fin de semana?",
    "Cosa mangiare a Napoli?",
    "Что посмотреть в Казани за выходные?",
    "大阪でおすすめの食べ物は？",
    "O que fazer no Rio num fim de semana?",
    "Wat moet ik zien in Gent?",
    "Co warto zobaczyć w Gdańsku?",
    "成都有什么好玩的地方？",
    "What's the best season to visit Japan?",
    "Plan a day trip from Munich",
    "I love Lisbon, the light there is amazing",
    "Ich wohne seit Jahren in Dresden",
    "Quels musées visiter à Paris ?",
    "¿Qué comer en Bilbao?",
    "Cosa vedere a Venezia in un giorno?",
    "Что посмотреть в Сочи?",
    "沖縄のおすすめビーチは？",
    "O que comer em Curitiba?",
    "Wat te doen in Utrecht?",
    "Co zjeść w Poznaniu?",
    "北京有什么好吃的？",
    "부산 맛집 추천해 줘",
    "Ankara'da görülecek yerler neler?",
)
# A forecast, an umbrella, a "прогноз" or "previsioni" alone may be sales, terms or
# insurance; a weather app is software: they count beside words of weather or days.
# What the weather does, or what one takes against it, by language (stems): beside a
# time soon (:data:`_SOON`) a question about the weather.
_WEATHER_WORDS = (
    r"\b(?:rain(?:s|y|ing|ed)?|snow(?:s|y|ing|ed|fall)?|sunny|sunshine|windy|stormy?"
    r"|thunderstorms?|icy|frosty?|foggy|humid"
    r"|jacket|coat|sunscreen|gloves|scarf|jacke|mantel|gewitter\w*|sonnig|windig|sturm|nebel"
    r"|glatteis|sonnencreme|manteau|veste|blouson|orage\w*|ensoleillé|brouillard|verglas"
    r"|crème solaire|chaqueta|abrigo|tormenta\w*|soleado|niebla|protector solar|giacca"
    r"|giubbotto|cappotto|temporal[ei]|soleggiato|nebbia|crema solare|casaco|jaqueta"
    r"|tempestade|ensolarado|nevoeiro|protetor solar|jas|onweer|zonnig|ijzel|zonnebrand"
    r"|куртк\w*|пальто|гроз(?:а|ы|у|ой)|солнечн\w*|ветр\w*|туман\w*|гололед\w*|мороз\w*"
    r"|вітр\w*|сонячн\w*|kurtk\w*|płaszcz\w*|burz[aeyą]|wiać|wieje|wiało|wietrznie|słoneczn\w*|wietrz\w*|mgł\w*"
    r"|bund(?:a|u|y|ou)|kabát\w*|bouřk\w*|slunečn\w*|větrn\w*|mlh\w*|jacka|åsk\w*|blåsig\w*"
    r"|prš\w*|sněž\w*|déšť|dešt\w*|regn|regnvejr|snö|snø|sne|solsken|solskinn"
    r"|dimma|jakke|frakke|torden\w*|tåge|tåke|blæs\w*|solrig|takki\w*|takin|ukkos\w*"
    r"|tuulinen|sumu\w*|lunta|ceket|fırtına\w*|güneşli|rüzgar\w*|şemsiye"
    r"|μπουφάν|βροχ\w*|χιόν\w*|καταιγίδ\w*|ζέστη|κρύο|hujan|salju|badai|cerah|berangin"
    r"|jaket|payung|mưa|tuyết|bão|nắng|áo khoác|lạnh|nóng|esernyő|eső|havaz\w*"
    r"|vihar\w*|napsüt\w*|hideg|geacă|umbrelă|ploaie|ninsoare|furtună|însorit|frig"
    # How warm or cold it is, and in how many degrees: "Er det koldt i København lige nu?",
    # "Kolik je teď stupňů v Praze?" (the word for degrees without a number beside it).
    r"|koldt|varmt|kallt|kaldt|teplo|kylmä|lämmin|lämpöä|kuuma|astetta|grader|stupň\w*"
    r"|βαθμούς|bao nhiêu độ|mấy độ|derece)\b|गर्मी"
    r"|مطر|ثلج|عاصفة|مشمس|رياح|ضباب|مظلة|معطف|बारिश|बर्फ|तूफ़ान|तूफान|कोहरा|ठंड|छाता|जैकेट"
    r"|גשם|שלג|סערה|ערפל|מעיל|מטרייה"
)
# A time soon, by language: a question about it with a word of the weather wants the
# forecast, not the climate.
_SOON = (
    r"\b(?:today|tonight|tomorrow|this (?:morning|afternoon|evening|weekend)|right now|later today"
    r"|heute|morgen|übermorgen|am wochenende|aujourd'hui|ce soir|demain|ce week-end|cet après-midi"
    r"|hoy|esta noche|mañana|este fin de semana|esta tarde|oggi|stasera|domani|stamattina"
    r"|questo (?:weekend|fine settimana)|hoje|amanhã|neste fim de semana|vandaag|vanavond"
    r"|dit weekend|vanmiddag|сегодня|вечером|завтра|на выходных|сейчас|сьогодні|ввечері"
    r"|на вихідних|зараз|dziś|dzisiaj|wieczorem|jutro|w weekend|dnes|večer|zítra|o víkendu"
    r"|idag|i dag|i kväll|ikväll|imorgon|i morgon|i helgen|i aften|i kveld|tänään|illalla"
    r"|huomenna|viikonloppuna|bugün|bu akşam|yarın|hafta sonu|σήμερα|απόψε|αύριο|τώρα|nu"
    r"|lige nu|i eftermiddag|teď|nyt|bây giờ|hari ini"
    r"|malam ini|besok|akhir pekan|hôm nay|tối nay|ngày mai|cuối tuần|holnap|hétvégén|ma este"
    r"|azi|astăzi|diseară|mâine|în weekend)\b"
    r"|(?<![\u0600-\u06ff])(?:اليوم|الليلة|غد[اًا]?)(?![\u0600-\u06ff])"
    r"|(?<![\u0900-\u097f])(?:आज|कल)(?![\u0900-\u097f])"
    r"|(?<![\u05d0-\u05ea])(?:היום|הערב|מחר)(?![\u05d0-\u05ea])"
)
TRIGGERS = (
    r"(?<!\bunder the )\bweather\b(?!\s+(?:apps?|widgets?|stations?|balloons?|and climate))"
    r"|\b(?:weather|the) forecast\b|\bforecast (?:in|for (?:today|tomorrow|the weekend)|says)\b"
    r"|\bgoing to (?:rain|snow)\b|\bwill it (?:rain|snow|be (?:sunny|cold|hot|warm|windy|cloudy))\b"
    r"|\bis it (?:raining|snowing|sunny|cold|hot|warm|windy)\b"
    r"|\b(?:need|take|bring|pack) (?:an |my |a )?umbrella\b|\bhow (?:hot|cold|warm) is it\b"
    r"|\btemperature (?:in|outside|today)\b",
    r"\bwetter\w*|\bregnet\b|\bregnen\b|\bregenschirm\b|\bschneit\b|\bschneien\b"
    r"|\bwie (?:warm|kalt|heiß) (?:ist|wird) es\b",
    r"\bquel temps\b|\bmétéo\b|\bpleuvoir\b|\bpleut\b|\bneiger\b|\bneige-t-il\b"
    r"|\bfera-t-il (?:beau|chaud|froid)\b|\bquelle température\b|\bparapluie\b",
    r"\bqué tiempo (?:hace|hará|va a hacer)\b|\bel tiempo (?:en|para|mañana|hoy)\b"
    r"|\bllover\b|\bllueve\b|\blloverá\b|\bnevar\b|\bnieva\b|\bpronóstico (?:del tiempo|para (?:hoy|mañana|el fin))"
    r"|\bhace (?:frío|calor)\b|\bparaguas\b|\bclima (?:en|de|para)\b",
    r"\bche tempo (?:fa|farà)\b|\bmeteo\b|\bpiove\b|\bpioverà\b|\bpiovere\b|\bnevica\b"
    r"|\bprevisioni (?:del tempo|meteo|per (?:oggi|domani|il (?:weekend|fine)))\b|\bombrello\b|\bfa (?:freddo|caldo)\b",
    r"\bcomo está o (?:tempo|clima)\b|\bprevisão do tempo\b|\bchover\b|\bchove\b|\bchoverá\b"
    r"|\bguarda-chuva\b|\bo tempo em\b|\bclima em\b|\bwat voor weer\b|\bhet weer\b"
    r"|\bweerbericht\b|\bweersverwachting\b|\bregenen\b|\bregent\b",
    r"\bpogod\w*|\bpadać\b|\bdeszcz\w*|\bśnieg\w*|\bпогод\w*|\bдожд\w*|\bснег\w*"
    r"|\bхолодно\b|\bжарко\b|\bзонт\w*|\bhava durumu\b|\byağmur\w*",
    r"\bväder\w*|\bregnar\b|\bsnöar\b|\b(?:att|ska|kommer det) (?:regna|snöa)\b|\bparaply\b"
    r"|\bvejr(?:et|udsigt\w*)\b|\bvær(?:et|melding\w*)\b|\bvêret\b|\bregner det\b|\bsner det\b|\bsnør det\b",
    r"\bдощ\w*|\bсніг\w*|\bпарасольк\w*|\bpočasí\b|\bpočasie\b|\bbude pršet\b|\bprší\b"
    r"|\bdeštník\w*|\bsää(?:\b|tä|n\b|ennuste\w*|tila)|\bsataa\b|\bsataako\b|\bsateenvarjo\w*",
    r"天気|天候|雨が降|雨降|雪が降|晴れ|気温|傘|天气|下雨|下雪|气温|晴天|带伞|날씨|비가 오|비 와|눈이 오|기온",
    # Weather words of the languages without a rule above.
    r"\bκαιρ(?:ός|ό|ού)\b|\bβρέξει\b|\bβρέχει\b|\bχιονίσει\b|\bομπρέλα\b|\bcuaca\b"
    r"|\bthời tiết\b|\bcó mưa\b|\bsẽ mưa\b|الطقس|طقس|ستمطر|تمطر|هل سيكون الجو|मौसम|बारिश"
    r"|מזג האוויר|ירד גשם|יהיה גשם|\bidőjárás\w*|\besni fog\b|\besik az eső\b|\bvremea\b"
    r"|\bva ploua\b|\bplouă\b|\bva ninge\b|\bmilyen (?:idő|az idő)\b",
    # A word of the weather or what one wears against it, and a time soon, in one sentence
    # ("Should I take a jacket in Oslo tonight?", "Gibt es heute Gewitter?").
    rf"(?:{_WEATHER_WORDS})[^.?!\n]{{0,60}}?(?:{_SOON})"
    rf"|(?:{_SOON})[^.?!\n]{{0,60}}?(?:{_WEATHER_WORDS})",
)


register_tool(
    name="weather",
    description="Get the current weather for a city or place.",
    category="weather",
    parameters={
        "type": "object",
        "properties": {
            "location": {
                "type": "string",
                "description": "City or place, optionally with country: 'Paris,FR'.",
            },
            "units": {
                "type": ["string", "null"],
                "enum": ["metric", "imperial", None],
                "description": "'metric' (°C, m/s) or 'imperial' (°F, mph); null means metric.",
            },
        },
        "required": ["location"],
        "additionalProperties": False,
    },
    execute=execute,
    examples=EXAMPLES,
    counter_examples=COUNTER_EXAMPLES,
    triggers=TRIGGERS,
    required_secrets=(API_KEY_SECRET,),
)
