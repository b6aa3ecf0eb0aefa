# ruff: noqa: RUF001 (patterns in many scripts: their look-alike letters are meant; long alternations)
"""``memory_save``: remember a fact about the user for later conversations
(``memories.services.amemory_upsert``: a near-duplicate, cosine similarity > 0.90, is
updated instead of stored twice). It writes, so it is registered as not idempotent."""

from __future__ import annotations

from typing import Any

from memories import services
from memories.models import Memory
from memories.selectors import memory_instance_for_user
from memories.vectors import VectorError
from openmates import llm, vault
from openmates.db import db_call
from skills.registry import ToolContext, register_tool


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Save ``content`` (category ``general`` unless given); returns ``{"id", "status"}``
    with status ``saved`` or ``updated`` (it replaced a near-duplicate)."""
    instance = await db_call(
        memory_instance_for_user, instance_id=context.instance_id, user_id=context.user_id
    )
    if instance is None or context.user_id is None:
        return {"success": False, "error": "memory is turned off for this user"}
    try:
        written = await services.amemory_upsert(
            instance=instance,
            user_id=context.user_id,
            category=params.get("category") or Memory.Category.GENERAL,
            content=str(params.get("content") or ""),
            source_chat_id=context.chat_id or "",
        )
    except services.MemoryInputError as exc:
        return {"success": False, "error": str(exc)}
    except VectorError as exc:
        return {
            "success": False,
            "error": f"the embedding model answered an unusable vector: {exc}",
        }
    except llm.LLMError:
        return {"success": False, "error": "the embedding model is unavailable"}
    except vault.VaultError:
        return {"success": False, "error": "memories cannot be saved right now"}
    status = "saved" if written.created else "updated"
    return {"success": True, "result": {"id": str(written.memory.pk), "status": status}}


# Preselection (docs/architecture.md §6): requests in several languages, and the
# imperatives that ask to keep a fact ("remember that I…", "merk dir", "retiens que").
# "Remember when…" nostalgia and "remember to…" reminders ask for nothing to be kept.
EXAMPLES = (
    "Remember that I live in Leeds.",
    "Please save this to your memory: I'm a night-shift nurse.",
    "Merk dir, dass ich zwei Kinder habe.",
    "Retiens que mon anniversaire est le 2 mars.",
    "Recuerda que no como carne.",
    "Ricordati che sono mancino.",
    "Lembre-se de que eu trabalho em casa.",
    "Запомни: мой сын учится в пятом классе.",
    "私は辛い料理が苦手だと覚えておいて。",
    "记住我女儿叫小美。",
    "Please remember that my birthday is on 4 May",
    "Note that I'm vegetarian",
    "Keep in mind that I don't like long answers",
    "For the future: I work as a teacher",
    "Merk dir bitte, dass ich allergisch gegen Nüsse bin",
    "Speichere: meine Frau heißt Lena",
    "Souviens-toi que je suis végétarien",
    "Note que je préfère les réponses courtes",
    "Guarda que mi hijo se llama Pablo",
    "Ricorda che sono allergico alle arachidi",
    "Запомни, что я живу в Казани",
    "Сохрани: у меня аллергия на кошек",
    "私の誕生日は5月4日だと覚えておいて",
    "Anote que eu sou alérgico a camarão",
    "Onthoud dat ik vegetariër ben",
    "Zapamiętaj, że mam dwa psy",
    "请记住我对花生过敏",
    "Jot this down: my gym locker is number 212",
    "Note down that my landlord is called Mr Patel",
    "Notier dir, dass mein Zug um 7:40 fährt",
    "Mémorise que mon code de porte est 1234",
    "Apunta que mi vuelo sale el jueves",
    "Anota que mi sobrino cumple años en abril",
    "Segnati che il mio medico si chiama Rossi",
    "Tieni a mente che non bevo alcolici",
    "Запиши, что у сына тренировка по вторникам",
    "Запомни, пожалуйста: мой размер обуви 43",
    "私の車のナンバーは1234だとメモしておいて",
    "帮我记下来：我的车位是B12",
    "Guarde aí: meu CPF termina em 45",
    "By the way, my daughter's name is Mia, keep that in mind",
    "FYI I'm lactose intolerant, please remember it",
    "Übrigens, ich bin Linkshänder, merk dir das",
    "Au fait, je suis allergique au pollen, retiens-le",
    "Por cierto, soy vegano, tenlo en cuenta",
    "A proposito, sono celiaco, ricordatelo",
    "Кстати, я не ем мясо, запомни это",
    "ちなみに私はベジタリアンです。覚えておいてね",
    "Can you keep in mind that my sister is allergic to shellfish?",
    "Store this for later: my car is a blue Golf, plate ends in 42",
    "Make a note that my passport expires in June",
    "Save that my dentist is Dr. Okafor on Mill Road",
    "Kannst du dir notieren, dass mein Sohn freitags Schwimmen hat?",
    "Behalte bitte im Kopf, dass ich kein Gluten vertrage",
    "Tu peux garder en tête que ma fille fait du judo le mercredi ?",
    "Enregistre que mon vol pour Lisbonne part le 3 juin",
    "¿Puedes guardar que mi pasaporte caduca en junio?",
    "Toma nota de que mi hija tiene natación los martes",
    "Puoi tenere a mente che mio figlio ha calcio il giovedì?",
    "Salva che la mia targa è AB123CD",
    "Можешь запомнить, что у дочки танцы по средам?",
    "Сохрани, что мой паспорт действует до июня",
    "息子は水曜日にサッカーがあるって覚えておいてくれる？",
    "パスポートの期限は6月だとメモしておいて",
    "Pode guardar que meu passaporte vence em junho?",
    "Onthoud even dat mijn dochter woensdag zwemles heeft",
    "Zanotuj, że mój paszport wygasa w czerwcu",
    "帮我记住我儿子每周三有足球课",
    "내 여권이 6월에 만료된다고 기억해 줘",
    "Pasaportumun haziranda dolduğunu not et",
    "Just so you know, I'm training for a marathon in October - keep that on file",
    "For your records: my employee number is 55120",
    "Nur damit du es weißt: ich arbeite nachts, behalt das im Hinterkopf",
    "Pour que tu le saches, je suis daltonien, garde-le en mémoire",
    "Que lo sepas: trabajo de noche, tenlo presente",
    "Solo perché tu lo sappia: lavoro di notte, tienilo a mente",
    "Чтобы ты знал: я работаю по ночам, учти это",
    "念のため言っておくと、夜勤で働いています。覚えておいて",
    "for future chats: I'm vegetarian and I hate mushrooms",
    "note for later, my gym days are Monday and Thursday",
    "Please remember my partner's name is Sam",
    "Merk dir bitte: meine Tochter heißt Lena und ist 6",
    "Zur Info für später: ich bin Diabetiker",
    "Retiens bien : mon fils s'appelle Hugo",
    "Garde en mémoire que je ne mange pas de porc",
    "Acuérdate de que mi cumpleaños es el 3 de mayo",
    "Guarda esto: trabajo en un hospital",
    "Ricordati che sono vegano",
    "Memorizza che il mio compleanno è il 9 luglio",
    "Запомни: у меня аллергия на орехи",
    "Имей в виду на будущее, что я левша",
    "覚えておいて、私は卵アレルギーです",
    "これから使うから覚えて：私の職場は渋谷です",
    "记住我是素食者",
    "以后记得我对花生过敏",
    "Zapamiętaj, że mam na imię Ola",
    "Lembre que eu sou alérgico a camarão",
    "내가 채식주의자라는 거 기억해 줘",
    "Unutma, fıstık alerjim var",
    "Keep this in your memory: my WiFi password at home is bluefish42",
    "Save to memory that I'm allergic to penicillin",
    "Bitte speichere, dass ich vegetarisch esse",
    "Enregistre dans ta mémoire que je suis végétarien",
    "Guarda en tu memoria que no como gluten",
    # Swedish, Danish, Norwegian: languages the embedding model was not trained on.
    "Kom ihåg att jag inte äter fläskkött",
    "Kan du komma ihåg att min sambo heter Erik?",
    "Spara det här: jag är allergisk mot jordnötter",
    "Glöm inte att jag har möte varje måndag klockan nio",
    "Notera att jag föredrar korta svar",
    "Bara så du vet, jag har flyttat till Umeå, tänk på det framöver",
    "Husk at jeg er vegetar",
    "Gem, at min datter hedder Freja",
    "Husk at jeg jobber som sykepleier",
    "Ikke glem at jeg har to katter",
    # A name to use, a correction or an update of what was said: a save without 'remember'.
    "From now on, call me Alex",
    "Update my info: I've moved to Glasgow",
    "Correction: my son is 9, not 8, please update that",
    "Ab jetzt nenn mich bitte Jo, das soll so bleiben",
    "Aktualisier das: ich wohne jetzt in Bremen",
    "Désormais, appelle-moi Manu",
    "Mets à jour : j'ai changé de travail, je suis infirmière maintenant",
    "De ahora en adelante llámame Lola",
    "Actualiza mis datos: ahora vivo en Valencia",
    "Que no se te olvide: soy alérgica a la penicilina",
    "D'ora in poi chiamami Beppe",
    "Aggiorna: ho traslocato, ora abito a Bologna",
    "С этого момента называй меня Саша",
    "Обнови: я переехал в Новосибирск",
    "A partir de agora, me chame de Zé",
    "Atualiza aí: agora moro no Porto",
    "Não esquece: sou diabético",
    "これからはタロウって呼んで",
    "引っ越したので更新して：今は大阪に住んでる",
    "以后叫我小王就行",
    "更新一下：我现在在上海工作",
    "Od teraz mów do mnie Kuba",
    "Vanaf nu noem je me Joost",
    "앞으로는 나를 민수라고 불러 줘",
    "Bundan sonra bana Ali de",
)
# Near misses that need no tool (skills.registry).
COUNTER_EXAMPLES = (
    "I always forget where I put my keys",
    "Remember to drink water, my doctor says",
    "What's a good trick to remember names?",
    "Erinnere mich an nichts, ich will nur plaudern",
    "Je ne me souviens plus de son nom",
    "No recuerdo la letra de esa canción",
    "Я никак не могу запомнить английские слова",
    "覚えるのが苦手です、コツはある？",
    "How do I save a file in Word?",
    "Remind me what photosynthesis is",
    "Wie speichere ich ein Dokument als PDF?",
    "Comment enregistrer une vidéo sur mon téléphone ?",
    "¿Cómo guardo una contraseña de forma segura?",
    "Come si salva un file in Excel?",
    "Как сохранить фото с сайта?",
    "ファイルの保存方法を教えて",
    "Hoe sla ik een bestand op als pdf?",
    "怎么把网页保存成PDF？",
    "Hur sparar jag ett dokument som PDF?",
    "Hvordan husker jeg bedre til eksamen?",
    "I just got back from Spain, it was amazing",
    "Ich habe heute endlich meinen Führerschein bestanden!",
    "J'ai enfin fini mon mémoire, je suis soulagée",
    "Mi hijo empieza el colegio mañana y estoy nerviosa",
    "Я сегодня сдал экзамен, ура!",
    "How do I update my address on my bank's app?",
)
TRIGGERS = (
    # Not "I remember my grandmother's kitchen": a memory told, not one to keep.
    r"(?<!\byou )(?<!\bstill )(?<!\bi )(?<!\bwe )(?<!\bthey )"
    r"\b(?:please\s+)?remember[,:]?\s+(?:that\s+)?"
    r"(?:i\b|i'm\b|i've\b|my\b|mine\b)"
    r"|\b(?:don't|do not|never) forget (?:that|my)\b|\bkeep in mind (?:that|my)\b"
    r"|\b(?:save|store|put|add|keep|note)\b[^.?!]{0,20}\b(?:to|in|into) (?:your |the )?memory\b"
    r"|\bmake a note that\b|\bnote (?:down )?that (?:i|my)\b",
    r"\bmerke? dir\b|\bvergiss nicht,? dass\b|\bbehalte? im (?:kopf|hinterkopf)\b"
    r"|\bspeicher(?:e|n)? (?:dir )?,? ?dass\b|\bnotier(?:e)? dir\b",
    r"\bretiens (?:que|bien)\b|\bsouviens-toi que\b|\bn'oublie pas que\b|\bmémorise\b"
    r"|\bgarde en (?:tête|mémoire) que\b|\bnote que (?:je|j'|mon|ma|mes)\b",
    r"\brecuerda que\b|\bno olvides que\b|\bmemoriza\b|\bten en cuenta que\b"
    r"|\bapunta que\b|\bguarda en (?:tu )?memoria\b",
    r"\bricorda(?:ti)? che\b|\bnon dimenticare che\b|\bmemorizza\b|\btieni a mente che\b",
    r"\blembr(?:e|a)(?:-se)? (?:de )?que\b|\bnão (?:se )?esqueça (?:de )?que\b|\bmemorize\b",
    r"\bonthoud (?:dat|dit|goed)\b|\bzapamiętaj\b|\bnie zapomnij,? że\b",
    r"\bзапомни\b|\bне забудь,? что\b|\bимей в виду,? что\b",
    r"覚えておいて|覚えといて|覚えておいてください|記憶しておいて|记住|記住|记下来|記下來",
    # "Can you keep in mind that …", "Kannst du dir merken, dass …", "Apúntate que …".
    r"\b(?:can|could|would) you (?:please )?(?:remember|keep in mind|note|save|store) (?:that|my)\b"
    r"|\bdir (?:bitte |mal )?(?:merken|notieren|aufschreiben)\b"
    r"|\b(?:peux|pourrais)-tu (?:retenir|noter|garder en tête|enregistrer) que\b"
    r"|\bap[uú]ntate\b|\btoma nota de que\b|\bsegna(?:ti)? che\b|\btieni presente che\b"
    r"|\bзапиши,? что\b|\bсохрани,? что\b|\bnoteer dat\b|\bzanotuj\b"
    r"|\bkom ihåg,? att\b|\bglöm inte,? att\b|\bspara,? att\b|\bnotera,? att\b"
    r"|\bhusk(?: venligst| lige| nu)?,? at\b|\bdu (?:es |das )?dir merkst\b"
    r"|\b(?:glem|gløm) ikke,? at\b|\bikke (?:glem|gløm),? at\b|\bgem,? at\b"
    r"|\bзапам[\'\u2019\u02bc]?ятай\b|\bzapamatuj si\b|\bnezapomeň,? že\b|\bpamätaj si\b"
    r"|\bmuista,? että\b|\bälä unohda,? että\b"
    r"|メモしておいて|帮我记|기억해 ?줘|\bnot et\b|\baklında tut\b",
    # A fact, then the order to keep it ("my wife's name is Ines, note it", "Meine Katze
    # heißt Mimi, speicher das ab", "Mi perro se llama Toby, apúntalo"); or a label that
    # says the fact is for later ("For future reference: …", "Für die Zukunft: …").
    r"[,;:.!-]\s*(?:please\s+)?(?:note|save|store|remember|memori[sz]e|log|record) (?:it|this|that)"
    r"(?:\s+(?:down|for (?:later|next time|the future)|please))?\s*[.!]?\s*$"
    r"|\bfor (?:future reference|the future|later|your records)\s*[:,-]|\bheads up for later\b"
    r"|\bon (?:record|file)\s*:|\bdon't forget\s*[:,-]\s*(?:i\b|i'm\b|my\b)"
    r"|\bspeicher(?:e|n)? (?:das|dies|es)\b|\bfür die zukunft\s*:|\bfür später\s*:"
    r"|\bvergiss (?:bitte )?nicht\s*[:,-]\s*(?:ich|mein\w*)\b"
    r"|\b(?:note|retiens|mémorise|garde|enregistre)-le\b|\bpour (?:la suite|l'avenir|plus tard)\s*:"
    r"|\b(?:ap[uú]nta|an[oó]ta|gu[aá]rda|recu[eé]rda|mem[oó]riza)lo\b|\bno te olvides de que\b"
    r"|\bpara (?:futuras consultas|el futuro|más adelante|referência futura|o futuro)\s*:"
    r"|\bprendine nota\b|\b(?:ricorda|segna|memorizza)telo\b|\bnon (?:ti )?scordar(?:e|ti) che\b"
    r"|\bnon dimenticarti che\b|\bper il futuro\s*:|\bnão te esqueças (?:de )?que\b"
    r"|\b(?:anota|guarda)(?:-o| isso| isto)\b|\bvergeet niet dat (?:ik|mijn)\b|\bvoor later\s*:"
    r"|\bне забывай,? что\b|\bна будущее\s*:|\bзапиши (?:это|себе)\b|\bучти,? что\b"
    r"|\bне забудь,? що\b|\bзапиши,? що\b|\bна майбутнє\s*:"
    r"|\bpamiętaj,? że\b|\bna przyszłość\s*:|\bnie zapominaj,? że\b"
    r"|\bpamatuj si\b|\bdo budoucna\s*:|\bpoznamenej si\b"
    r"|\btänk på att (?:jag|min|mitt|mina)\b|\bpidä mielessä\b|\bota muistiin\b"
    r"|\bunutma[,:]|\bnot al\b|\bθυμήσου (?:ότι|πως)|\bμην ξεχάσεις (?:ότι|πως)"
    r"|\bσημείωσε (?:ότι|πως)|\bingat(?:lah)? (?:ya|bahwa)\b|\btolong (?:catat|ingat)\b"
    r"|\bcatat (?:bahwa|ya)\b|\bjangan lupa,? (?:aku|saya|bahwa)\b"
    r"|\bnhớ giúp|\bghi nhớ (?:rằng|là)|\bhãy nhớ (?:rằng|là)|\bđừng quên (?:rằng|là)"
    r"|تذك[\u064b-\u0652]*ر[\u064b-\u0652]*\s+أن|لا\s+تنس[\u064b-\u0652]*\s+أن|احفظ\s+(?:أن|هذا|هذه)"
    r"|याद रख(?:ना|ें|ो|िए|ियेगा)|ध्यान रखना,? (?:कि|मेरी|मेरा|मेरे|मैं)|नोट कर (?:लो|लें|लीजिए)"
    r"|(?:תזכור|תזכרי|זכור|זכרי)\s+ש|אל\s+(?:תשכח|תשכחי)\s+ש|(?:תרשום|תרשמי|רשום)\s+ש"
    r"|\bjegyezd meg\b|\bne felejtsd el,? hogy\b|\btartsd észben\b"
    r"|\bține minte\b|\btine minte\b|\bnu uita c[aă]\b|\breține c[aă]\b|\bmemorează\b"
    r"|忘れないで[、,，：:]|(?:别忘了|别忘记|不要忘记)我|以后(?:请|要)?记得"
    r"|기억해 ?둬|잊지 ?마[,，]",
)


register_tool(
    name="memory_save",
    description=(
        "Remember one fact about the user for later conversations, when they tell you "
        "something lasting (a preference, a fact about them, an event, a relationship, a "
        "decision) or ask you to remember it. One short, self-contained sentence."
    ),
    category="memory",
    parameters={
        "type": "object",
        "properties": {
            "content": {
                "type": "string",
                "minLength": 1,
                "maxLength": services.MAX_CONTENT_CHARS,
                "description": "The fact, as one self-contained sentence in the user's language.",
            },
            "category": {
                "type": ["string", "null"],
                "enum": [*Memory.Category.values, None],
                "description": "What kind of fact it is; null means general.",
            },
        },
        "required": ["content"],
        "additionalProperties": False,
    },
    execute=execute,
    idempotent=False,
    examples=EXAMPLES,
    counter_examples=COUNTER_EXAMPLES,
    triggers=TRIGGERS,
)
