// The chat list: pinned first, then newest first; virtualised (only the rows in view,
// plus a margin, exist in the DOM) so a thousand chats stay fast.
import { displayLine, el } from "./dom.js";
import { icon } from "./icons.js";
import { isServerManaged } from "./state.js";

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
    this.rows = new Map(); // chat_id -> {key, node} of the rows in the DOM
    this.frame = 0;
    container.addEventListener("scroll", () => this.schedule());
    window.addEventListener("resize", () => this.schedule());
  }

  // chats: [{chat_id, title, pinned, last_message_at, created_at}]: pinned first, then by
  // last activity (a rename or a new title keeps a chat's place).
  setChats(chats) {
    const active = (chat) => String(chat.last_message_at || chat.created_at || "");
    this.items = [...chats].sort((a, b) => {
      if (a.pinned !== b.pinned) return a.pinned ? -1 : 1;
      return active(b).localeCompare(active(a)) || String(b.chat_id).localeCompare(String(a.chat_id));
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

  // A row whose chat shows the same as before stays the same node. A background update (another
  // chat's new title, a sync) then leaves the hovered menu, the focused button and a
  // rename in progress alone instead of rebuilding them under the pointer.
  render() {
    this.spacer.style.height = `${this.items.length * ROW_HEIGHT}px`;
    const top = this.container.scrollTop;
    const height = this.container.clientHeight || 600;
    const first = Math.max(0, Math.floor(top / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(this.items.length, Math.ceil((top + height) / ROW_HEIGHT) + OVERSCAN);
    const focused = document.activeElement && this.spacer.contains(document.activeElement)
      ? document.activeElement.closest(".chat-item")?.dataset.chatId : null;
    const kept = new Map();
    for (let index = first; index < last; index += 1) {
      const chat = this.items[index];
      const key = this.rowKey(chat);
      const previous = this.rows.get(chat.chat_id);
      const row = previous && previous.key === key ? previous.node : this.row(chat);
      row.style.top = `${index * ROW_HEIGHT}px`;
      kept.set(chat.chat_id, { key, node: row });
    }
    const wanted = new Set([...kept.values()].map(({ node }) => node));
    for (const node of [...this.spacer.children]) if (!wanted.has(node)) node.remove();
    // DOM order is reading and tab order: put the rows in list order, moving only the
    // rows that are out of place.
    let cursor = this.spacer.firstChild;
    for (const { node } of kept.values()) {
      if (node === cursor) cursor = cursor.nextSibling;
      else this.spacer.insertBefore(node, cursor);
    }
    this.rows = kept;
    if (focused && !this.spacer.contains(document.activeElement)) {
      const again = this.spacer.querySelector(`.chat-item[data-chat-id="${CSS.escape(focused)}"] .chat-item-open`);
      if (again) again.focus();
    }
  }

  // What a row shows; a row being renamed keeps its field (and the text typed so far)
  // whatever else changes.
  rowKey(chat) {
    if (this.editingId === chat.chat_id) return "editing";
    return JSON.stringify([chat.title === undefined ? null : chat.title || "", Boolean(chat.pinned), chat.chat_id === this.activeId]);
  }

  row(chat) {
    // undefined: not decrypted yet; null: the chat has no title (yet).
    const title = chat.title === undefined ? "…" : displayLine(chat.title || "") || "New chat";
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
    chat.pinned ? el("span", { class: "chat-item-pin", role: "img", "aria-label": "Pinned" }, icon("pin")) : null,
    open,
    el("span", { class: "chat-item-menu" },
      // A name is sealed with the chat's key: a chat without one here (made through the API
      // or a messaging app, or whose key cannot be opened) keeps the name it has.
      isServerManaged(chat) || chat.undecryptable
        ? null
        : el("button", { type: "button", class: "button-quiet button-small", "aria-label": `Rename ${title}`, title: "Rename", onclick: () => this.startRename(chat.chat_id) }, icon("pencil")),
      el("button", { type: "button", class: "button-quiet button-small", "aria-label": `${chat.pinned ? "Unpin" : "Pin"} ${title}`, title: chat.pinned ? "Unpin" : "Pin", onclick: () => this.handlers.onPin(chat.chat_id, !chat.pinned) }, icon(chat.pinned ? "unpin" : "pin")),
      el("button", { type: "button", class: "button-quiet button-small", "aria-label": `Delete ${title}`, title: "Delete", onclick: () => this.handlers.onDelete(chat.chat_id) }, icon("trash"))));
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
      const value = displayLine(input.value);
      // An emptied field is passed on too, so the user hears why the name stays.
      if (save && value !== (chat.title || "")) this.handlers.onRename(chat.chat_id, value);
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
