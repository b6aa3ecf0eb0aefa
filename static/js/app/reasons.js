// The text shown for a failure reason (docs/protocol.md §8, openmates.llm.FAILURE_REASONS):
// this app's translation for the user's language when it has one, else the server's
// English `message`, which says what to do, else the English text kept here (a reason read
// with a stored message after a reload comes without a message).

// The server's texts (openmates.llm.FAILURE_REASONS, tests/pipeline/test_failure_reasons.py compares them).
export const ENGLISH = {
  provider_unreachable: "The AI provider could not be reached. Try again in a few minutes; if it keeps happening, tell the administrator of this server.",
  provider_auth: "The AI provider refused this server's API key. Tell the administrator of this server: the key in the instance's secrets needs to be checked.",
  provider_rate_limit: "The AI provider is limiting requests right now. Wait a minute, then retry.",
  context_too_long: "This chat is too long for the model. Start a new chat, or send a shorter message.",
  empty_response: "The model returned an empty answer. Retry, or rephrase your message.",
  tool_failed: "A tool the answer needed failed. Retry; if it keeps failing, tell the administrator of this server.",
  timeout: "The model took too long to answer. Retry in a moment.",
  provider_not_configured: "No model is set up for this instance (a provider key is missing). Tell the administrator of this server.",
  provider_error: "The AI provider could not answer. Retry; if it keeps happening, tell the administrator of this server.",
};

