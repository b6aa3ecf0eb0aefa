# ruff: noqa: RUF001, E501 (patterns in many scripts: their look-alike letters are meant; long alternations)
"""``memory_search``: hybrid search over what the assistant remembers of the user
(``memories.search``: vector and blind-index keyword search fused by reciprocal rank)."""

from __future__ import annotations

from typing import Any

from chats.models import ChatMode
from chats.selectors import chat_mode_for_user
from memories import search
from memories.models import Memory
from memories.selectors import (
    memory_categories_consented,
    memory_consent_for_chat,
    memory_instance_for_user,
)
from memories.vectors import VectorError
from openmates import crypto, llm, vault
from openmates.db import db_call
from skills.registry import ToolContext, register_tool

DEFAULT_LIMIT = 5
MAX_LIMIT = 20


def _categories(chat_id: str | None, user_id: int, category: str | None) -> list[str] | None:
    """The categories the search may read (``None``: all, outside a chat): in a chat, only
    those its consent answers allow, by the rule of the prompt's retrieval
    (``selectors.memory_categories_consented``; the durable answers, which every answer
    reaches before the chat's Redis copy)."""
    wanted = [category] if category else list(Memory.Category.values)
    if chat_id is None:
        return [category] if category else None
    mode = chat_mode_for_user(chat_id=chat_id, user_id=user_id)
    consent = memory_consent_for_chat(chat_id=chat_id, user_id=user_id)
    server_managed = mode == ChatMode.SERVER_MANAGED
    return memory_categories_consented(consent, wanted, server_managed=server_managed)


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Search the user's memories for ``query`` in the categories the chat's memory
    consent allows; returns ``{"query", "memories": [...]}``."""
    query = str(params.get("query") or "").strip()
    if not query:
        return {"success": False, "error": "the query is empty"}
    instance = await db_call(
        memory_instance_for_user, instance_id=context.instance_id, user_id=context.user_id
    )
    if instance is None or context.user_id is None:
        return {"success": False, "error": "memory is turned off for this user"}
    categories = await db_call(
        _categories, context.chat_id, context.user_id, params.get("category") or None
    )
    if categories == []:
        return {"success": True, "result": {"query": query, "memories": []}}
    try:
        hits = await search.ahybrid_search(
            instance=instance,
            user_id=context.user_id,
            query=query,
            limit=params.get("limit") or DEFAULT_LIMIT,
            categories=categories,
        )
    except VectorError as exc:
        return {
            "success": False,
            "error": f"the embedding model answered an unusable vector: {exc}",
        }
    except llm.LLMError:
        return {"success": False, "error": "the embedding model is unavailable"}
    except (vault.VaultError, crypto.DecryptionError):
        return {"success": False, "error": "the memories cannot be read right now"}
    memories = [
        {
            "category": hit.category,
            "content": hit.content,
            "saved": hit.updated_at.date().isoformat(),
        }
        for hit in hits
    ]
    return {"success": True, "result": {"query": query, "memories": memories}}


# Preselection (docs/architecture.md §6): requests in several languages, and the
# questions about what the user said before or what the assistant knows of them.
# "Do you remember when we…" about shared times long ago is small talk, not a search.
EXAMPLES = (
    "What do you know about me?",
    "What did I say my dog was called?",
    "Was weißt du über mich?",
    "Qu'est-ce que je t'ai raconté sur mon travail ?",
    "¿Qué te dije sobre mi dieta?",
    "Cosa ti ho raccontato di mia sorella?",
    "O que eu te disse sobre a minha viagem?",
    "Что я говорил тебе про мою машину?",
    "私の好きな食べ物を覚えていますか？",
    "你记得我喜欢什么颜色吗？",
    "Do you remember what I told you about my job?",
    "What's my wife's name again? I told you before",
    # The user's own facts asked back without "remember" or "told you".
    "Do you know when my dad's birthday is?",
    "Where do I work?",
    "What was my target time for the half marathon?",
    "Did I already mention my new car?",
    "What was the schedule we made for my exam revision?",
    "What allergies did I mention?",
    "Weißt du noch, wie mein Hund heißt?",
    "Was habe ich dir über meine Arbeit erzählt?",
    "Tu te souviens de ce que je t'ai dit sur mes enfants ?",
    "¿Recuerdas dónde te dije que vivo?",
    "Ti ricordi cosa ti ho detto sul mio lavoro?",
    "Ты помнишь, как зовут мою собаку?",
    "私の仕事について何を話したか覚えてる？",
    "Você lembra o que eu disse sobre meu trabalho?",
    "Weet je nog hoe mijn kat heet?",
    "Pamiętasz, jak ma na imię moja córka?",
    "你还记得我住在哪里吗？",
    "Did I ever tell you my blood type?",
    "What was that password I gave you last week?",
    "Which restaurant did I ask you to keep in mind?",
    "Hatte ich dir nicht gesagt, wann mein Termin ist?",
    "Welche Nummer hatte ich dir gegeben?",
    "Je t'avais dit quoi au sujet de mon patron ?",
    "C'était quoi le nom que je t'ai donné hier ?",
    "¿Qué número te había dado para el seguro?",
    "¿Te conté cuándo es mi cita con el médico?",
    "Qual era l'indirizzo che ti avevo dato?",
    "Какой номер я тебе давал в прошлый раз?",
    "Что я просил тебя запомнить про мою маму?",
    "前に教えた私の住所は何だった？",
    "我之前告诉过你我的航班号是多少？",
    "Qual era o número que eu te passei?",
    "I think I mentioned my kids' ages at some point, what were they?",
    "You should know where I work, I told you last month",
    "Ich hatte dir doch meine Kleidergröße gesagt, welche war das?",
    "Je crois que je t'ai donné le nom de mon médecin, c'était qui ?",
    "Creo que te conté a qué me dedico, ¿te acuerdas?",
    "Ti avevo detto il nome del mio capo, come si chiama?",
    "Я же тебе говорил, где работаю, помнишь?",
    "前に言った私の好きな映画、覚えてる？",
    "What was the name of the restaurant I told you about?",
    "Did I tell you when my mother's birthday is?",
    "Remind me what I said my budget was",
    "What's my son's shoe size again, I gave it to you",
    "Erinnerst du dich, was ich dir über meine Allergie gesagt habe?",
    "Wie hieß nochmal der Arzt, den ich dir genannt habe?",
    "Rappelle-moi ce que je t'avais dit sur mon régime",
    "Tu te rappelles la date de mon rendez-vous que je t'ai donnée ?",
    "Recuérdame qué te dije sobre mi presupuesto",
    "¿Cuál era la talla de zapatos de mi hijo que te dije?",
    "Ricordami cosa ti avevo detto sulla mia dieta",
    "Напомни, что я тебе говорил про свой бюджет",
    "前に話した私の予算、覚えてる？",
    "내가 전에 말한 내 생일 기억나?",
    "Me lembra o que eu falei sobre o meu orçamento",
    "Do you still have the Wi-Fi password I shared with you?",
    "What did I tell you my favourite wine was?",
    "Which hotel did I say we booked for the trip?",
    "What's the tracking number I asked you to hold on to?",
    "Have I told you where my parents live?",
    "Weißt du noch, welches Auto ich fahre? Hab ich dir erzählt",
    "Welche Telefonnummer hatte ich dir für den Klempner gegeben?",
    "Tu as encore le code wifi que je t'ai donné ?",
    "Je t'avais parlé de mon allergie, c'était à quoi déjà ?",
    "¿Todavía tienes la contraseña que te pasé?",
    "¿Qué te había contado de mi hermana?",
    "Hai ancora il numero della pratica che ti ho dato?",
    "Cosa ti avevo detto sul mio allenamento?",
    "Ты ещё помнишь пароль от вайфая, который я тебе давал?",
    "Какой отель я тебе говорил, что мы забронировали?",
    "前に伝えたWi-Fiのパスワード、まだ覚えてる？",
    "私の車の車種、前に話したよね？",
    "Você ainda tem a senha que eu te passei?",
    "Wat had ik je verteld over mijn nieuwe baan?",
    "Pamiętasz, jaki numer zamówienia ci podałem?",
    "我上次跟你说过我的车是什么牌子的吗？",
    "내가 전에 알려준 와이파이 비밀번호 아직 기억해?",
    "Sana söylediğim otel neydi, hatırlıyor musun?",
    "Remind me, which school did I say my son goes to?",
    "hey what was my landlord's name, I'm sure I told you",
    "You know my allergy, right? Which one was it?",
    "Sag mir nochmal, wann mein Flug geht, hab ich dir doch gesagt",
    "Was hatte ich dir zu meinem Arbeitgeber erzählt?",
    "Rappelle-moi le nom de ma kiné, je te l'avais donné",
    "Tu te souviens de mon numéro de réservation ?",
    "Recuérdame cómo se llamaba mi veterinario, te lo dije",
    "¿Qué te conté de mi jefe la otra vez?",
    "Ricordami il nome del mio dentista, te l'avevo detto",
    "Напомни, как зовут моего врача, я тебе говорил",
    "Ты помнишь, какой у меня размер обуви?",
    "前に言った私の誕生日、いつだっけ？",
    "私の犬の名前、教えたよね？",
    "我之前说过我女儿几岁来着？",
    "你还记得我对什么过敏吗？",
    "Weet je nog welke bloedgroep ik heb?",
    "Przypomnij mi, jak ma na imię mój lekarz, mówiłem ci",
    "Pamiętasz, gdzie pracuję?",
    "Você lembra qual é o meu tamanho de sapato?",
    "내 강아지 이름 기억나?",
    "Sana köpeğimin adını söylemiştim, neydi?",
    "What was the name of the wine I said I liked?",
    "Last time I mentioned a book my friend recommended, what was the title?",
    "I gave you my colleague's email the other day, can you find it?",
    "Hab ich dir nicht mal den Namen meines Zahnarztes gesagt?",
    "Je t'ai déjà dit où je travaille, non ? C'était où ?",
    "Te había dicho el nombre de mi gata, ¿cuál era?",
    "Ti avevo detto quando scade il mio passaporto, quando era?",
    "Я тебе рассказывал про свою работу, что ты запомнил?",
    "この前話した私の趣味、覚えてる？",
    "我之前告诉过你我的生日，是哪天？",
    "Heb ik je al verteld waar ik woon?",
    "Mówiłem ci kiedyś, jaki mam samochód?",
    "Eu já te falei onde eu trabalho?",
    "Based on what you know about me, which of these jobs fits me?",
    # Swedish, Danish, Norwegian: languages the embedding model was not trained on.
    "Vad sa jag att min hund heter?",
    "Kommer du ihåg var jag jobbar?",
    "Vad vet du om mig?",
    "Har jag berättat för dig vilken mat jag inte tål?",
    "Vilken stad sa jag att jag flyttade till?",
    "Minns du vad min fru heter?",
    "Hvad sagde jeg, at min søn hedder?",
    "Husker du hvor jeg bor?",
    "Hva fortalte jeg deg om jobben min?",
    "Husker du når bursdagen min er?",
    # Greek, Vietnamese, Czech, Scandinavian, Turkish, Korean, Arabic: what did I tell
    # you, do you remember what I said.
    "Θυμάσαι πώς λέγεται η γυναίκα μου;",
    "Τι σου έχω πει για τη δουλειά μου;",
    "Σου είχα πει πού μένω;",
    "Τι ξέρεις για μένα;",
    "Θυμάσαι ποιο φαγητό δεν μου αρέσει;",
    "Bạn còn nhớ tên vợ tôi không?",
    "Tôi đã kể với bạn gì về gia đình tôi?",
    "Bạn biết gì về tôi?",
    "Tôi có nói với bạn tôi sống ở đâu chưa?",
    "Bạn nhớ tôi bị dị ứng với gì không?",
    "Pamatuješ si, jak se jmenuje můj pes?",
    "Co víš o mně?",
    "Říkal jsem ti, kde bydlím?",
    "Benim hakkımda ne biliyorsun?",
    "Köpeğimin adını hatırlıyor musun?",
    "Sana nerede çalıştığımı söylemiş miydim?",
    "내 아내 이름 기억해?",
    "내가 어디 산다고 했었지?",
    "나에 대해 뭘 알고 있어?",
    "هل تتذكر اسم زوجتي؟",
    "ماذا تعرف عني؟",
    "هل أخبرتك أين أعمل؟",
)
# Near misses that need no tool (skills.registry).
COUNTER_EXAMPLES = (
    "Remember when we were kids and summers lasted forever?",
    "I can't remember the name of that actor in Titanic",
    "Weißt du noch, damals die Sommerferien? Herrlich!",
    "Tu te souviens des années 90 ? Quelle époque !",
    "¿Te acuerdas de la final del Mundial de 2010?",
    "А помнишь, как раньше всё было проще?",
    "子供の頃の夏休みって楽しかったよね",
    "How can I improve my memory for exams?",
    "What did they say?",
    "What does the article say about it?",
    "Was haben die dazu gesagt?",
    "Qu'est-ce qu'ils ont répondu ?",
    "¿Qué dijeron en la reunión?",
    "Что они ответили?",
    "Do you remember the first iPod? What a device",
    "Remember cassette tapes? I miss the sound",
    "Weißt du noch, wie teuer Benzin früher war? Unglaublich",
    "Tu te rappelles le Minitel ? C'était une autre époque",
    "¿Te acuerdas de los tamagotchis? Qué locura",
    "Ti ricordi il Nokia 3310? Indistruttibile",
    "Помнишь, как мы ждали загрузки через модем? Эх",
    "昔のテレビゲーム、覚えてる？楽しかったな",
    "Lembra das locadoras de vídeo? Que saudade",
    "Weet je nog hoe we vroeger sms'ten? Grappig",
    "Pamiętasz Gadu-Gadu? To były czasy",
    "你还记得小时候看的动画片吗？真好看",
    "Write a story for my son about a brave little fox",
    "Suggest a name for my new puppy",
    "Help me write a letter to my grandmother",
    "Minns du när vi var små och badade hela sommaren?",
    "Kan du huske dengang vi var på Bornholm? Det var dejligt",
)
TRIGGERS = (
    r"\bwhat (?:do|did) you (?:know|remember) (?:about|of) (?:me|my)\b"
    r"|\bwhat did i (?:tell|say to|mention to) you\b|\bwhat did i say (?:my|about)\b"
    r"|\b(?:did|have) i (?:ever |already )?(?:tell|told|mention(?:ed)?) (?:to )?you\b"
    r"|\bdo you (?:still )?remember (?:my|mine|what i|what my|where i|which|who my|how my)\b"
    r"|\bwhat(?:'s| is| was) my \w+(?: \w+)? again\b"
    r"|\b(?:search|check|look (?:in|at)) (?:your|my) memor(?:y|ies)\b"
    r"|\b(?:in|from) (?:our )?(?:earlier|previous|past|last) (?:conversations?|chats?)\b",
    r"\bwas weißt du (?:noch )?(?:über|von) mir\b|\bwas habe ich dir (?:über|von|zu)\b"
    r"|\bhabe ich dir (?:schon |je |mal |schon mal )?(?:gesagt|erzählt)\b"
    r"|\b(?:erinnerst du dich|weißt du noch),? (?:an mein|was ich|wie mein|wo ich|wann ich|welche)",
    r"\bque sais-tu (?:de|sur) moi\b|\bqu'est-ce que je t'ai (?:dit|raconté)\b"
    r"|\bt'ai-je (?:déjà )?(?:dit|parlé)\b"
    r"|\b(?:tu te souviens|te souviens-tu|te rappelles-tu|tu te rappelles) (?:de ce que je"
    r"|de mon|de ma|de mes|du nom|où je|comment s'appelle)",
    r"\bqué sabes (?:de|sobre) mí\b|\bqué te (?:dije|conté)\b|\bte (?:dije|conté) (?:alguna vez|ya)\b"
    r"|\brecuerdas (?:lo que te|mi|mis|qué te|cómo se llama|dónde)\b",
    r"\bcosa sai di me\b|\bcosa ti ho (?:detto|raccontato)\b"
    r"|\bti ricordi (?:cosa ti|il mio|la mia|i miei|le mie|come si chiama|dove)\b",
    r"\bo que (?:você )?sabe sobre mim\b|\bo que (?:eu )?(?:te|lhe) (?:disse|contei)\b"
    r"|\b(?:você )?se lembra (?:do que eu|do meu|da minha|dos meus|das minhas)\b",
    r"\bчто ты (?:знаешь|помнишь) обо мне\b|\bчто я (?:тебе )?(?:говорил|рассказывал|писал)"
    r"|\b(?:ты )?помнишь,? (?:как зовут|что я|мо[йюяеи])",
    r"私について何を|前に(?:話した|言った)|私の[^。？?]{1,12}(?:覚えて(?:る|います|いる)|知って(?:る|います))",
    r"\bvad (?:sa|sade|berättade) jag\b|\bvad vet du om mig\b"
    r"|\b(?:kommer du ihåg|minns du) (?:vad jag|vad min|var jag|vilke[nt]|när jag|hur min|min|mitt|mina)\b"
    r"|\bhva(?:d)? (?:sa|sagde|fortalte) jeg\b|\bhva(?:d)? (?:vet|ved) du om meg\b|\bhvad ved du om mig\b"
    r"|\bhusker du (?:hva|hvad|hvor|når|hvilke[nt]|min|mit|mitt|mine)\b",
    # "Which city did I say I was moving to?": a question about a thing the user named.
    r"\b(?:which|what) \w+(?: \w+)? (?:did|have) i (?:say|said|tell you|told you|mention(?:ed)?)\b"
    r"|\b(?:welche[nrs]?|was für) \w+ (?:habe|hab) ich (?:dir )?(?:gesagt|erzählt|genannt)\b"
    r"|\bquel(?:le)?s? \w+ (?:je t'ai|t'ai-je) (?:dit|mentionné|parlé)\b"
    r"|\b(?:qué|cuál|cuáles) \w+ te (?:dije|conté|mencioné)\b|\bquale \w+ ti ho (?:detto|nominato)\b"
    r"|\b(?:какой|какая|какое|какие|какую|куда|где|когда|сколько|в какой|в каком)\b[^.?!]{0,30}"
    r"\bя (?:тебе |вам )?(?:говорил|говорила|рассказывал|рассказывала|упоминал|упоминала)\b",
    r"\bщо я (?:тобі )?(?:казав|казала|розповідав|розповідала)\b|\bщо ти знаєш про мене\b"
    r"|\bco jsem ti (?:říkal|říkala|psal|psala)\b|\bco o mně víš\b"
    r"|\bmuistatko,? (?:mitä|missä|mikä|kuinka)\b|\bmitä (?:kerroin|sanoin) sinulle\b"
    r"|\bmitä tiedät minusta\b",
    r"你(?:还)?记得我|我(?:之前|以前|上次)(?:跟你|和你|对你)?(?:说过|提过|讲过)|你(?:对我|知道我)(?:了解|的)",
    # Greek, Hindi, Vietnamese, Czech, Turkish, Korean, Arabic.
    r"\bθυμάσαι (?:τι|πώς|πού|ποι\w*)\b|\bτι σου (?:είπα|είχα πει|έχω πει)\b|\bσου (?:είχα πει"
    r"|είπα|έχω πει)\b|\bτι ξέρεις για (?:μένα|εμένα)\b",
    r"मैंने (?:तुम्हें|तुमको|आपको)|(?:तुम|आप) मेरे बारे में क्या|मैंने .{0,30}बताई? था"
    r"|याद है (?:मैंने|मेरी|मेरे|मेरा)",
    r"\btôi (?:đã )?(?:có )?(?:kể|nói) (?:với|cho) bạn\b|\bbạn (?:còn )?nhớ (?:tôi|tên)\b"
    r"|\bbạn biết gì về tôi\b|\blần trước tôi\b",
    r"\bco jsem ti (?:\w+ )?(?:říkal|říkala|psal|psala)\b|\bpamatuješ si,? (?:co jsem"
    r"|jak se jmenuje|kde|můj|moje|mou|moji)\b|\bříkal(?:a)? jsem ti\b",
    r"\bsana .{0,40}(?:demiştim|söylemiştim|anlatmıştım|söylemiş miydim|bahsetmiştim)"
    r"|\bhakkımda ne biliyorsun\b|내가 .{0,30}(?:말했|얘기했|라고 했)|나에 대해 뭘|ما (?:قلته|أخبرتك)"
    r"|ماذا (?:قلت|أخبرتك)|هل أخبرتك|ماذا تعرف عني|تتذكر ما",
    # What the assistant remembers or knows about the user, and what the user told it, in
    # the forms the rules above miss (Hindi, Czech, Danish, Norwegian, Swedish, Finnish,
    # Greek, Vietnamese, English).
    r"मेरे बारे में क्या (?:याद|पता|जानते)|(?:तुम्हें|तुमको|आपको) (?:मेरे|मेरी|मेरा)[^?।]{0,40}याद"
    r"|याद है (?:तुम्हें|तुमको|आपको)|मैंने [^?।]{0,40}(?:बताया|बताई|कहा|बोला) था",
    r"\bco si o mně pamatuješ\b|\bco víš o (?:mně|mých|mém|mé|mojí|mojem)\b"
    r"|\bvzpomeneš si,? (?:kde|co|jak|kdy|kdo)\b|\bjsem ti (?:říkal|říkala|dával|dávala|dal|dala"
    r"|psal|psala)\b",
    r"\bkan du huske,? (?:hvad|hvor|hvilke[nt]?|hvornår|hvem|min|mit|mine)\b"
    r"|\bhva(?:d)? husker du (?:om|fra)\b|\b(?:hvad|hvilke[nt]?|hva) \w+ (?:sagde|fortalte|nævnte)"
    r" jeg\b|\bhar jeg fortalt (?:dig|deg)\b|\bvad minns du om mig\b|\bmitä muistat minusta\b",
    r"\bτι θυμάσαι για (?:μένα|εμένα)\b|\bσου (?:έδωσα|είχα δώσει)\b|\bbạn (?:nhớ|biết) gì về tôi\b"
    r"|\btôi đã (?:dặn|nói|kể|nhắc)\b|\bdo you recall (?:my|what i|where i|which|who my|how my)\b"
    r"|\bwhat (?:do|did) you (?:have )?(?:on (?:file|record)|remember) about (?:me|my)\b",
    # What the user said or settled earlier, asked back in English: "did I already mention
    # …" (no "you"), "what I said about …", "the plan we made", "which city am I moving
    # to again?" (the user's own fact with "again": a thing told before).
    r"\b(?:did|have) i (?:ever |already )?mention(?:ed)? (?:my|that|the|where|how|what|who)\b"
    r"|\b(?:remind me|look up|find|search for|check) what i (?:said|told you|mentioned|wrote)\b"
    r"|\bwhat (?:did )?we (?:decided?|agreed(?: on)?|planned|settled on) (?:about|for|on)\b"
    r"|\bthe \w+ we (?:made|agreed on|decided on|came up with) (?:for|about) my\b"
    r"|\b(?:what|which|where|when|who|how)\b[^.?!\n]{0,30}\b(?:my|am i|do i|i'm)\b[^.?!\n]{0,30}"
    r"\bagain\s*\?",
)


register_tool(
    name="memory_search",
    description=(
        "Search what you remember about this user from earlier conversations (preferences, "
        "facts, events, relationships, decisions). Words are matched exactly and by meaning; "
        'use "quotes" for a phrase, or, and -word to exclude.'
    ),
    category="memory",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "limit": {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "description": f"How many memories to return (1-{MAX_LIMIT}); null means 5.",
            },
            "category": {
                "type": ["string", "null"],
                "enum": [*Memory.Category.values, None],
                "description": "Only memories of this category; null means all.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    execute=execute,
    examples=EXAMPLES,
    counter_examples=COUNTER_EXAMPLES,
    triggers=TRIGGERS,
)
