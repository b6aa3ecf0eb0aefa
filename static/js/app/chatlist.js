// The chat list: pinned first, then newest first; virtualised (only the rows in view,
// plus a margin, exist in the DOM) so a thousand chats stay fast.
import { el } from "./dom.js";

const ROW_HEIGHT = 44;
const OVERSCAN = 8;

export class ChatList {
  constructor({ container, spacer, onOpen, onRename, onPin, onDelete }) {
    this.container = container;
    this.spacer = spacer;
    this.handlers = { onOpen, onRename, onPin, onDelete };
    this.items = [];
    this.activeId = null;
    this.editingId = null;
    this.frame = 0;
    container.addEventListener("scroll", () => this.schedule());
    window.addEventListener("resize", () => this.schedule());
  }

  // chats: [{chat_id, title, pinned, updated_at}]
  setChats(chats) {
    this.items = [...chats].sort((a, b) => {
      if (a.pinned !== b.pinned) return a.pinned ? -1 : 1;
      return String(b.updated_at || "").localeCompare(String(a.updated_at || ""))
        || String(b.chat_id).localeCompare(String(a.chat_id));
    });
    this.schedule();
  }

  setActive(chatId) {
    this.activeId = chatId;
    this.schedule();
  }

  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.render();
    });
  }

  render() {
    this.spacer.style.height = `${this.items.length * ROW_HEIGHT}px`;
    const top = this.container.scrollTop;
    const height = this.container.clientHeight || 600;
    const first = Math.max(0, Math.floor(top / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(this.items.length, Math.ceil((top + height) / ROW_HEIGHT) + OVERSCAN);
    const focused = document.activeElement && this.spacer.contains(document.activeElement)
      ? document.activeElement.closest(".chat-item")?.dataset.chatId : null;
    const rows = [];
    for (let index = first; index < last; index += 1) rows.push(this.row(this.items[index], index));
    this.spacer.replaceChildren(...rows);
    if (focused) {
      const again = this.spacer.querySelector(`.chat-item[data-chat-id="${CSS.escape(focused)}"] .chat-item-open`);
      if (again) again.focus();
    }
  }

  row(chat, index) {
    // undefined: not decrypted yet; null: the chat has no title (yet).
    const title = chat.title === undefined ? "…" : chat.title || "New chat";
    const open = this.editingId === chat.chat_id
      ? this.renameInput(chat)
      : el("button", {
        type: "button", class: "chat-item-open", title,
        onclick: () => this.handlers.onOpen(chat.chat_id),
      }, title);
    const row = el("div", {
      class: "chat-item", role: "listitem",
      "aria-current": chat.chat_id === this.activeId ? "true" : "false",
      dataset: { chatId: chat.chat_id },
    },
    chat.pinned ? el("span", { class: "chat-item-pin", "aria-label": "Pinned" }, "📌") : null,
    open,
    el("span", { class: "chat-item-menu" },
      el("button", { type: "button", class: "button-quiet button-small", "aria-label": `Rename ${title}`, title: "Rename", onclick: () => this.startRename(chat.chat_id) }, "✎"),
      el("button", { type: "button", class: "button-quiet button-small", "aria-label": `${chat.pinned ? "Unpin" : "Pin"} ${title}`, title: chat.pinned ? "Unpin" : "Pin", onclick: () => this.handlers.onPin(chat.chat_id, !chat.pinned) }, chat.pinned ? "⊘" : "⇡"),
      el("button", { type: "button", class: "button-quiet button-small", "aria-label": `Delete ${title}`, title: "Delete", onclick: () => this.handlers.onDelete(chat.chat_id) }, "🗑")));
    row.style.top = `${index * ROW_HEIGHT}px`;
    return row;
  }

  startRename(chatId) {
    this.editingId = chatId;
    this.render();
    const input = this.spacer.querySelector(".chat-rename");
    if (input) { input.focus(); input.select(); }
  }

  renameInput(chat) {
    const input = el("input", {
      type: "text", class: "chat-rename", value: chat.title || "", "aria-label": "New chat title", maxlength: 200,
    });
    const finish = (save) => {
      if (this.editingId !== chat.chat_id) return;
      this.editingId = null;
      const value = input.value.trim();
      if (save && value && value !== chat.title) this.handlers.onRename(chat.chat_id, value);
      this.render();
    };
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") { event.preventDefault(); finish(true); }
      if (event.key === "Escape") { event.preventDefault(); finish(false); }
    });
    input.addEventListener("blur", () => finish(true));
    return input;
  }
}
