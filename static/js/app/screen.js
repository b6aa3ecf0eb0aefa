// What the page shows around the conversation view and the chat list: the header, the
// composer (locked on a read-only chat) and its status line, the stop button, the open
// chat's stored messages, the confirmation dialog, which of the conversation and the
// memories page is shown. Of the app state it changes only which chat is open (newChat,
// showCreated).
import { $, displayLine } from "./dom.js";
import { emojiSupported, icon } from "./icons.js";
import { activeTurnOf, chosenOf, config, currentChat, isReadOnly, isServerManaged, isStreaming, rememberOpenChat, settledStatus, state } from "./state.js";
import { storedReason } from "./reasons.js";
import { decryptMessage } from "./storage.js";
import { showTiers } from "./tiers.js";
import { branchOf, versionControls } from "./versions.js";

// Pre-processing names an icon with one lowercase word; show a matching symbol.
const ICONS = {
  chat: "💬", code: "💻", sparkles: "✨", book: "📖", globe: "🌍", music: "🎵", heart: "❤️",
  calculator: "🧮", math: "🧮", calendar: "📅", clock: "🕒", weather: "🌤️", cloud: "☁️",
  travel: "✈️", plane: "✈️", food: "🍽️", money: "💰", finance: "💰", health: "🩺",
  science: "🔬", idea: "💡", lightbulb: "💡", search: "🔎", question: "❓", star: "⭐",
  work: "💼", briefcase: "💼", school: "🎓", education: "🎓", art: "🎨", sport: "⚽",
  game: "🎮", home: "🏠", car: "🚗", phone: "📱", mail: "✉️", shopping: "🛒",
};

// The chat's icon: its name's symbol, or a drawn chat bubble for a name without one and
// wherever the browser has no emoji font (an emoji would be an empty box); "" for none.
export function chatIcon(name) {
  if (!name) return "";
  const symbol = ICONS[String(name).toLowerCase().trim()];
  return symbol && emojiSupported() ? symbol : icon("chat");
}

// A phone-wide composer has room for "Message" only (the Enter hint would be clipped).
const COMPOSER_HINT = window.matchMedia("(max-width: 520px)").matches ? "Message" : $("composer-input").placeholder;
const ENDED = ["failed", "interrupted", "cancelled"];
const READ_ONLY_PLACEHOLDER = "Read-only";
export const READ_ONLY_HINT = "Read-only: you are no longer a member of this chat's assistant.";
export const SERVER_MANAGED_HINT = "Read-only here: this conversation was made through the API or a messaging app; continue it there.";

export const UNDECRYPTABLE_HINT = "Read-only here: this chat's key cannot be opened in this browser, so nothing new can be written to it.";

// Why the composer of `chat` is locked.
export function readOnlyHint(chat) {
  if (chat.undecryptable) return UNDECRYPTABLE_HINT;
  return isServerManaged(chat) ? SERVER_MANAGED_HINT : READ_ONLY_HINT;
}

// A chat's stored messages (with the statuses this page knows) and the branch of them shown.
async function storedBranch(chatId) {
  const stored = (await state.store.messages(chatId)).map((row) => ({ ...row, status: settledStatus(row) }));
  return { stored, branch: branchOf(stored, chosenOf(chatId), state.replaced) };
}

export class Screen {
  // view: a ConversationView, chatList: a ChatList, consent: a ConsentLine.
  constructor({ view, chatList, consent }) {
    this.view = view;
    this.chatList = chatList;
    this.consent = consent;
  }

  status(text) {
    $("composer-status").textContent = text || "";
  }

  refreshList() {
    this.chatList.setChats([...state.chats.values()]);
  }

  setHeader() {
    const chat = currentChat();
    const title = chat && chat.title ? displayLine(chat.title) : "";
    $("chat-title").textContent = title || "New chat";
    $("chat-icon").replaceChildren(chat ? chatIcon(chat.icon) : "");
    $("chat-icon").title = chat && chat.icon ? chat.icon : "";
    document.title = title ? `${title} · OpenMates` : "OpenMates";
    const picker = $("instance-picker");
    picker.disabled = Boolean(chat);
    if (chat) picker.value = chat.instance;
    const locked = isReadOnly(chat);
    $("composer-input").disabled = locked;
    this.syncSendButton();
    // The reason in full above the composer (a placeholder this long is cut off).
    $("composer-input").placeholder = locked ? READ_ONLY_PLACEHOLDER : COMPOSER_HINT;
    $("read-only-notice").textContent = locked ? readOnlyHint(chat) : "";
    $("read-only-notice").hidden = !locked;
    $("attach").disabled = locked;
    $("tier-picker").disabled = locked;
    const instance = config.instances.find((i) => i.slug === (chat ? chat.instance : state.instance));
    $("tools-notice").hidden = !instance || instance.toolsAvailable !== false;
    showTiers(instance);
    this.consent.show(chat);
  }

  // A chat's record changed: the list, and the header when it is the open chat.
  chatChanged(chatId) {
    this.refreshList();
    if (chatId === state.currentChatId) this.setHeader();
  }

  // Marks a chat this tab just created as the open one.
  showCreated(chatId) {
    state.currentChatId = chatId;
    rememberOpenChat(chatId);
    this.chatList.setActive(chatId);
    this.refreshList();
    this.setHeader();
  }

