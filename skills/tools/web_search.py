# ruff: noqa: RUF001 (patterns in many scripts: their look-alike letters are meant)
"""``web_search``: searches the web through Tavily's search API (needs ``TAVILY_API_KEY``)."""

from __future__ import annotations

from typing import Any

import httpx
from django.conf import settings

from skills.registry import ToolContext, register_tool

API_KEY_SECRET = "TAVILY_API_KEY"  # noqa: S105 (a secret's name)
DEFAULT_MAX_RESULTS = 5
TIMEOUT_S = 15.0


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Search for ``query``; returns ``{"query", "results": [{title, url, content}]}``."""
    query = str(params.get("query") or "").strip()
    if not query:
        return {"success": False, "error": "the query is empty"}
    max_results = params.get("max_results") or DEFAULT_MAX_RESULTS
    body = {"query": query, "max_results": max_results, "search_depth": "basic"}
    headers = {"Authorization": f"Bearer {context.secrets[API_KEY_SECRET]}"}
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            response = await client.post(
                f"{settings.SKILLS_WEB_SEARCH_API_BASE.rstrip('/')}/search",
                json=body,
                headers=headers,
            )
        if response.status_code != httpx.codes.OK:
            return {"success": False, "error": f"search failed: HTTP {response.status_code}"}
        found = response.json().get("results", [])
    except (httpx.HTTPError, ValueError) as exc:
        return {"success": False, "error": f"search failed: {type(exc).__name__}"}
    results = [
        {
            "title": str(item.get("title", "")),
            "url": str(item.get("url", "")),
            "content": str(item.get("content", ""))[:2000],
        }
        for item in found[:max_results]
        if isinstance(item, dict)
    ]
    return {"success": True, "result": {"query": query, "results": results}}


# Preselection (docs/architecture.md §6): requests in several languages, and asking to
# search, look something up online, or for news and other current information.
EXAMPLES = (
    "Search online for the best budget headphones",
    "What's the latest on the SpaceX launch?",
    "Look up who the current prime minister of Japan is",
    "Such im Netz nach dem Fahrplan der S-Bahn",
    "Was gibt es Neues über die Fußball-Bundesliga?",
    "Cherche en ligne les horaires de la piscine",
    "Busca en la web opiniones sobre este coche",
    "Cerca online le notizie di oggi",
    "Pesquise na web o preço do ouro hoje",
    "Найди в интернете отзывы об этом ресторане",
    "最新の為替ニュースを調べて",
    "帮我搜索一下最近的电影评论",
    "Find me recent reviews of the new Pixel phone",
    "Who won the match last night?",
    "What's the current price of bitcoin?",
    "Google the opening hours of the city library",
    "Any news about the train strike today?",
    "Such mal nach den neuesten Nachrichten zur Wahl",
    "Recherche sur internet les avis sur ce restaurant",
    "Busca las últimas noticias sobre el Real Madrid",
    "Cerca su internet il prezzo della benzina oggi",
    "Найди последние новости о курсе рубля",
    "今日のニュースを検索して",
    "Procure na internet as últimas notícias do Brasil",
    "Zoek online naar recensies van deze laptop",
    "Wyszukaj w internecie najnowsze wiadomości",
    "上网查一下今天的新闻",
    "Is the Louvre open today?",
    "What are people saying about the new Zelda game?",
    "Any reviews of the hotel Miramar in Nice?",
    "Who won the Champions League final yesterday?",
    "Is Gmail down right now?",
    "What's the latest news about the bridge closure in Leeds?",
    "Hat der Baumarkt am Sonntag geöffnet? Schau mal nach",
    "Was kostet ein Bitcoin gerade?",
    "Est-ce que la piscine municipale est ouverte aujourd'hui ?",
    "Quelles sont les dernières nouvelles sur la grève SNCF ?",
    "¿Quién ganó el partido del Betis anoche?",
    "¿A qué hora abre hoy el Museo del Prado?",
    "Chi ha vinto il Giro d'Italia quest'anno?",
    "Quali sono le ultime notizie sullo sciopero dei treni?",
    "Кто выиграл вчерашний матч Зенита?",
    "Сколько сейчас стоит доллар в рублях?",
    "昨日の日本シリーズはどっちが勝った？",
    "新しいiPhoneの評判はどう？",
    "Qual é a cotação do euro hoje?",
    "Wat is het laatste nieuws over de verkiezingen?",
    "Kto wygrał wczorajszy mecz Legii?",
    "最新的苹果手机评价怎么样？",
    "Can you check online whether the A7 motorway is closed today?",
    "What's trending on the news this morning?",
    "Look up the opening times of the Apple store in Munich",
    "Find out if the Coldplay concert next week is sold out",
    "What did the Fed decide on interest rates this week?",
    "Gibt es aktuelle Infos zum Bahnstreik?",
    "Kannst du nachschauen, wann die Apotheke am Markt heute zu hat?",
    "Tu peux vérifier sur internet si le vol AF123 est à l'heure ?",
    "Qu'est-ce qui se passe en ce moment avec les élections américaines ?",
    "¿Puedes mirar en internet si hay huelga de metro hoy?",
    "Busca opiniones recientes del nuevo Galaxy",
    "Puoi controllare online se il museo è aperto domenica?",
    "Cosa dicono le recensioni sul nuovo ristorante di Cracco?",
    "Проверь в интернете, открыт ли сегодня Эрмитаж",
    "Какие последние новости про выборы?",
    "今日の東京の株価はどうなってる？ネットで調べて",
    "この映画の評判を調べてくれる？",
    "Você pode ver na internet se o metrô está funcionando hoje?",
    "Kun je opzoeken of de Efteling vandaag open is?",
    "오늘 뉴스 좀 찾아줘",
    "Bugün hava yolları grevi var mı, internetten bakar mısın?",
    "Has the new Nolan film come out in cinemas yet?",
    "What's the score in the Lakers game right now?",
    "Look up the current exchange rate of the yen to the euro",
    "Are there any delays on the Northern line this morning?",
    "Check whether the new MacBook is in stock anywhere",
    "When does the next season of The Bear come out?",
    "Search for concerts in Manchester this weekend",
    "Who is the current CEO of Boeing?",
    "Find the latest reviews of the Kia EV3",
    "Was ist heute in der Welt passiert? Gib mir die Schlagzeilen",
    "Wer ist gerade Bundestrainer?",
    "Such mir Konzerte in Leipzig für dieses Wochenende",
    "Wie steht es gerade im Spiel Freiburg gegen Mainz?",
    "Quel est le cours de l'action Airbus aujourd'hui ?",
    "Cherche les concerts à Toulouse ce week-end",
    "Qui est l'actuel ministre de l'Éducation ?",
    "¿Cuándo se estrena la nueva temporada de la serie?",
    "Busca conciertos en Valencia este fin de semana",
    "¿Cómo va el partido del Atlético ahora mismo?",
    "Quando esce il nuovo album di Elisa?",
    "Cercami i concerti a Torino questo fine settimana",
    "Come sta andando la partita della Juve adesso?",
    "Найди концерты в Москве на эти выходные",
    "Когда выходит новый сезон сериала?",
    "今週末の福岡のイベントを探して",
    "今のドル円のレートを調べて",
    "Quando estreia a nova temporada da série?",
    "Procura shows em Lisboa neste fim de semana",
    "Wanneer komt de nieuwe film van Pixar uit?",
    "Zoek concerten in Amsterdam dit weekend",
    "Kiedy wychodzi nowy sezon serialu?",
    "Znajdź koncerty w Warszawie w ten weekend",
    "帮我查一下这周末北京有什么演唱会",
    "最新的油价是多少？",
    "이번 주말 서울 공연 찾아줘",
    "Bu hafta sonu İzmir'de hangi konserler var, bakar mısın?",
    "What time does the final kick off tonight?",
    "When do the Red Sox play next?",
    "Um wie viel Uhr spielt heute die Nationalmannschaft?",
    "À quelle heure commence le match de rugby ce soir ?",
    "¿A qué hora empieza hoy el Gran Premio?",
    "A che ora gioca stasera l'Inter?",
    "Во сколько сегодня начинается матч ЦСКА?",
    "今夜の試合は何時から？",
    "Is the pharmacy on Main Street open on Sundays?",
    "What's the newest version of Python?",
    "Is the new Dune movie any good? What are critics saying",
    "Did the government collapse in the Netherlands this week?",
    "how much is a flight from London to Lisbon going for these days",
    "Who's playing at Glastonbury this year?",
    "Has the heat pump subsidy been extended, any news?",
    "Gibt's schon Testberichte zum neuen iPad?",
    "Wer hat gestern die Wahl in Österreich gewonnen?",
    "Wie viel kostet gerade ein Liter Diesel in Deutschland?",
    "Was ist heute an der Börse los?",
    "Il y a du nouveau sur la réforme des retraites ?",
    "Combien coûte un billet Paris-Marseille en TGV en ce moment ?",
    "Qui a gagné Roland-Garros cette année ?",
    "¿Ya salió el nuevo disco de Rosalía?",
    "¿Cuánto cuesta ahora mismo el alquiler medio en Madrid?",
    "¿Hay novedades sobre el apagón de ayer?",
    "C'è qualche novità sullo sciopero dei medici?",
    "Quanto costa oggi un biglietto Frecciarossa Roma-Milano?",
    "Кто сейчас лидирует в чемпионате по футболу?",
    "Что нового известно про отмену рейсов в Шереметьево?",
    "新しいSwitchの発売日っていつ？",
    "今年の紅白の出場者を教えて",
    "今年诺贝尔文学奖颁给了谁？",
    "Wat kost een treinkaartje van Utrecht naar Parijs op dit moment?",
    "Jaki jest aktualny kurs franka szwajcarskiego?",
    "Co nowego słychać w sprawie strajku nauczycieli?",
    "Kto aktualnie jest premierem Wielkiej Brytanii?",
    "Qual foi o resultado do jogo do Benfica ontem?",
    "O que está acontecendo agora na cúpula do G20?",
    "요즘 개봉한 영화 중에 평점 좋은 거 뭐 있어?",
    "Dolar bugün kaç lira?",
    "Are tickets for the Taylor Swift tour in Madrid still available?",
    "Is Ryanair flight FR1234 delayed today?",
    "I'm thinking of buying shares in Nvidia, how are they trading this week?",
    "We want to see a film tonight, what's showing at the cinemas in Bristol?",
    "Before I book, are there any strikes planned at Paris airports next week?",
    "Can you find out what the new speed limit rules in Wales are?",
    "Was hat der Fußballverein gestern Abend gemacht, gewonnen oder verloren?",
    "Ich überlege, ein E-Auto zu kaufen, gibt es gerade Förderprogramme?",
    "Je cherche un restaurant ouvert le dimanche soir à Grenoble, tu as des adresses récentes ?",
    "Est-ce que le nouveau film de Pixar est déjà sorti ?",
    "Estoy pensando en ir al concierto de Coldplay, ¿quedan entradas?",
    "¿Qué ha pasado hoy en el Congreso?",
    "Sto pensando di comprare il nuovo iPhone, ci sono offerte in questo periodo?",
    "Что сейчас происходит с ценами на бензин?",
    "週末に行ける美術展、今どんなのやってる？",
    "最近有什么新出的好玩的游戏？",
    "Welke films draaien er deze week in de bioscoop?",
    "Jakie są najnowsze informacje o korkach na A4?",
    "Quais são as notícias de hoje sobre a economia?",
    "Was the bridge in Baltimore rebuilt yet?",
    # Swedish, Danish, Norwegian: languages the embedding model was not trained on.
    "Sök på nätet efter recensioner av nya Volvo EX30",
    "Vad är de senaste nyheterna om regeringen?",
    "Vem vann Melodifestivalen i år?",
    "När öppnar Systembolaget på lördag?",
    "Vad kostar en biljett till Liseberg just nu?",
    "Kan du kolla om pendeltågen går som vanligt i dag?",
    "Hur gick det för Malmö FF i går?",
    "Søg efter de nyeste nyheder om valget",
    "Hvem vandt Superligaen sidste sæson?",
    "Søk på nettet etter billige flybilletter til Roma",
    "Hva er siste nytt om streiken?",
    "Hvem vant skiskytingen i helgen?",
    # Greek, Vietnamese, Czech, Scandinavian, Turkish, Korean, Arabic: the words for
    # news, search, price, results and opening hours.
    "Βρες μου τις σημερινές ειδήσεις για την οικονομία",
    "Ψάξε στο ίντερνετ κριτικές για το νέο iPhone",
    "Ποιος κέρδισε χθες τον αγώνα του Ολυμπιακού;",
    "Μέχρι τι ώρα είναι ανοιχτό το σούπερ μάρκετ σήμερα;",
    "Ποια είναι τα τελευταία νέα για την κυβέρνηση;",
    "Ποια είναι η τελευταία έκδοση των Windows;",
    "Tin tức hôm nay có gì mới?",
    "Tra cứu giúp tôi giá xăng hiện nay",
    "Tìm trên mạng đánh giá về chiếc điện thoại này",
    "Ai đã thắng trận chung kết tối qua?",
    "Siêu thị gần đây mở cửa đến mấy giờ?",
    "Phiên bản mới nhất của iOS là gì?",
    "Najdi mi aktuální zprávy o volbách",
    "Kdo včera vyhrál zápas Sparty?",
    "Kdy má otevřeno pošta v sobotu?",
    "Hvornår åbner Føtex på søndag?",
    "Hvad er den nyeste version af Windows?",
    "Bugün borsada neler oldu?",
    "İnternetten bu telefonun fiyatını araştır",
    "Eczane bu akşam kaçta kapanıyor?",
    "Son çıkan Android sürümü hangisi?",
    "최근 뉴스 좀 찾아줘",
    "어제 축구 경기 누가 이겼어?",
    "마트 몇 시까지 해?",
    "ابحث في الإنترنت عن آخر أخبار الاقتصاد",
    "من فاز في مباراة الأمس؟",
    "متى تغلق الصيدلية الليلة؟",
)
# Near misses that need no tool (skills.registry).
COUNTER_EXAMPLES = (
    "What is the capital of Canada?",
    "Explain how a search engine works",
    "Erzähl mir was über die Römer",
    "Qui a écrit Les Misérables ?",
    "Как работает интернет?",
    "Explain how stock markets work",
    "Write a short news article about a fictional election",
    "What is a football offside rule?",
    "Erklär mir, wie eine Suchmaschine Seiten bewertet",
    "Qu'est-ce qu'une bourse ?",
    "¿Cómo funciona una elección presidencial?",
    "Spiegami come funziona il campionato di calcio",
    "Объясни, как работает биржа",
    "株式投資の基本を教えて",
    "Explique como funciona a bolsa de valores",
    "Hoe werkt een zoekmachine?",
    "解释一下股票是什么",
    "Förklara hur en sökmotor fungerar",
    "Hvem skrev Peer Gynt?",
)
# Current information as a class, in any language: a thing that changes from day to day
# (a price, a rate, opening hours, a match's result, delays and strikes, the news, who
# holds an office) asked about with a word for now, today or yesterday in one sentence
# ("Πόσο έχει η βενζίνη σήμερα;", "Jaký je dnes kurz eura?", "आज सोने का भाव कितना है?").
# Either word alone is no search: "the price of happiness", "what day is it today".
_CHANGING = (
    r"\b(?:prices?|costs?|costing|exchange rate|stock price|opening hours|open|score"
    r"|delay(?:s|ed)?"
    r"|strikes?|kostet|preis\w*|kurs\w*|geöffnet|öffnungszeiten|ergebnis\w*|verspätung\w*"
    r"|streik\w*|prix|coûte|cours|ouverte?s?|fermée?s?|résultats?|retards?|grève\w*|precios?"
    r"|cuesta|abiert[oa]s?|cerrad[oa]s?|resultados?|retrasos?|huelga\w*|prezz[oi]|costa"
    r"|apert[oia]|chius[oia]|risultat[oi]|ritard[oi]|sciopero|preços?|custa|cotação|abert[oa]s?"
    r"|fechad[oa]s?|atrasos?|greve|kost|prijs\w*|koers|geopend|gesloten|uitslag|vertraging\w*"
    r"|staking|kosztuje|cen[aęy]|otwart\w*|zamknięt\w*|wynik\w*|opóźni\w*|strajk\w*|стоит"
    r"|цен[аыу]|курс\w*|открыт\w*|закрыт\w*|результат\w*|задерж\w*|забастовк\w*"
    r"|τιμ(?:ή|ές|ών)|κοστίζει|ισοτιμία|ανοιχτ\w*|κλειστ\w*|ανοίγει|κλείνει|αποτέλεσμα\w*"
    r"|σκορ|αγώνα\w*|ματς|καθυστερήσ\w*|απεργί\w*|νεότερα|πρωθυπουργός|υπουργός|πρόεδρος"
    r"|koster|kostar|kurs(?:en)?|renten?|åben|åbent|åpen|åpent|öppet|öppen|lukket|stengt|stängt"
    r"|resultat\w*|endte|slutade|kampen|matchen|forsinke\w*|försen\w*|strejke?\w*|streik\w*"
    r"|aflyst|innstilt|inställd\w*|nuværende|nåværende|nuvarande|stojí|cena|ceny|kurz"
    r"|otevřen\w*|otevírá|zavřen\w*|zavírá|dopadl\w*|výsledek|skóre|zápas\w*|zpožd\w*"
    r"|stávk\w*|jezdí|ministr\w*|premiér\w*|prezident\w*|maksaa|hinta|hinnat|kurssi|auki"
    r"|aukeaa|suljettu|päättyi|tulos|ottelu|myöhässä|lakko|kulkevat|pääministeri|ministeri"
    r"|fiyat\w*|ne kadar|kur(?:u|lar)?|açık|kapalı|sonuç\w*|maç\w*|rötar\w*|grev\w*|iptal"
    r"|altın|giá|tỷ giá|tỉ giá|mở cửa|đóng cửa|tỉ số|tỷ số|kết quả|trận|hoãn|đình công"
    r"|thủ tướng|tổng thống|bộ trưởng|ra mắt|harga|buka|tutup|skor|ár|árfolyam|nyitva"
    r"|preț|curs|deschis|închis|ціна|курс|відкрит\w*|зачинен\w*|euro|dollars?|dolar|đô la"
    r"|ευρώ|δολάρι\w*|bitcoin|gold|guld|zlato|kulta|χρυσ\w*|πόσο (?:έχει|πάει|κοστίζει))\b"
    r"|भाव|दाम|कीमत|रेट|खुल[ेाी]|बंद है|नतीजा|नतीजे|स्कोर|मैच|चल रह[ीाे]|देरी|हड़ताल|आगे चल"
    r"|लॉन्च|रिलीज़|प्रधानमंत्री|मंत्री|सोने|डॉलर|रुपये|रुपए|값|가격|얼마|시세|환율|코스피|주가|열어|결과|경기"
    r"|지연|파업|سعر|أسعار|مفتوح|مغلق|نتيجة|مباراة|تأخير|إضراب|値段|価格|いくら|相場|株価|日経"
    r"|レート|営業|試合|遅延|价格|多少钱|汇率|股价|开门|营业|比赛|延误|罢工"
)
# Days of the week: "is the pharmacy open on Sunday?", "otwarta w niedzielę".
_WEEKDAYS = (
    r"(?:mon|tues|wednes|thurs|fri|satur|sun)days?|montags?|dienstags?|mittwochs?|donnerstags?"
    r"|freitags?|samstag\w*|sonntag\w*|lundi|mardi|mercredi|jeudi|vendredi|samedi|dimanche"
    r"|lunes|martes|miércoles|jueves|viernes|sábado|domingo|lunedì|martedì|mercoledì|giovedì"
    r"|venerdì|sabato|domenica|segunda|terça|quarta|quinta|sexta|maandag|dinsdag|woensdag"
    r"|donderdag|vrijdag|zaterdag|zondag|poniedział\w*|wtor\w*|środ\w*|czwart\w*|piąt\w*"
    r"|sobot\w*|niedziel\w*|понедельник|вторник|сред[ау]|четверг|пятниц[ау]|суббот[ау]"
    r"|воскресенье|Δευτέρα|Τρίτη|Τετάρτη|Πέμπτη|Παρασκευή|Σάββατο|Κυριακή|mandag|tirsdag"
    r"|onsdag|torsdag|fredag|lørdag|søndag|måndag|lördag|söndag|pondělí|úterý|středu|čtvrtek"
    r"|pátek|sobotu|neděli|maanantai\w*|tiistai\w*|keskiviikko\w*|torstai\w*|perjantai\w*"
    r"|lauantai\w*|sunnuntai\w*|pazartesi|salı|çarşamba|perşembe|cuma|cumartesi|pazar"
    r"|thứ (?:hai|ba|tư|năm|sáu|bảy)|chủ nhật"
)
_NOW_WORDS = (
    rf"\b(?:now|right now|at the moment|currently|today|tonight|yesterday|last night|these days"
    r"|this (?:week|weekend|season)|jetzt|gerade|momentan|aktuell|derzeit|heute|gestern"
    r"|maintenant|en ce moment|actuellement|aujourd'hui|ce soir|hier|ahora|actualmente|hoy"
    r"|esta noche|anoche|ayer|adesso|attualmente|oggi|stasera|ieri|agora|atualmente|hoje"
    r"|ontem|momenteel|vandaag|vanavond|gisteren|teraz|obecnie|aktualnie|dziś|dzisiaj|wczoraj"
    r"|сейчас|сегодня|вчера|τώρα|σήμερα|χθες|χθεσιν\w*|σημεριν\w*|αυτή τη στιγμή|απόψε|φέτος"
    r"|nu|lige nu|just nu|nå|akkurat nå|i dag|idag|i aften|i kveld|i kväll|ikväll|i går|igår"
    r"|i \w+s|for tiden|för närvarande|i øjeblikket|teď|ted|nyní|dnes|dneska|včera|včerejší\w*"
    r"|aktuálně|momentálně|nyt|tänään|eilen|tällä hetkellä|nykyään|şimdi|şu an|bugün|dün|dünkü"
    r"|bây giờ|hiện nay|hiện tại|hôm nay|tối qua|hôm qua|dạo này|sekarang|hari ini|kemarin"
    rf"|saat ini|most|ma|tegnap|jelenleg|acum|azi|astăzi|ieri|зараз|сьогодні|вчора|{_WEEKDAYS})\b"
    r"|अभी|आज|कल|इस वक्त|इन दिनों|फिलहाल|지금|오늘|어제|요즘|현재|الآن|اليوم|أمس|حاليا"
    r"|今日|現在|昨日|昨夜|最近|现在|今天|昨天|昨晚|目前|עכשיו|היום|אתמול"
)
TRIGGERS = (
    rf"(?:{_CHANGING})[^.?!\n\d]{{0,50}}?(?:{_NOW_WORDS})"
    rf"|(?:{_NOW_WORDS})[^.?!\n\d]{{0,50}}?(?:{_CHANGING})",
    # Who holds an office or a title now ("Hvem er den nuværende udenrigsminister?").
    r"\b(?:who|wer|qui|quién|chi|quem|wie|kto|кто|ποιος|ποια|hvem|vem|kdo|kuka|kim|ai)\b"
    r"[^.?!\n]{0,40}\b(?:current|aktuelle?r?|actuel\w*|actual|attuale|atual|huidige|obecn\w*"
    r"|aktualn\w*|нынешн\w*|σημεριν\w*|τωριν\w*|nuværende|nåværende|nuvarande|aktuální"
    r"|současn\w*|nykyi\w*|şu anki|hiện nay|hiện tại|đang là)\b|कौन[^।?]{0,40}(?:वर्तमान|मौजूदा)"
    r"|(?:वर्तमान|मौजूदा)[^।?]{0,40}कौन",
    # What is new about something, and when a thing comes out.
    r"\b(?:νεότερα|τι νέα|τι καινούργιο|co je nového|có gì mới|hvad er nyt|vad är nytt)\b"
    r"|\b(?:when|wann|quand|cuándo|quando|wanneer|kiedy|когда|πότε|hvornår|når|när|kdy"
    r"|milloin|ne zaman|khi nào|bao giờ)\b[^.?!\n]{0,40}\b(?:come out|coming out|released?"
    r"|launch\w*|erscheint|sort\w*|sale|esce|estreia|uitkomt|wychodzi|выходит|βγαίνει|kommer ud"
    r"|kommer ut|vychází|ilmestyy|çıkıyor|ra mắt|phát hành)\b|कब (?:लॉन्च|रिलीज़|आएगा|आएगी)"
    r"|(?:언제|いつ|什么时候)[^\u3002\uff1f?]{0,20}(?:출시|개봉|発売|公開|上映|上市|发布)",
    r"\bsearch (?:the )?(?:web|internet|online)\b|\bweb search\b|\bsearch for\b|\blook up\b"
    r"|\blook (?:it|this|that) up\b|\bgoogle\b|\b(?:latest|recent|breaking|current) news\b"
    r"|\bnews (?:about|on)\b|\bfind (?:me )?(?:recent|the latest|current|up-to-date)\b"
    r"|\b(?:latest|recent|current) (?:reviews|results|prices?|updates?)\b"
    r"|\bwhat happened (?:today|yesterday|this week)\b|\bwho won\b|\bonline\b",
    r"\bsuche? (?:im|online|nach)\b|\bim (?:internet|netz)\b|\brecherchier\w*|\bgoogle\w*"
    r"|\b(?:neueste|aktuelle|letzte)n? (?:nachrichten|meldungen|news)\b"
    r"|\bnachrichten (?:über|zu)\b|\bwas gibt es neues\b",
    r"\bcherche\w* (?:sur|en ligne|dans)\b|\brecherche\w* (?:sur|en ligne)\b"
    r"|\bsur (?:internet|le web|google)\b|\bdernières (?:actualités|nouvelles|infos)\b"
    r"|\bactualités\b|\bavis récents\b|\ben ligne\b",
    r"\bbusca\w* en (?:internet|google|la web|línea)\b|\bbúscalo\b|\ben (?:internet|la web)\b"
    r"|\búltimas noticias\b|\bnoticias (?:de hoy|recientes|sobre)\b|\binformación actualizada\b",
    r"\bcerca\w* (?:su|online|in rete)\b|\bsu internet\b|\bsul web\b|\bultime notizie\b"
    r"|\bnotizie (?:su|di oggi|sul|sulla)\b|\bricerca (?:sul web|online)\b|\brecensioni\b",
    r"\bpesquis\w* (?:na|no|em)\b|\bprocur\w* na (?:internet|web)\b|\bna (?:internet|web)\b"
    r"|\bnotícias (?:recentes|sobre|de hoje)\b|\búltimas notícias\b",
    r"\bzoek\w* (?:op internet|online|op het web)\b|\bop internet\b|\blaatste nieuws\b"
    r"|\bnieuws over\b|\b(?:wyszukaj|poszukaj|znajdź|sprawdź) w (?:internecie|sieci)\b"
    r"|\bw internecie\b|\bnajnowsze wiadomości\b",
    r"\bнайди в интернете\b|\bпоищи\b|\bв интернете\b|\b(?:последние|свежие) новости\b"
    r"|\bсвежие отзывы\b|\bновости (?:о|об|про)\b|\bзагугли\b|\binternette ara\b"
    r"|\bson haberler\b",
    r"\bsök (?:på|efter|i)\b|\bpå nätet\b|\b(?:de )?senaste nyheterna\b|\bnyheter om\b|\bvem vann\b"
    r"|\bsøg (?:på|efter)\b|\bsøk (?:på|etter)\b|\bpå nettet\b|\bseneste nyheder\b|\bsiste nytt\b"
    r"|\bnyheder om\b|\bhvem (?:vandt|vant)\b",
    r"\bв інтернеті\b|\bостанні новини\b|\bпошукай\b|\bna internetu\b|\bvyhledej\b"
    r"|\bnejnovější zprávy\b|\bna internete\b|\bhae (?:netistä|internetistä)\b|\bnetistä\b"
    r"|\b(?:tuoreimmat|uusimmat|viimeisimmät) uutiset\b",
    r"検索|調べて|ネットで|最新のニュース|最新ニュース|ググ|搜索|上网查|网上查|查一下|最新(?:的)?新闻|新闻"
    r"|검색|찾아봐|최신 뉴스",
    # Greek, Hindi, Vietnamese, Czech, Finnish, Scandinavian, Turkish, Korean, Arabic.
    r"\bειδήσεις\b|\bτα (?:τελευταία|πιο πρόσφατα) νέα\b|\bψάξε\b|\bαναζήτησε\b"
    r"|\bστο (?:ίντερνετ|διαδίκτυο)\b|\b(?:πιο πρόσφατη|τελευταία) έκδοση\b"
    r"|\bτι ώρα (?:ανοίγει|κλείνει)\b|\bποιος κέρδισε\b|\bπόσο (?:κάνει|κοστίζει) (?:τώρα"
    r"|σήμερα)\b",
    r"खबर|समाचार|न्यूज़|ऑनलाइन|इंटरनेट पर|खोजो|सर्च करो|(?:अभी|आज) (?:की |का )?(?:कीमत|दाम"
    r"|भाव)|(?:कीमत|दाम|भाव) क्या है|नतीजा|रिव्यू|लेटेस्ट|ताज़ा|किसने जीता|कौन जीता",
    r"\btin tức\b|\btra cứu\b|\btrên mạng\b|\bgiá (?:vàng|xăng|\w+ hôm nay)\b|\bkết quả trận\b"
    r"|\bai (?:đã )?thắng\b|\bmới nhất\b|\bmở cửa đến\b|\bđóng cửa lúc\b|\btỷ giá\b",
    r"\bzprávy\b|\bzpráv\b|\botevírací doba\b|\bmá otevřeno\b|\bnejnovější\b|\bkolik (?:teď"
    r"|dnes|nyní) stojí\b|\bkdo (?:včera )?vyhrál\b|\bvyhledej\b|\buutis\w*|\bauki\b"
    r"|\baukeaa\b|\bkuka voitti\b|\buusin\b|\bhinta (?:on )?tänään\b",
    r"\bhvornår (?:lukker|åbner)\b|\bresultatet af\b|\bvilka tider har\b|\böppettider\b"
    r"|\bnär (?:öppnar|stänger)\b|\bhaber\w*|\bdöviz\b|\bdolar kuru\b|\bkaç kaç\b"
    r"|\binternette\b|\bfiyatı (?:ne kadar|nedir)\b|\bkaçta (?:açılıyor|kapanıyor)\b"
    r"|\bson (?:sürüm|çıkan)\b",
    r"뉴스|가격|경기 결과|누가 이겼|영업시간|몇 시까지",
    r"أخبار|ابحث|سعر|نتيجة مباراة|من فاز|متى (?:يفتح|تفتح|يغلق|تغلق)|آخر إصدار|أحدث",
)


register_tool(
    name="web_search",
    description="Search the web for current information; returns titles, URLs and excerpts.",
    category="web",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to search for."},
            "max_results": {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": 10,
                "description": "How many results to return (1-10); null means 5.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    execute=execute,
    examples=EXAMPLES,
    counter_examples=COUNTER_EXAMPLES,
    triggers=TRIGGERS,
    required_secrets=(API_KEY_SECRET,),
)
