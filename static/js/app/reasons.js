// The text shown for a failure reason (docs/protocol.md §8, openmates.llm.FAILURE_REASONS):
// this app's translation for the user's language when it has one, else the server's
// English `message`, which says what to do.

const TRANSLATIONS = {
  de: {
    provider_unreachable: "Der KI-Anbieter ist nicht erreichbar. Versuche es in ein paar Minuten erneut; wenn es weiter passiert, sag dem Administrator dieses Servers Bescheid.",
    provider_auth: "Der KI-Anbieter lehnt den API-Schlüssel dieses Servers ab. Sag dem Administrator Bescheid: der Schlüssel in den Geheimnissen der Instanz muss geprüft werden.",
    provider_rate_limit: "Der KI-Anbieter begrenzt gerade die Anfragen. Warte eine Minute und versuche es dann erneut.",
    context_too_long: "Dieser Chat ist zu lang für das Modell. Beginne einen neuen Chat oder sende eine kürzere Nachricht.",
    empty_response: "Das Modell hat eine leere Antwort gegeben. Versuche es erneut oder formuliere deine Nachricht um.",
    tool_failed: "Ein Werkzeug, das die Antwort brauchte, ist fehlgeschlagen. Versuche es erneut; wenn es weiter fehlschlägt, sag dem Administrator Bescheid.",
    timeout: "Das Modell hat nicht rechtzeitig geantwortet. Versuche es erneut.",
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
  return translated || fallback || reason;
}