  // Send works while connecting or reconnecting (the outbox keeps the message); not on a
  // read-only chat, without an assistant, or once the session ended.
  syncSendButton() {
    const closed = Boolean(state.socket) && state.socket.state === "closed";
    $("send").disabled = isReadOnly(currentChat()) || !state.instance || closed;
  }

  syncStopButton() {
    const [taskId] = activeTurnOf(state.currentChatId);
    $("stop").hidden = !taskId;
    $("send").hidden = Boolean(taskId);
  }

  // turn: an entry of state.turns; shown only when its chat is open.
  showTurn(turn, statusName = "streaming") {
    if (turn.chatId !== state.currentChatId) return;
    this.view.upsert({
      message_id: turn.assistantMessageId, role: "assistant", content: turn.content,
      status: statusName, model: turn.model, language: turn.language,
      reason: state.failureReasons.get(turn.assistantMessageId), toolsOffered: turn.toolsOffered,
    });
  }

  // Shows the open chat's stored messages of the branch shown (versions.js: the chosen
  // version at each step, else the newest; messages of other branches leave the view);
  // stops when another chat is opened. An ended answer followed by another answer was
  // retried: only the retry shows. The last answer, when it ended without finishing, gets
  // its Retry button; messages get their version controls.
  async renderStoredMessages(chatId) {
    if (isServerManaged(state.chats.get(chatId))) {
      for (const row of state.plainMessages.get(chatId) || []) {
        if (chatId !== state.currentChatId) return;
        this.showStoredMessage(row, row.content);
      }
      return;
    }
    const { stored, branch } = await storedBranch(chatId);
    const rows = branch.map((entry) => entry.row);
    const shown = new Set(rows.map((row) => row.message_id));
    for (const row of stored) {
      if (!shown.has(row.message_id) && !isStreaming(row.message_id)) this.view.remove(row.message_id);
    }
    for (const row of rows) {
      if (chatId !== state.currentChatId) return;
      let content = null;
      try {
        content = await decryptMessage(row);
      } catch (error) {
        content = "(this message cannot be decrypted)";
      }
      this.showStoredMessage(row, content);
    }
    this.view.order(rows.map((row) => row.message_id));
    const last = rows[rows.length - 1];
    state.branchTips.set(chatId, last && last.role === "assistant" ? last.message_id : null);
    this.showVersions(chatId, branch);
    this.offerRetry(chatId, rows);
  }

  // The version arrows, Edit and Regenerate of the shown branch's messages. While a turn
  // runs in the chat (or a message waits to be accepted) there is no Edit or Regenerate:
  // either would show another branch, hiding the running exchange.
  showVersions(chatId, branch) {
    const busy = activeTurnOf(chatId)[0] !== null || [...state.outbox.values()].some((frame) => frame.chat_id === chatId);
    const editable = !isReadOnly(state.chats.get(chatId)) && !busy;
    for (const [index, entry] of branch.entries()) {
      const last = index === branch.length - 1 && !isStreaming(entry.row.message_id);
      this.view.setControls(entry.row.message_id, versionControls(entry, { last, editable, handlers: this.view.handlers }));
    }
  }

  // The controls of the shown branch again (after a turn ended), without decrypting it anew.
  async refreshVersions(chatId) {
    if (chatId !== state.currentChatId || !state.store || isServerManaged(state.chats.get(chatId))) return;
    this.showVersions(chatId, (await storedBranch(chatId)).branch);
  }

  offerRetry(chatId, rows) {
    const last = rows[rows.length - 1];
    const question = rows[rows.length - 2];
    if (!last || last.role !== "assistant" || !ENDED.includes(last.status) || isStreaming(last.message_id)) return;
    if (!question || question.role !== "user" || isReadOnly(state.chats.get(chatId))) return;
    this.view.showRetry(last.message_id, question.message_id);
  }

  // A running turn's reply is shown from its turn; an unfinished reply without
  // ciphertext (a reply stopped before it was stored) shows with its status only.
  showStoredMessage(row, content) {
    const turnActive = isStreaming(row.message_id);
    if (content === null && !turnActive && row.role === "assistant" && row.status !== "done") {
      this.view.upsert({
        message_id: row.message_id, role: row.role, content: "", status: row.status, model: row.model,
        language: row.language, reason: storedReason(row, state.failureReasons.get(row.message_id)),
      });
      return;
    }
    if (content === null || turnActive) return;
    this.view.upsert({
      message_id: row.message_id, role: row.role, content, status: row.status,
      model: row.model, language: row.language || state.languages.get(row.message_id),
      reason: storedReason(row, state.failureReasons.get(row.message_id)), tools_offered: row.tools_offered,
    });
  }

  newChat() {
    state.currentChatId = null;
    rememberOpenChat(null);
    this.view.clear();
    this.chatList.setActive(null);
    this.setHeader();
    this.syncStopButton();
    this.status("");
    $("composer-input").focus();
  }

  // Asks before deleting a chat: resolves true when the user confirmed.
  confirmDelete(chat) {
    const title = chat && chat.title ? displayLine(chat.title) : "";
    return this.confirm(`Delete “${title || "this chat"}” and all its messages? This cannot be undone.`, "Delete");
  }

  // Asks `text` with a confirm button labelled `action`: resolves true when confirmed.
  async confirm(text, action) {
    const dialog = $("confirm-dialog");
    $("confirm-text").textContent = text;
    $("confirm-yes").textContent = action;
    dialog.returnValue = "";
    dialog.showModal();
    const answer = await new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true }));
    return answer === "confirm";
  }
}