const TRANSLATIONS = {
  de: {
    provider_unreachable: "Der KI-Anbieter ist nicht erreichbar. Versuche es in ein paar Minuten erneut; wenn es weiter passiert, sag dem Administrator dieses Servers Bescheid.",
    provider_auth: "Der KI-Anbieter lehnt den API-Schlüssel dieses Servers ab. Sag dem Administrator Bescheid: der Schlüssel in den Geheimnissen der Instanz muss geprüft werden.",
    provider_rate_limit: "Der KI-Anbieter begrenzt gerade die Anfragen. Warte eine Minute und versuche es dann erneut.",
    context_too_long: "Dieser Chat ist zu lang für das Modell. Beginne einen neuen Chat oder sende eine kürzere Nachricht.",
    empty_response: "Das Modell hat eine leere Antwort gegeben. Versuche es erneut oder formuliere deine Nachricht um.",
    tool_failed: "Ein Werkzeug, das die Antwort brauchte, ist fehlgeschlagen. Versuche es erneut; wenn es weiter fehlschlägt, sag dem Administrator Bescheid.",
    timeout: "Das Modell hat nicht rechtzeitig geantwortet. Versuche es erneut.",
    provider_not_configured: "Für diese Instanz ist kein Modell eingerichtet (ein Anbieter-Schlüssel fehlt). Sag dem Administrator dieses Servers Bescheid.",
    provider_error: "Der KI-Anbieter konnte nicht antworten. Versuche es erneut; wenn es weiter passiert, sag dem Administrator dieses Servers Bescheid.",
  },
  fr: {
    provider_unreachable: "Le fournisseur d’IA est injoignable. Réessaie dans quelques minutes ; si cela continue, préviens l’administrateur de ce serveur.",
    provider_auth: "Le fournisseur d’IA refuse la clé API de ce serveur. Préviens l’administrateur : la clé dans les secrets de l’instance doit être vérifiée.",
    provider_rate_limit: "Le fournisseur d’IA limite les requêtes en ce moment. Attends une minute, puis réessaie.",
    context_too_long: "Cette conversation est trop longue pour le modèle. Commence une nouvelle conversation ou envoie un message plus court.",
    empty_response: "Le modèle a renvoyé une réponse vide. Réessaie ou reformule ton message.",
    tool_failed: "Un outil nécessaire à la réponse a échoué. Réessaie ; si cela continue, préviens l’administrateur de ce serveur.",
    timeout: "Le modèle a mis trop de temps à répondre. Réessaie dans un instant.",
    provider_not_configured: "Aucun modèle n’est configuré pour cette instance (une clé de fournisseur manque). Préviens l’administrateur de ce serveur.",
    provider_error: "Le fournisseur d’IA n’a pas pu répondre. Réessaie ; si cela continue, préviens l’administrateur de ce serveur.",
  },
  es: {
    provider_unreachable: "No se puede contactar con el proveedor de IA. Inténtalo de nuevo en unos minutos; si sigue pasando, avisa al administrador de este servidor.",
    provider_auth: "El proveedor de IA rechaza la clave API de este servidor. Avisa al administrador: hay que revisar la clave en los secretos de la instancia.",
    provider_rate_limit: "El proveedor de IA está limitando las solicitudes ahora mismo. Espera un minuto y vuelve a intentarlo.",
    context_too_long: "Este chat es demasiado largo para el modelo. Empieza un chat nuevo o envía un mensaje más corto.",
    empty_response: "El modelo devolvió una respuesta vacía. Vuelve a intentarlo o reformula tu mensaje.",
    tool_failed: "Falló una herramienta que necesitaba la respuesta. Vuelve a intentarlo; si sigue fallando, avisa al administrador de este servidor.",
    timeout: "El modelo tardó demasiado en responder. Vuelve a intentarlo en un momento.",
    provider_not_configured: "No hay ningún modelo configurado para esta instancia (falta una clave de proveedor). Avisa al administrador de este servidor.",
    provider_error: "El proveedor de IA no pudo responder. Vuelve a intentarlo; si sigue pasando, avisa al administrador de este servidor.",
  },
  it: {
    provider_unreachable: "Il fornitore di IA non è raggiungibile. Riprova tra qualche minuto; se continua, avvisa l’amministratore di questo server.",
    provider_auth: "Il fornitore di IA rifiuta la chiave API di questo server. Avvisa l’amministratore: la chiave nei segreti dell’istanza va controllata.",
    provider_rate_limit: "Il fornitore di IA sta limitando le richieste. Aspetta un minuto, poi riprova.",
    context_too_long: "Questa chat è troppo lunga per il modello. Inizia una nuova chat o invia un messaggio più breve.",
    empty_response: "Il modello ha restituito una risposta vuota. Riprova o riformula il messaggio.",
    tool_failed: "Uno strumento necessario alla risposta non ha funzionato. Riprova; se continua, avvisa l’amministratore di questo server.",
    timeout: "Il modello ha impiegato troppo tempo a rispondere. Riprova tra poco.",
    provider_not_configured: "Per questa istanza non è configurato nessun modello (manca una chiave del fornitore). Avvisa l’amministratore di questo server.",
    provider_error: "Il fornitore di IA non è riuscito a rispondere. Riprova; se continua, avvisa l’amministratore di questo server.",
  },
  pt: {
    provider_unreachable: "Não foi possível contactar o fornecedor de IA. Tente novamente dentro de alguns minutos; se continuar, avise o administrador deste servidor.",
    provider_auth: "O fornecedor de IA recusa a chave de API deste servidor. Avise o administrador: a chave nos segredos da instância tem de ser verificada.",
    provider_rate_limit: "O fornecedor de IA está a limitar os pedidos neste momento. Espere um minuto e tente novamente.",
    context_too_long: "Esta conversa é demasiado longa para o modelo. Comece uma nova conversa ou envie uma mensagem mais curta.",
    empty_response: "O modelo devolveu uma resposta vazia. Tente novamente ou reformule a mensagem.",
    tool_failed: "Uma ferramenta de que a resposta precisava falhou. Tente novamente; se continuar a falhar, avise o administrador deste servidor.",
    timeout: "O modelo demorou demasiado a responder. Tente novamente daqui a pouco.",
    provider_not_configured: "Não há nenhum modelo configurado para esta instância (falta uma chave do fornecedor). Avise o administrador deste servidor.",
    provider_error: "O fornecedor de IA não conseguiu responder. Tente novamente; se continuar, avise o administrador deste servidor.",
  },
  nl: {
    provider_unreachable: "De AI-aanbieder is niet bereikbaar. Probeer het over een paar minuten opnieuw; blijft het gebeuren, laat het de beheerder van deze server weten.",
    provider_auth: "De AI-aanbieder weigert de API-sleutel van deze server. Laat het de beheerder weten: de sleutel in de geheimen van de instantie moet worden gecontroleerd.",
    provider_rate_limit: "De AI-aanbieder beperkt op dit moment het aantal verzoeken. Wacht een minuut en probeer het dan opnieuw.",
    context_too_long: "Deze chat is te lang voor het model. Begin een nieuwe chat of stuur een korter bericht.",
    empty_response: "Het model gaf een leeg antwoord. Probeer het opnieuw of formuleer je bericht anders.",
    tool_failed: "Een hulpmiddel dat het antwoord nodig had, is mislukt. Probeer het opnieuw; blijft het mislukken, laat het de beheerder van deze server weten.",
    timeout: "Het model deed er te lang over om te antwoorden. Probeer het zo opnieuw.",
    provider_not_configured: "Voor deze instantie is geen model ingesteld (er ontbreekt een sleutel van de aanbieder). Laat het de beheerder van deze server weten.",
    provider_error: "De AI-aanbieder kon niet antwoorden. Probeer het opnieuw; blijft het gebeuren, laat het de beheerder van deze server weten.",
  },
  ja: {
    provider_unreachable: "AIプロバイダーに接続できません。数分後にもう一度お試しください。続く場合はこのサーバーの管理者に連絡してください。",
    provider_auth: "AIプロバイダーがこのサーバーのAPIキーを拒否しました。管理者に連絡してください。インスタンスのシークレットにあるキーの確認が必要です。",
    provider_rate_limit: "AIプロバイダーが現在リクエストを制限しています。1分ほど待ってから再試行してください。",
    context_too_long: "このチャットはモデルには長すぎます。新しいチャットを始めるか、短いメッセージを送ってください。",
    empty_response: "モデルが空の回答を返しました。再試行するか、メッセージを言い換えてください。",
    tool_failed: "回答に必要なツールが失敗しました。再試行してください。失敗が続く場合はこのサーバーの管理者に連絡してください。",
    timeout: "モデルの応答に時間がかかりすぎました。少ししてから再試行してください。",
    provider_not_configured: "このインスタンスにはモデルが設定されていません（プロバイダーのキーがありません）。このサーバーの管理者に連絡してください。",
    provider_error: "AIプロバイダーが応答できませんでした。再試行してください。続く場合はこのサーバーの管理者に連絡してください。",
  },
  zh: {
    provider_unreachable: "无法连接到 AI 服务提供商。请几分钟后重试；如果问题持续，请告知此服务器的管理员。",
    provider_auth: "AI 服务提供商拒绝了此服务器的 API 密钥。请告知管理员：需要检查实例机密中的密钥。",
    provider_rate_limit: "AI 服务提供商目前正在限制请求。请等待一分钟后重试。",
    context_too_long: "此对话对模型来说太长了。请开始新的对话，或发送更短的消息。",
    empty_response: "模型返回了空回答。请重试，或换一种方式表达你的消息。",
    tool_failed: "回答所需的工具运行失败。请重试；如果仍然失败，请告知此服务器的管理员。",
    timeout: "模型响应时间过长。请稍后重试。",
    provider_not_configured: "此实例尚未设置模型（缺少服务提供商的密钥）。请告知此服务器的管理员。",
    provider_error: "AI 服务提供商无法作答。请重试；如果问题持续，请告知此服务器的管理员。",
  },
  ru: {
    provider_unreachable: "Не удаётся связаться с поставщиком ИИ. Повторите попытку через несколько минут; если это повторяется, сообщите администратору этого сервера.",
    provider_auth: "Поставщик ИИ отклоняет API-ключ этого сервера. Сообщите администратору: ключ в секретах экземпляра нужно проверить.",
    provider_rate_limit: "Поставщик ИИ сейчас ограничивает запросы. Подождите минуту и повторите попытку.",
    context_too_long: "Этот чат слишком длинный для модели. Начните новый чат или отправьте более короткое сообщение.",
    empty_response: "Модель вернула пустой ответ. Повторите попытку или переформулируйте сообщение.",
    tool_failed: "Инструмент, нужный для ответа, не сработал. Повторите попытку; если ошибка повторяется, сообщите администратору этого сервера.",
    timeout: "Модель отвечала слишком долго. Повторите попытку чуть позже.",
    provider_not_configured: "Для этого экземпляра не настроена модель (нет ключа поставщика). Сообщите администратору этого сервера.",
    provider_error: "Поставщик ИИ не смог ответить. Повторите попытку; если это повторяется, сообщите администратору этого сервера.",
  },
};

// The user's language: the browser's first preferred one, as an ISO 639-1 code.
function userLanguage() {
  const preferred = (navigator.languages && navigator.languages[0]) || navigator.language || "en";
  return preferred.slice(0, 2).toLowerCase();
}

// reason: a docs/protocol.md §8 reason code; fallback: the frame's `message` (English).
export function reasonText(reason, fallback) {
  const translated = (TRANSLATIONS[userLanguage()] || {})[reason];
  return translated || fallback || ENGLISH[reason] || reason;
}

// What a stored answer shows of why it failed: this page's text from the turn's error
// frame, else the text of the reason the server kept with the message (failure_reason).
export function storedReason(row, shown) {
  return shown || (row.failure_reason ? reasonText(row.failure_reason, "") : undefined);
}
