// The app's in-memory state: the open IndexedDB store and socket, the chats with their
// metadata decrypted, the running turns and what this tab sent. Plaintext lives only
// here; what is stored (server and IndexedDB) is docs/crypto.md §3 ciphertext.
import { $ } from "./dom.js";

// The page's config (templates/app/app.html, json_script "app-config"):
// {userId, instances: [{slug, name}]}.
export const config = JSON.parse($("app-config").textContent);
export const userId = String(config.userId);

export const state = {
  store: null,
  socket: null,
  chats: new Map(), // chat_id -> record (+ title, icon decrypted)
  currentChatId: null,
  instance: config.instances.length ? config.instances[0].slug : null,
  turns: new Map(), // task_id -> {chatId, userMessageId, assistantMessageId, content, model, language}
  pendingUser: new Map(), // user message_id -> {chatId, content}
  storedUser: new Set(),
  languages: new Map(), // assistant message_id -> language
  lastAssistant: new Map(), // chat_id -> the latest finished assistant message_id
  embedChats: new Map(), // embed_id -> {chatId, messageId} (from skill.status)
};

// The open chat's record, or null on a new (not yet created) chat.
export function currentChat() {
  return state.currentChatId ? state.chats.get(state.currentChatId) : null;
}

// A chat of an instance that no longer counts the user as a member (so at page load, or
// since the server answered "forbidden") can be read but not continued.
export function isReadOnly(chat) {
  return Boolean(chat) && (chat.readOnly || !config.instances.some((i) => i.slug === chat.instance));
}

// The running turn of a chat as [task_id, turn], or [null, null].
export function activeTurnOf(chatId) {
  for (const [taskId, turn] of state.turns) if (turn.chatId === chatId) return [taskId, turn];
  return [null, null];
}

// Whether a message is the reply of a running turn (its text is the turn's, in memory).
export function isStreaming(messageId) {
  return [...state.turns.values()].some((turn) => turn.assistantMessageId === messageId);
}

// The turn a turn frame ({task_id, chat_id, message_id, ...}) belongs to, made on its
// first frame.
export function turnFor(frame) {
  let turn = state.turns.get(frame.task_id);
  if (!turn) {
    turn = {
      chatId: frame.chat_id, userMessageId: frame.message_id_user || null,
      assistantMessageId: frame.assistant_message_id || frame.message_id, content: "", model: "", language: "",
    };
    state.turns.set(frame.task_id, turn);
  }
  return turn;
}

// On lock: closes the socket and the store, forgets the decrypted chats and the turns.
export function clearState() {
  if (state.socket) state.socket.close();
  state.socket = null;
  if (state.store) state.store.close();
  state.store = null;
  state.chats.clear();
  state.turns.clear();
  state.pendingUser.clear();
  state.currentChatId = null;
}
