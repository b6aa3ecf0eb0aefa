// What the page shows around the conversation view and the chat list: the header, the
// composer (locked on a read-only chat) and its status line, the stop button, the open
// chat's stored messages, the delete confirmation. Of the app state it changes only
// which chat is open (newChat, showCreated).
import { $ } from "./dom.js";
import { activeTurnOf, currentChat, isReadOnly, isStreaming, state } from "./state.js";
import { decryptMessage } from "./storage.js";

// Pre-processing names an icon with one lowercase word; show a matching symbol.
const ICONS = {
  chat: "💬", code: "💻", sparkles: "✨", book: "📖", globe: "🌍", music: "🎵", heart: "❤️",
  calculator: "🧮", math: "🧮", calendar: "📅", clock: "🕒", weather: "🌤️", cloud: "☁️",
  travel: "✈️", plane: "✈️", food: "🍽️", money: "💰", finance: "💰", health: "🩺",
  science: "🔬", idea: "💡", lightbulb: "💡", search: "🔎", question: "❓", star: "⭐",
  work: "💼", briefcase: "💼", school: "🎓", education: "🎓", art: "🎨", sport: "⚽",
  game: "🎮", home: "🏠", car: "🚗", phone: "📱", mail: "✉️", shopping: "🛒",
};

export function iconSymbol(name) {
  if (!name) return "";
  return ICONS[String(name).toLowerCase().trim()] || "💬";
}

const COMPOSER_HINT = $("composer-input").placeholder;
export const READ_ONLY_HINT = "Read-only: you are no longer a member of this chat's assistant.";

export class Screen {
  // view: a ConversationView, chatList: a ChatList.
  constructor({ view, chatList }) {
    this.view = view;
    this.chatList = chatList;
  }

  status(text) {
    $("composer-status").textContent = text || "";
  }

  refreshList() {
    this.chatList.setChats([...state.chats.values()]);
  }

  setHeader() {
    const chat = currentChat();
    $("chat-title").textContent = chat && chat.title ? chat.title : "New chat";
    $("chat-icon").textContent = chat ? iconSymbol(chat.icon) : "";
    $("chat-icon").title = chat && chat.icon ? chat.icon : "";
    document.title = chat && chat.title ? `${chat.title} · OpenMates` : "OpenMates";
    const picker = $("instance-picker");
    picker.disabled = Boolean(chat);
    if (chat) picker.value = chat.instance;
    const locked = isReadOnly(chat);
    $("composer-input").disabled = locked;
    $("send").disabled = locked;
    $("composer-input").placeholder = locked ? READ_ONLY_HINT : COMPOSER_HINT;
  }

  // A chat's record changed: the list, and the header when it is the open chat.
  chatChanged(chatId) {
    this.refreshList();
    if (chatId === state.currentChatId) this.setHeader();
  }

  // Marks a chat this tab just created as the open one.
  showCreated(chatId) {
    state.currentChatId = chatId;
    this.chatList.setActive(chatId);
    this.refreshList();
    this.setHeader();
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
    });
  }

  // Shows the stored messages of the open chat; stops when another chat is opened.
  async renderStoredMessages(chatId) {
    const rows = await state.store.messages(chatId);
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
  }

  // A running turn's reply is shown from its turn; an unfinished reply without
  // ciphertext (a reply stopped before it was stored) shows with its status only.
  showStoredMessage(row, content) {
    const turnActive = isStreaming(row.message_id);
    if (content === null && !turnActive && row.role === "assistant" && row.status !== "done") {
      this.view.upsert({ message_id: row.message_id, role: row.role, content: "", status: row.status, model: row.model });
      return;
    }
    if (content === null || turnActive) return;
    this.view.upsert({
      message_id: row.message_id, role: row.role, content, status: row.status,
      model: row.model, language: state.languages.get(row.message_id),
    });
  }

  newChat() {
    state.currentChatId = null;
    this.view.clear();
    this.chatList.setActive(null);
    this.setHeader();
    this.syncStopButton();
    this.status("");
    $("composer-input").focus();
  }

  // Asks before deleting a chat: resolves true when the user confirmed.
  async confirmDelete(chat) {
    const dialog = $("confirm-dialog");
    $("confirm-text").textContent = `Delete “${chat && chat.title ? chat.title : "this chat"}” and all its messages? This cannot be undone.`;
    dialog.returnValue = "";
    dialog.showModal();
    const answer = await new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true }));
    return answer === "confirm";
  }
}
