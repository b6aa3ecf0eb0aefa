// What the user does in the conversation: open a chat, send, retry, stop, delete. Frames
// go out through state.socket (docs/protocol.md §3); chats are made and deleted through
// storage.
import { $ } from "./dom.js";
import { uuidv7 } from "./ids.js";
import { READ_ONLY_HINT } from "./screen.js";
import { activeTurnOf, isReadOnly, state } from "./state.js";

export class ChatActions {
  // screen: a Screen, storage: a ChatStorage, view: a ConversationView, chatList: a ChatList.
  constructor({ screen, storage, view, chatList }) {
    this.screen = screen;
    this.storage = storage;
    this.view = view;
    this.chatList = chatList;
  }

  // Shows a chat: its stored messages (read over REST first when some are missing here)
  // and the reply of a turn still running in it.
  async openChat(chatId) {
    state.currentChatId = chatId;
    $("app").dataset.sidebar = "closed";
    $("menu-toggle").setAttribute("aria-expanded", "false");
    this.view.clear();
    this.chatList.setActive(chatId);
    this.screen.setHeader();
    const record = state.chats.get(chatId);
    const stored = await state.store.messages(chatId);
    if (record && record.message_count > stored.filter((m) => m.encrypted_content).length) {
      await this.storage.fetchChat(chatId);
    }
    await this.screen.renderStoredMessages(chatId);
    for (const turn of state.turns.values()) {
      if (turn.chatId === chatId) {
        this.view.upsert({ message_id: turn.assistantMessageId, role: "assistant", content: turn.content, status: "streaming" });
      }
    }
    this.screen.syncStopButton();
    this.view.scrollToEnd(true);
    $("composer-input").focus();
  }

  // Sends a message in the open chat, creating the chat first on a new one.
  async send(text) {
    const content = text.trim();
    if (!content || !state.socket) return;
    if (!state.instance) { this.screen.status("You are not a member of any assistant yet."); return; }
    if (isReadOnly(state.chats.get(state.currentChatId))) { this.screen.status(READ_ONLY_HINT); return; }
    this.view.clearFollowUps();
    let chatId = state.currentChatId;
    try {
      if (!chatId) {
        chatId = await this.storage.createChat(state.instance);
        this.screen.showCreated(chatId);
      }
    } catch (error) {
      this.screen.status(`Could not start the chat: ${error.message}`);
      return;
    }
    const messageId = uuidv7();
    state.pendingUser.set(messageId, { chatId, content });
    this.view.upsert({ message_id: messageId, role: "user", content });
    this.view.scrollToEnd(true);
    state.socket.send({ type: "message.send", chat_id: chatId, message_id: messageId, content });
    this.screen.status("Sending…");
  }

  retry(userMessageId) {
    const chatId = state.currentChatId;
    if (!chatId) return;
    state.socket.send({ type: "message.retry", chat_id: chatId, message_id: userMessageId });
    this.screen.status("Retrying…");
  }

  stop() {
    const [taskId] = activeTurnOf(state.currentChatId);
    if (taskId) {
      state.socket.send({ type: "task.cancel", task_id: taskId });
      this.screen.status("Stopping…");
    }
  }

  async deleteChat(chatId) {
    if (!(await this.screen.confirmDelete(state.chats.get(chatId)))) return;
    await this.storage.deleteChat(chatId);
  }
}
