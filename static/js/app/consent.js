// Memory consent per chat (docs/protocol.md §3 memory.consent): the answer to a
// memory.request holds for the chat. It is kept on the chat's IndexedDB record
// (`memory_consent`: category -> "allowed" | "denied"; categories only, no chat text), shown
// under the conversation ("Memories: allowed for fact · change") and changeable there,
// which sends memory.consent without a request_id (the list replaces the chat's answers).
// A later memory.request about categories already answered (the server forgets after
// 72 h) is answered from the record without asking again.
import { $, el } from "./dom.js";
import { CATEGORIES } from "./memories.js";
import { isReadOnly, state } from "./state.js";

// The chat's recorded answers, {} when none.
export function consentOf(chatId) {
  const chat = state.chats.get(chatId);
  return (chat && chat.memory_consent) || {};
}

export function consentSummary(answers) {
  const allowed = CATEGORIES.filter((category) => answers[category] === "allowed");
  return allowed.length ? `Memories: allowed for ${allowed.join(", ")}` : "Memories: not used in this chat";
}

export class ConsentLine {
  constructor() {
    this.chatId = null;
    $("consent-change").addEventListener("click", () => this.toggleEdit());
    $("consent-cancel").addEventListener("click", () => this.closeEdit());
    $("consent-save").addEventListener("click", () => this.saveEdit());
  }

  // Shows the line for `chat` (a record of state.chats or null): hidden until answered.
  show(chat) {
    const chatId = chat ? chat.chat_id : null;
    if (chatId !== this.chatId) this.closeEdit();
    this.chatId = chatId;
    const answers = chatId ? consentOf(chatId) : {};
    $("consent-line").hidden = !Object.keys(answers).length;
    $("consent-summary").textContent = consentSummary(answers);
    $("consent-change").hidden = isReadOnly(chat);
    $("consent-dot").hidden = isReadOnly(chat);
  }

  // Records `answers` (category -> "allowed" | "denied") for the chat, on top of the
  // ones before unless `replace`.
  async record(chatId, answers, replace = false) {
    const merged = replace ? { ...answers } : { ...consentOf(chatId), ...answers };
    const chat = state.chats.get(chatId);
    if (chat) chat.memory_consent = merged;
    if (state.store) await state.store.patchChat(chatId, { memory_consent: merged });
    if (chatId === this.chatId) this.show(chat || null);
  }

  // The answer to one memory.request: `asked` the categories put to the user, `chosen`
  // those they allowed, `alsoAllowed` requested ones the chat had allowed before.
  answer({ chatId, requestId, asked, chosen, alsoAllowed = [] }) {
    const allowed = [...new Set([...chosen, ...alsoAllowed])];
    state.socket.send({ type: "memory.consent", chat_id: chatId, request_id: requestId, allowed });
    const answers = {};
    for (const category of asked) answers[category] = chosen.includes(category) ? "allowed" : "denied";
    return this.record(chatId, answers);
  }

  toggleEdit() {
    if (!$("consent-edit").hidden) { this.closeEdit(); return; }
    const answers = consentOf(this.chatId);
    $("consent-boxes").replaceChildren(...CATEGORIES.map((category) => el("label", {},
      el("input", { type: "checkbox", value: category, checked: answers[category] === "allowed" }), ` ${category}`)));
    $("consent-edit").hidden = false;
    $("consent-change").setAttribute("aria-expanded", "true");
  }

  closeEdit() {
    $("consent-edit").hidden = true;
    $("consent-change").setAttribute("aria-expanded", "false");
  }

  // The changed answer replaces the chat's: the checked categories allowed, all others denied.
  async saveEdit() {
    const chatId = this.chatId;
    if (!chatId || !state.socket) return;
    const allowed = [...$("consent-boxes").querySelectorAll("input:checked")].map((box) => box.value);
    state.socket.send({ type: "memory.consent", chat_id: chatId, allowed });
    const answers = {};
    for (const category of CATEGORIES) answers[category] = allowed.includes(category) ? "allowed" : "denied";
    this.closeEdit();
    await this.record(chatId, answers, true);
  }
}
