// The app's in-memory state: the open IndexedDB store and socket, the chats with their
// metadata decrypted, the running turns and what this tab sent. Plaintext lives only
// here; what is stored (server and IndexedDB) is docs/crypto.md §3 ciphertext.
import { $ } from "./dom.js";

// The page's config (templates/app/app.html, json_script "app-config"):
// {userId, instances: [{slug, name, modelLabel, toolsAvailable}], modelLabels: {model id: label},
//  fileLimits: {maxFileBytes, maxFilesBytes, maxFiles} (docs/protocol.md §13),
//  sessionTag (the server session's tag a remembered device key is bound to: device.js)}.
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
  outbox: new Map(), // user message_id -> its message.send frame, until the server answers it
  retrying: new Map(), // user message_id -> the stopped or failed answer its retry replaces
  replaced: new Set(), // assistant message_ids replaced by their retry (not shown again)
  failureReasons: new Map(), // assistant message_id -> the text of why it failed
  storedUser: new Set(),
  // Another tab or device of the user may follow a turn this tab did not ask for: the
  // tab that asked stores the reply and the title; a follower stores them only when
  // that has not happened within FOLLOWER_WAIT_MS (the asking tab closed meanwhile).
  askedTurns: new Set(), // task_ids this tab sent the message, retry or regenerate of
  storedWaiters: new Map(), // message_id -> resolvers waiting for its message.stored
  languages: new Map(), // assistant message_id -> language
  lastAssistant: new Map(), // chat_id -> the latest finished assistant message_id
  endedStatus: new Map(), // assistant message_id -> the status its stream.done gave
  embedChats: new Map(), // embed_id -> {chatId, messageId} (from skill.status)
  // Versions (versions.js): chat_id -> Map(parent id, "" for a root -> the child shown);
  // chat_id -> the last answer of the branch shown (the parent of the next question);
  // question id -> the answer its regenerate replaces on the screen.
  chosen: new Map(),
  branchTips: new Map(),
  regenerating: new Map(),
  // Server-managed chats (made through /v1, Telegram, Slack, `manage.py chat`): the server
  // holds their text, sealed; this tab keeps what it read of them here only, never in
  // IndexedDB (whose data is ciphertext: docs/crypto.md §3).
  plainTitles: new Map(), // chat_id -> title
  plainMessages: new Map(), // chat_id -> [{message_id, role, status, model, content}]
  // Files attached to messages (files.js), decrypted, in page memory only:
  // embed_id -> {embed_id, name, mime, size, data (base64), url}; message_id -> [embed_id];
  // message_id -> {chatId, envelopes: [{embed_id, encrypted}]} until the embeds are stored.
  files: new Map(),
  messageFiles: new Map(),
  pendingFiles: new Map(),
};

export const SERVER_MANAGED = "server_managed";

export function isServerManaged(chat) {
  return Boolean(chat) && chat.mode === SERVER_MANAGED;
}

// The open chat's record, or null on a new (not yet created) chat.
export function currentChat() {
  return state.currentChatId ? state.chats.get(state.currentChatId) : null;
}

// A chat of an instance that no longer counts the user as a member (so at page load, or
// since the server answered "forbidden"), a server-managed one (continued where it was
// made), or one whose key this browser cannot open, can be read but not continued here.
export function isReadOnly(chat) {
  return Boolean(chat) && (chat.readOnly || chat.undecryptable || isServerManaged(chat)
    || !config.instances.some((i) => i.slug === chat.instance));
}

// The versions chosen in a chat: Map(parent id, "" for a root -> the child shown).
export function chosenOf(chatId) {
  if (!state.chosen.has(chatId)) state.chosen.set(chatId, new Map());
  return state.chosen.get(chatId);
}

// The running turn of a chat as [task_id, turn], or [null, null].
export function activeTurnOf(chatId) {
  for (const [taskId, turn] of state.turns) if (turn.chatId === chatId) return [taskId, turn];
  return [null, null];
}

const UNFINISHED = ["pending", "streaming"];

// The status of an assistant message row ({message_id, role, status}) as this page knows
// it: an answer never reopens (a retry or regenerate is a new answer), so once its
// stream.done arrived here an older read saying "pending" or "streaming" is out of date.
export function settledStatus(row) {
  if (row.role !== "assistant" || !UNFINISHED.includes(row.status)) return row.status;
  return state.endedStatus.get(row.message_id) || row.status;
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
  state.askedTurns.clear();
  state.endedStatus.clear();
  for (const resolvers of state.storedWaiters.values()) for (const resolve of resolvers) resolve(false);
  state.storedWaiters.clear();
  state.outbox.clear();
  state.retrying.clear();
  state.chosen.clear();
  state.branchTips.clear();
  state.regenerating.clear();
  state.files.clear();
  state.messageFiles.clear();
  state.pendingFiles.clear();
  state.currentChatId = null;
}

// How long a tab following a turn it did not ask for waits for the asking tab to store
// the reply (message.stored) or the title before doing it itself.
export const FOLLOWER_WAIT_MS = 5000;

// Resolves true when a message.stored for `messageId` arrives within `ms`, else false.
export function storedWithin(messageId, ms) {
  if (recentlyStored.has(messageId)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const resolvers = state.storedWaiters.get(messageId) || [];
    state.storedWaiters.set(messageId, resolvers);
    const timer = setTimeout(() => settle(false), ms);
    function settle(stored) {
      clearTimeout(timer);
      const left = (state.storedWaiters.get(messageId) || []).filter((r) => r !== settle);
      if (left.length) state.storedWaiters.set(messageId, left);
      else state.storedWaiters.delete(messageId);
      resolve(stored);
    }
    resolvers.push(settle);
  });
}

// A message.stored arrived for `messageId`: its waiters learn it was stored.
export function noteStored(messageId) {
  recentlyStored.add(messageId);
  if (recentlyStored.size > 1000) recentlyStored.delete(recentlyStored.values().next().value);
  for (const settle of state.storedWaiters.get(messageId) || []) settle(true);
}

// The message.stored ids of late, in arrival order (a follower may see one before the
// stream.done it waits for).
const recentlyStored = new Set();

// The chat open in this tab, kept in the tab's sessionStorage (its id only) so that a
// reload opens it again; null: a new chat. Storage the browser refuses is no error.
const OPEN_CHAT_KEY = `openmates-open-chat-${userId}`;

export function rememberOpenChat(chatId) {
  try {
    if (chatId) sessionStorage.setItem(OPEN_CHAT_KEY, chatId);
    else sessionStorage.removeItem(OPEN_CHAT_KEY);
  } catch {
    // Private modes may refuse storage: the reload then starts a new chat.
  }
}

export function rememberedOpenChat() {
  try {
    return sessionStorage.getItem(OPEN_CHAT_KEY);
  } catch {
    return null;
  }
}
