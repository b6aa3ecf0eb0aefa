# ruff: noqa: RUF001, RUF002, E501 (patterns in many scripts: their look-alike letters are meant; long alternations)
"""Prompt-injection scoring of untrusted text (docs/architecture.md §6).

:func:`injection_score` rates 0-10 how much a text (a tool's output: a web page, an
email, a calendar entry, a file) carries instructions aimed at the model rather than data
for it. The text is first read as a model would read it (:func:`revealed_text`): ASCII
smuggled in Unicode tag characters decoded, zero-width characters between letters
removed, compatibility forms folded (NFKC: "Ⅰgnore" → "Ignore") and Cyrillic or Greek
look-alikes inside Latin words read as Latin. Legitimate uses are not touched: a flag
emoji's tag sequence (🏴 + tag letters + cancel tag), ZWJ emoji sequences, ZWNJ in
Persian or Indic words.

The score is the sum of the weights of the signals (:data:`SIGNALS`) found, at most
10: an override of earlier instructions (8), a request for the system prompt (7.5 with
a verb, 3.5 the noun alone), a role take-over (5.5), fake chat markup (5), words
addressed to the assistant (4), telling the model to ignore the user (4), a harmful
action (exfiltrate, delete, ask for a password: 3.5), concealment (3), hidden text (3
when a signal shows only once invisible characters are decoded), "tell the user …" (2.5), "new instructions"
(2.5). So one strong signal, or an address to the assistant with an action or
concealment, reaches :data:`pipeline.tool_output.INJECTION_BLOCK` (7); weak signals
alone stay below :data:`pipeline.tool_output.INJECTION_REDACT` (5). Phrases cover
English, German, French, Spanish, Italian, Portuguese, Dutch, Polish, Russian,
Ukrainian, Turkish, Japanese, Chinese and Korean; weights were set on the development
set in tests/data/preprocess/ (bench/preprocess_quality.py reports both splits).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

TAG_FIRST, TAG_LAST = 0xE0000, 0xE007F
_CANCEL_TAG = 0xE007F
_BLACK_FLAG = 0x1F3F4  # a subdivision flag's base: 🏴 + tag letters + cancel tag
# Zero-width and other invisible characters that split a word without showing.
_ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u00ad\u180e")
# Cyrillic and Greek letters drawn like Latin ones (Unicode confusables, the common
# lower- and upper-case subset), read as Latin inside a word that also has Latin letters.
_LOOK_ALIKES = str.maketrans(
    "аеорсухіјѕԁԛԝАВЕКМНОРСТХІЈЅαορτνΑΒΕΗΙΚΜΝΟΡΤΧΥΖ",
    "aeopcyxijsdqwABEKMHOPCTXIJSaoptvABEHIKMNOPTXYZ",
)
_WORD_RE = re.compile(r"\w+", re.UNICODE)


def _tag_payload(text: str) -> tuple[str, str]:
    """``(text without tag characters, the ASCII they smuggled)``; a flag emoji's tag
    sequence is neither removed nor counted as payload."""
    kept: list[str] = []
    payload: list[str] = []
    in_flag = False
    for ch in text:
        point = ord(ch)
        if point == _BLACK_FLAG:
            in_flag = True
            kept.append(ch)
            continue
        if TAG_FIRST <= point <= TAG_LAST:
            if in_flag:
                kept.append(ch)
                in_flag = point != _CANCEL_TAG
            elif 0xE0020 <= point <= 0xE007E:
                payload.append(chr(point - TAG_FIRST))
            continue
        in_flag = False
        kept.append(ch)
    return "".join(kept), "".join(payload)


def _joins_letters(text: str, index: int) -> bool:
    """Whether the zero-width character at ``index`` sits inside a word of a script that
    does not use joiners (Latin, Greek, Cyrillic, Armenian: below U+0590)."""
    before = text[index - 1] if index > 0 else ""
    after = next((ch for ch in text[index + 1 :] if ch not in _ZERO_WIDTH), "")
    return before.isalpha() and ord(before) < 0x0590 and after.isalpha() and ord(after) < 0x0590


def _without_splitters(text: str) -> tuple[str, bool]:
    """``text`` without zero-width characters inside Latin-like words, and whether any
    was removed (a word split so a filter misses it)."""
    if not any(ch in _ZERO_WIDTH for ch in text):
        return text, False
    out: list[str] = []
    split = False
    for index, ch in enumerate(text):
        if ch in _ZERO_WIDTH and (ch not in "\u200c\u200d" or _joins_letters(text, index)):
            split = split or (ch == "\u200b" or _joins_letters(text, index))
            continue
        out.append(ch)
    return "".join(out), split


def _latin_look_alikes(text: str) -> str:
    def fold(match: re.Match[str]) -> str:
        word = match.group(0)
        has_latin = any("a" <= ch.lower() <= "z" for ch in word)
        return word.translate(_LOOK_ALIKES) if has_latin else word

    return _WORD_RE.sub(fold, text)


@dataclass(frozen=True, slots=True)
class Revealed:
    """A text as a model reads it (``text``) and whether invisible characters hid
    letters in it (``hidden``: tag-character payload or zero-width-split words)."""

    text: str
    hidden: bool


def revealed_text(text: str) -> Revealed:
    """``text`` with hidden letters made visible (see the module docstring)."""
    visible, payload = _tag_payload(text)
    joined, split = _without_splitters(visible)
    folded = unicodedata.normalize("NFKC", joined)
    folded = _latin_look_alikes(folded)
    if payload:
        folded = f"{folded}\n{payload}"
    return Revealed(text=folded, hidden=bool(payload) or split)


# --- signals -------------------------------------------------------------------------------

_SENTENCE = r"[^.!?。！？\n]"
_OVERRIDE_VERBS = (
    r"ignore|ignoring|disregard|forget|override|bypass|skip|ignoriere|ignorier|ignorieren"
    r"|vergiss|vergessen sie|missachte|ignorez|oublie|oubliez|ne tiens pas compte"
    r"|ne tenez pas compte|ignora|ignorar|olvida|olvide|olvidar|descarta|haz caso omiso"
    r"|dimentica|dimenticare|trascura|esqueça|esqueca|desconsidere|negeer|vergeet"
    r"|zignoruj|ignoruj|zapomnij|игнорируй|проигнорируй|забудь|не обращай внимания"
    r"|ігноруй"
)
_INSTRUCTION_NOUNS = (
    r"instructions?|rules|guidelines|prompts?|directions|directives|programming|the above"
    r"|everything above|anweisungen|anweisung|regeln|vorgaben|instruktionen|befehle"
    r"|consignes|règles|directives|instrucciones|reglas|indicaciones|lo anterior"
    r"|istruzioni|regole|indicazioni|instruções|instrucoes|regras|diretrizes|instructies"
    r"|regels|opdrachten|instrukcje|polecenia|zasady|инструкци\w*|указани\w*|правил\w*"
    r"|промпт\w*"
)
_CJK_OVERRIDE = r"(忽略|无视|忘记|忘掉|不要理会)[^。！？\n]{0,20}(指令|指示|规则|提示|设定)"
_SOV_NOUNS = r"指示|ルール|命令|プロンプト|設定|지시|규칙|명령|talimat\w*|kural\w*"
_SOV_VERBS = r"無視|忘れ|무시|잊|yok say|unut|görmezden gel"
_SYSTEM_PROMPT = (
    r"system ?prompt|hidden instructions|initial instructions|your instructions"
    r"|prompt (du|de) syst[eè]me|prompt syst[eè]me|prompt del sistema|prompt di sistema"
    r"|prompt do sistema|systeemprompt|системн\w* (промпт|инструкци)\w*|システムプロンプト"
    r"|系统提示\w*|시스템 프롬프트"
)
_REVEAL_VERBS = (
    r"reveal|print|show|display|output|repeat|leak|tell me|zeige|zeig|verrate|gib|révèle"
    r"|affiche|montre|muestra|revela|mostra|rivela|mostre|покажи|раскрой|выведи|表示|教え"
    r"|显示|透露|输出|보여"
)
_ROLE = (
    r"\byou are now\b|\byou are no longer\b|\bfrom now on,? you\b|\bdeveloper mode\b"
    r"|\bjailbreak\b|\bDAN\b|\bno (restrictions|limits|filters)\b|\bdu bist (jetzt|nun)\b"
    r"|\btu es maintenant\b|\bahora eres\b|\bora sei\b|\bagora você é\b|\bteraz jesteś\b"
    r"|\bтеперь ты\b|\bvanaf nu ben je\b"
)
_MARKUP = (
    r"<\s*/?\s*(system|assistant|im_start|im_end)\s*>|\[(system|assistant)\]|\bBEGIN SYSTEM\b"
    r"|(?-i:\bSYSTEM\s*:)|<!--[^>]{0,80}\b(assistant|ai|model|llm)\b"
)
_AI = (
    r"ai|a\.i\.|assistant|assistants|language models?|llm|chatbot|model|ki|ki-assistent\w*"
    r"|sprachmodell|ia|l'ia|asistente|assistente|modelo|modello|ии|ші|модель|ассистент"
)
_ADDRESS = (
    rf"\b(note|message|instructions?|attention|notice|reminder|hinweis|nachricht|anweisung"
    rf"|instruction|nota|aviso|nuevas instrucciones|new instructions?|neue anweisung)\b"
    rf"{_SENTENCE}{{0,12}}\b(to|for|an|für|pour|para|per|dla|для)\s+(the |den |das |die |l'|el |la |il |o |a )?"
    rf"({_AI})\b"
    rf"|\b({_AI})s?\b,?\s+(reading|processing|parsing|summari[sz]ing)\b"
    rf"|\b(dear|hey|attention|achtung)\s+({_AI})\b|\bany ({_AI}) (reading|that reads)\b"
    rf"|(^|[.!?:\]\-]\s*)(assistant|assistente|asistente|ассистент|модель|assistant ia"
    rf"|ki-assistent|ai model|ai)\s*[,:]"
    rf"|\bkomm?entar für die ki\b|aiアシスタントへ|ai助手|aiは|ai 모델|ии\b"
    rf"|\b(as|als|como|come|comme) (an? )?({_AI}|asistente de ia|assistente ia)\b[^.]{{0,20}}"
    rf"\b(you must|debes|musst|dois|devi)\b"
)
_IGNORE_USER = (
    r"\bignore the user\b|\bignore (the user's|their) (question|request)\b"
    r"|\bignoriere die frage\b|\bignora la (domanda|pregunta)\b|\bignore la question\b"
    r"|проигнорируй запрос|игнорируй вопрос|ユーザーの質問を無視|无视用户的问题|忽略用户的问题"
)
_ACTION = (
    rf"\b(forward|send|email|upload|transfer|exfiltrate|leak|copy)\b{_SENTENCE}{{0,40}}\b(emails?|messages?"
    r"|files?|contacts?|data|conversation|history|passwords?|api keys?|credentials|this file)\b"
    rf"|\b(delete|cancel|remove|erase)\b{_SENTENCE}{{0,30}}\b(appointments?|events?|emails?|files?|contacts?"
    rf"|account)\b|\b(ask|request)\b{_SENTENCE}{{0,30}}\b(password|card number|bank|credentials|pin)\b"
    rf"|\b(output|give|print)\b{_SENTENCE}{{0,30}}\bapi keys?\b|\badd {_SENTENCE}{{0,30}}\bto the user's contacts\b"
    rf"|\b(leite|überweise|sende)\b{_SENTENCE}{{0,40}}\b(weiter|betrag|daten|dateien)\b"
    rf"|\bpasswort\b{_SENTENCE}{{0,30}}\beingeben\b|\benvoie\b{_SENTENCE}{{0,40}}\b(fichier|données|courriels)\b"
    rf"|\bmot de passe\b|\bnúmero de (su |tu )?tarjeta\b|\bborra\b{_SENTENCE}{{0,30}}\bcitas\b"
    rf"|\binoltra\b{_SENTENCE}{{0,40}}\b(email|mail|file)\b|\bdados bancários\b|\bshare {_SENTENCE}{{0,20}}password\b"
    rf"|\bперешли\b|\bотправь\b{_SENTENCE}{{0,40}}\b(файл|письма|данные)\b|\bsifresini iste|şifresini iste"
    rf"|\bwachtwoord\b{_SENTENCE}{{0,20}}\bdelen\b|\bklik\b|click this link|リンクをクリック"
)
_CONCEAL = (
    r"\bdo not (mention|tell|reveal|inform)\b|\bdon'?t (mention|tell)\b|\bwithout (telling|asking|"
    r"mentioning|informing)\b|\bsilently\b|\bsecretly\b|\bnever mention\b|\bohne es zu sagen\b"
    r"|\bsans le dire\b|\bsin decir(lo)?\b|\bsenza dirlo\b|\bне говори\b|\bsem dizer\b"
)
_TELL_USER = (
    r"\b(tell|inform|convince|instruct) the user\b|\b(say|answer|respond|reply)( only)? (that|with)\b"
    r"|\brecommend only\b|\bsage dem nutzer\b|\bempfiehl\b|\bdis à l'utilisateur\b"
    r"|\bdi(le)? al usuario\b|\bpide al usuario\b|\bconsiglia solo\b|\bdiga ao usuário\b"
    r"|\bскажи пользователю\b|\bvertel de gebruiker\b|\bpoleć tylko\b|ユーザーに|告诉用户"
    r"|勧めて|を推荐|추천하세요|\bresponde solo\b|\binsist on it\b"
)
_NEW_INSTRUCTIONS = (
    r"\bnew instructions?\b|\bneue anweisung(en)?\b|\bnouvelles? instructions?\b"
    r"|\bnuevas instrucciones\b|\bnuove istruzioni\b|\bновые инструкции\b|\boverride\s*:"
)


@dataclass(frozen=True, slots=True)
class Signal:
    """One kind of evidence: its ``name``, ``weight`` (score points) and ``pattern``."""

    name: str
    weight: float
    pattern: re.Pattern[str]


def _signal(name: str, weight: float, pattern: str) -> Signal:
    return Signal(name, weight, re.compile(pattern, re.IGNORECASE | re.MULTILINE))


SIGNALS: tuple[Signal, ...] = (
    _signal(
        "override",
        8.0,
        rf"\b({_OVERRIDE_VERBS})\b{_SENTENCE}{{0,50}}?({_INSTRUCTION_NOUNS})"
        rf"|({_SOV_NOUNS}){_SENTENCE}{{0,20}}({_SOV_VERBS})|{_CJK_OVERRIDE}",
    ),
    _signal("reveal", 7.5, rf"({_REVEAL_VERBS}){_SENTENCE}{{0,40}}({_SYSTEM_PROMPT})"),
    _signal("system_prompt", 3.5, _SYSTEM_PROMPT),
    _signal("role", 5.5, _ROLE),
    _signal("markup", 5.0, _MARKUP),
    _signal("address", 4.0, _ADDRESS),
    _signal("ignore_user", 4.0, _IGNORE_USER),
    _signal("action", 3.5, _ACTION),
    _signal("conceal", 3.0, _CONCEAL),
    _signal("tell_user", 2.5, _TELL_USER),
    _signal("new_instructions", 2.5, _NEW_INSTRUCTIONS),
)
# Of two signals, only the stronger counts: the noun alone is part of the reveal.
_SUBSUMED = {"system_prompt": "reveal"}
HIDDEN_WEIGHT = 3.0
MAX_SCORE = 10.0


def _signals_in(text: str) -> list[str]:
    found = [s.name for s in SIGNALS if s.pattern.search(text)]
    return [name for name in found if _SUBSUMED.get(name) not in found]


def signals_found(text: str) -> tuple[str, ...]:
    """Names of the :data:`SIGNALS` in ``text`` as a model reads it, plus ``"hidden"``
    when a signal is there only because invisible characters were decoded or removed."""
    revealed = revealed_text(text)
    found = _signals_in(revealed.text)
    if revealed.hidden and set(found) - set(_signals_in(text)):
        found.append("hidden")
    return tuple(found)


def injection_score(text: str) -> float:
    """0-10: the sum of the weights of :func:`signals_found` (``hidden`` weighs
    :data:`HIDDEN_WEIGHT`), capped at 10."""
    weights = {s.name: s.weight for s in SIGNALS} | {"hidden": HIDDEN_WEIGHT}
    return min(MAX_SCORE, sum(weights[name] for name in signals_found(text)))


def redact_phrases(text: str, replacement: str) -> str:
    """``text`` with every phrase a signal matches (in the visible text) replaced."""
    for signal in SIGNALS:
        text = signal.pattern.sub(replacement, text)
    return text


def strip_invisible(text: str) -> str:
    """``text`` without invisible format characters (Unicode category Cf), keeping the
    legitimate ones: ZWJ and ZWNJ where they join emoji or letters of scripts that use
    them (Persian, Indic, …), and a flag emoji's tag sequence. Tag characters smuggling
    ASCII and joiners inside Latin, Greek or Cyrillic words are removed."""
    if text.isascii():
        return text
    visible, _ = _tag_payload(text)
    out: list[str] = []
    for index, ch in enumerate(visible):
        if ch in "\u200c\u200d":
            if not _joins_letters(visible, index):
                out.append(ch)
        elif TAG_FIRST <= ord(ch) <= TAG_LAST or unicodedata.category(ch) != "Cf":
            out.append(ch)
    return "".join(out)
