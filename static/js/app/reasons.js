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
