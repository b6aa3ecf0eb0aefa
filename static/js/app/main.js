// The chat app: wires the key screens, the socket, the IndexedDB store, the chat list
// and the conversation view. Plaintext lives only in this page's memory; what is
// stored (server and IndexedDB) is docs/crypto.md §3 ciphertext under per-chat keys.
import { keyring } from "../crypto.js";
import { $, api, HttpError } from "./dom.js";
import { uuidv7 } from "./ids.js";
import { openStore } from "./store.js";
import { ChatSocket, chatSocketUrl, historyWithinLimit } from "./ws.js";
import { ChatList } from "./chatlist.js";
import { ConversationView } from "./conversation.js";
import { setupKeyScreens, showScreen } from "./keys.js";

const config = JSON.parse($("app-config").textContent);
const userId = String(config.userId);
const REQUEST_TIMEOUT_MS = 20000;

const state = {
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

// --- views ------------------------------------------------------------------------------

const view = new ConversationView({
  scroller: $("messages"),
  list: $("messages-inner"),
  empty: $("empty-state"),
  handlers: {
    onFollowUp: (text) => send(text),
    onRetry: (userMessageId) => retry(userMessageId),
    onCancelTool: (embedId) => state.socket && state.socket.send({ type: "skill.cancel", embed_id: embedId }),
    onConsent: ({ chatId, requestId, allowed }) => state.socket.send({
      type: "memory.consent", chat_id: chatId, request_id: requestId, allowed,
    }),
  },
});

const chatList = new ChatList({
  container: $("chat-list"),
  spacer: $("chat-list-spacer"),
  onOpen: (chatId) => openChat(chatId),
  onRename: (chatId, title) => updateChatMeta(chatId, { title }),
  onPin: (chatId, pinned) => updateChatMeta(chatId, { pinned }),
  onDelete: (chatId) => deleteChat(chatId),
});

function status(text) {
  $("composer-status").textContent = text || "";
}

function refreshList() {
  chatList.setChats([...state.chats.values()]);
}

// Pre-processing names an icon with one lowercase word; show a matching symbol.
const ICONS = {
  chat: "💬", code: "💻", sparkles: "✨", book: "📖", globe: "🌍", music: "🎵", heart: "❤️",
  calculator: "🧮", math: "🧮", calendar: "📅", clock: "🕒", weather: "🌤️", cloud: "☁️",
  travel: "✈️", plane: "✈️", food: "🍽️", money: "💰", finance: "💰", health: "🩺",
  science: "🔬", idea: "💡", lightbulb: "💡", search: "🔎", question: "❓", star: "⭐",
  work: "💼", briefcase: "💼", school: "🎓", education: "🎓", art: "🎨", sport: "⚽",
  game: "🎮", home: "🏠", car: "🚗", phone: "📱", mail: "✉️", shopping: "🛒",
};

function iconSymbol(name) {
  if (!name) return "";
  return ICONS[String(name).toLowerCase().trim()] || "💬";
}

function setHeader() {
  const chat = state.currentChatId ? state.chats.get(state.currentChatId) : null;
  $("chat-title").textContent = chat && chat.title ? chat.title : "New chat";
  $("chat-icon").textContent = chat ? iconSymbol(chat.icon) : "";
  $("chat-icon").title = chat && chat.icon ? chat.icon : "";
  document.title = chat && chat.title ? `${chat.title} · OpenMates` : "OpenMates";
  const picker = $("instance-picker");
  picker.disabled = Boolean(chat);
  if (chat) picker.value = chat.instance;
}

function activeTurnOf(chatId) {
  for (const [taskId, turn] of state.turns) if (turn.chatId === chatId) return [taskId, turn];
  return [null, null];
}

function syncStopButton() {
  const [taskId] = activeTurnOf(state.currentChatId);
  $("stop").hidden = !taskId;
  $("send").hidden = Boolean(taskId);
}

// --- crypto helpers ---------------------------------------------------------------------

async function ensureChatKey(record) {
  if (!keyring.hasChatKey(record.chat_id)) {
    await keyring.loadChatKey(record.chat_id, record.encrypted_chat_key);
  }
}

async function decryptMeta(record, field) {
  const ciphertext = record[`encrypted_${field}`];
  if (!ciphertext) return null;
  try {
    return await keyring.decryptField({
      chatId: record.chat_id, objectId: record.chat_id, field, role: "-",
      version: record.meta_version || 1, ciphertext,
    });
  } catch (error) {
    return null;
  }
}

async function decryptMessage(record) {
  if (!record.encrypted_content) return null;
  return keyring.decryptField({
    chatId: record.chat_id, objectId: record.message_id, field: "content",
    role: record.role, version: record.version, ciphertext: record.encrypted_content,
  });
}

// --- chats ------------------------------------------------------------------------------

async function ingestChat(incoming) {
  return showChat(await state.store.putChat(incoming));
}

// Decrypts a stored chat record's metadata into the in-memory list.
async function showChat(record) {
  const shown = { ...record };
  try {
    await ensureChatKey(record);
    for (const field of META_FIELDS) shown[field] = (await decryptMeta(record, field)) || null;
  } catch (error) {
    shown.title = "(cannot decrypt)";
  }
  state.chats.set(record.chat_id, shown);
  return shown;
}

async function ingestMessages(chatId, messages) {
  for (const message of messages || []) {
    if (message.needs_store && typeof message.content === "string") {
      await storeMessage(chatId, message.message_id, message.role, message.content, message.version || 0, message);
      continue;
    }
    await state.store.putMessage({
      message_id: message.message_id, chat_id: chatId, role: message.role,
      status: message.status, version: message.version,
      encrypted_content: message.encrypted_content, model: message.model || "",
      created_at: message.created_at,
    });
  }
  if (chatId === state.currentChatId) await renderStoredMessages(chatId);
}

async function fetchChat(chatId) {
  try {
    const record = await api("GET", `/api/chats/${chatId}/`);
    await ingestChat(record);
    const messages = await api("GET", `/api/chats/${chatId}/messages/?since=0`);
    await ingestMessages(chatId, messages.messages || messages.results || messages);
    refreshList();
    if (chatId === state.currentChatId) setHeader();
  } catch (error) {
    if (error instanceof HttpError && error.status === 404) forgetChat(chatId);
  }
}

async function forgetChat(chatId) {
  state.chats.delete(chatId);
  await state.store.deleteChat(chatId);
  if (state.currentChatId === chatId) newChat();
  refreshList();
}

async function renderStoredMessages(chatId) {
  const rows = await state.store.messages(chatId);
  for (const row of rows) {
    if (chatId !== state.currentChatId) return;
    let content = null;
    try {
      content = await decryptMessage(row);
    } catch (error) {
      content = "(this message cannot be decrypted)";
    }
    const turnActive = [...state.turns.values()].some((t) => t.assistantMessageId === row.message_id);
    if (content === null && !turnActive && row.role === "assistant" && row.status !== "done") {
      view.upsert({ message_id: row.message_id, role: row.role, content: "", status: row.status, model: row.model });
      continue;
    }
    if (content === null) continue;
    if (turnActive) continue;
    view.upsert({
      message_id: row.message_id, role: row.role, content, status: row.status,
      model: row.model, language: state.languages.get(row.message_id),
    });
  }
}

async function openChat(chatId) {
  state.currentChatId = chatId;
  $("app").dataset.sidebar = "closed";
  $("menu-toggle").setAttribute("aria-expanded", "false");
  view.clear();
  chatList.setActive(chatId);
  setHeader();
  const record = state.chats.get(chatId);
  const stored = await state.store.messages(chatId);
  if (record && record.message_count > stored.filter((m) => m.encrypted_content).length) {
    await fetchChat(chatId);
  }
  await renderStoredMessages(chatId);
  for (const turn of state.turns.values()) {
    if (turn.chatId === chatId) {
      view.upsert({ message_id: turn.assistantMessageId, role: "assistant", content: turn.content, status: "streaming" });
    }
  }
  syncStopButton();
  view.scrollToEnd(true);
  $("composer-input").focus();
}

function newChat() {
  state.currentChatId = null;
  view.clear();
  chatList.setActive(null);
  setHeader();
  syncStopButton();
  status("");
  $("composer-input").focus();
}

function withTimeout(promise) {
  return Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error("timeout")), REQUEST_TIMEOUT_MS))]);
}

async function createChat() {
  const chatId = uuidv7();
  const encryptedChatKey = await keyring.createChatKey(chatId);
  const created = await withTimeout(state.socket.request({
    type: "chat.create", chat_id: chatId, instance: state.instance, encrypted_chat_key: encryptedChatKey,
  }, ["chat.created"]));
  const now = new Date().toISOString();
  await ingestChat({
    chat_id: chatId, instance: state.instance, version: created.version || 1, meta_version: 1,
    encrypted_chat_key: encryptedChatKey, pinned: false, message_count: 0,
    created_at: now, updated_at: now,
  });
  state.currentChatId = chatId;
  chatList.setActive(chatId);
  refreshList();
  setHeader();
  return chatId;
}

const META_FIELDS = ["title", "summary", "tags", "icon"];
const metaQueues = new Map(); // chat_id -> the promise of its last metadata update

// changes: {title?, icon?, summary?, tags?, pinned?}. Updates of one chat run one after
// another. Every metadata field shares the chat's meta_version in its associated data,
// so each update re-encrypts all present fields at the new version.
function updateChatMeta(chatId, changes) {
  const previous = metaQueues.get(chatId) || Promise.resolve();
  const next = previous.catch(() => {}).then(() => applyChatMeta(chatId, changes));
  metaQueues.set(chatId, next);
  return next;
}

async function applyChatMeta(chatId, changes) {
  const chat = state.chats.get(chatId);
  if (!chat) return;
  const base = Math.max(chat.version || 1, chat.meta_version || 1);
  const frame = { type: "chat.update", chat_id: chatId, version: base };
  const local = {};
  const metaChanged = META_FIELDS.some((field) => changes[field] !== undefined);
  if (metaChanged) {
    for (const field of META_FIELDS) {
      const value = changes[field] !== undefined ? changes[field] : chat[field];
      if (value === undefined || value === null) continue;
      const ciphertext = await keyring.encryptField({
        chatId, objectId: chatId, field, role: "-", version: base + 1, plaintext: value,
      });
      frame[`encrypted_${field}`] = ciphertext;
      local[`encrypted_${field}`] = ciphertext;
    }
  }
  if (changes.pinned !== undefined) frame.pinned = changes.pinned;
  try {
    const answer = await withTimeout(state.socket.request(frame, ["chat.updated"]));
    const record = await state.store.patchChat(chatId, {
      ...local,
      ...(changes.pinned !== undefined ? { pinned: changes.pinned } : {}),
      version: answer.version,
      ...(metaChanged ? { meta_version: base + 1 } : {}),
      updated_at: new Date().toISOString(),
    });
    if (record) await ingestChat(record);
    refreshList();
    if (chatId === state.currentChatId) setHeader();
  } catch (error) {
    if (error.code === "conflict") await fetchChat(chatId);
    else status(`Could not update the chat: ${error.message}`);
  }
}

async function deleteChat(chatId) {
  const chat = state.chats.get(chatId);
  const dialog = $("confirm-dialog");
  $("confirm-text").textContent = `Delete “${chat && chat.title ? chat.title : "this chat"}” and all its messages? This cannot be undone.`;
  dialog.returnValue = "";
  dialog.showModal();
  const answer = await new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true }));
  if (answer !== "confirm") return;
  try {
    await withTimeout(state.socket.request({ type: "chat.delete", chat_id: chatId }, ["chat.deleted"]));
  } catch (error) {
    if (error.code !== "not_found") { status(`Could not delete the chat: ${error.message}`); return; }
  }
  await forgetChat(chatId);
}

// --- messages ---------------------------------------------------------------------------

async function storeMessage(chatId, messageId, role, content, baseVersion = 0, meta = {}) {
  const chat = state.chats.get(chatId);
  if (!chat) return;
  await ensureChatKey(chat);
  const encrypted = await keyring.encryptField({
    chatId, objectId: messageId, field: "content", role, version: baseVersion + 1, plaintext: content,
  });
  await state.store.putMessage({
    message_id: messageId, chat_id: chatId, role, status: meta.status || "done",
    version: baseVersion + 1, encrypted_content: encrypted, model: meta.model || "",
    created_at: meta.created_at || new Date().toISOString(),
  });
  state.socket.send({
    type: "message.store", chat_id: chatId, message_id: messageId,
    encrypted_content: encrypted, version: baseVersion,
  });
}

// What a tool card shows of an embed: the tool's result (or error), not its envelope.
function embedDisplay(content) {
  if (typeof content !== "string") return content;
  try {
    const parsed = JSON.parse(content);
    if (parsed && typeof parsed === "object" && ("result" in parsed || "error" in parsed)) {
      if (parsed.error) return String(parsed.error);
      return typeof parsed.result === "string" ? parsed.result : JSON.stringify(parsed.result, null, 2);
    }
  } catch (error) {
    // Not JSON: show it as it is.
  }
  return content;
}

// Embeds are stored like messages: client ciphertext (field "embed", the embed's own key).
async function storeEmbed(chatId, embedId, content) {
  const chat = state.chats.get(chatId);
  if (!chat) return;
  await ensureChatKey(chat);
  const encrypted = await keyring.encryptField({
    chatId, objectId: embedId, field: "embed", role: "-", version: 1, plaintext: content,
  });
  try {
    await api("PUT", `/api/chats/${chatId}/embeds/${embedId}/`, { encrypted_content: encrypted, version: 0 });
  } catch (error) {
    if (!(error instanceof HttpError && error.status === 409)) throw error;
  }
}

async function send(text) {
  const content = text.trim();
  if (!content || !state.socket) return;
  if (!state.instance) { status("You are not a member of any assistant yet."); return; }
  view.clearFollowUps();
  let chatId = state.currentChatId;
  try {
    if (!chatId) chatId = await createChat();
  } catch (error) {
    status(`Could not start the chat: ${error.message}`);
    return;
  }
  const messageId = uuidv7();
  state.pendingUser.set(messageId, { chatId, content });
  view.upsert({ message_id: messageId, role: "user", content });
  view.scrollToEnd(true);
  state.socket.send({ type: "message.send", chat_id: chatId, message_id: messageId, content });
  status("Sending…");
}

function retry(userMessageId) {
  const chatId = state.currentChatId;
  if (!chatId) return;
  state.socket.send({ type: "message.retry", chat_id: chatId, message_id: userMessageId });
  status("Retrying…");
}

function stop() {
  const [taskId] = activeTurnOf(state.currentChatId);
  if (taskId) {
    state.socket.send({ type: "task.cancel", task_id: taskId });
    status("Stopping…");
  }
}

async function storeUserMessage(messageId) {
  const pending = state.pendingUser.get(messageId);
  if (!pending || state.storedUser.has(messageId)) return;
  state.storedUser.add(messageId);
  await storeMessage(pending.chatId, messageId, "user", pending.content, 0, { status: "done" });
}

// --- socket events ----------------------------------------------------------------------

function turnFor(frame) {
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

function showTurn(turn, statusName = "streaming") {
  if (turn.chatId !== state.currentChatId) return;
  view.upsert({
    message_id: turn.assistantMessageId, role: "assistant", content: turn.content,
    status: statusName, model: turn.model, language: turn.language,
  });
}

const handlers = {
  "connected": async () => {
    const known = {};
    for (const record of await state.store.chats()) known[record.chat_id] = record.version;
    $("sync-status").textContent = "Syncing…";
    state.socket.send({ type: "sync.request", known });
  },
  "state": (value) => {
    const badge = $("conn");
    badge.dataset.state = value;
    badge.textContent = { connecting: "Connecting…", open: "Connected", reconnecting: "Reconnecting…", closed: "Offline" }[value];
  },
  "session-ended": () => { window.location.assign("/accounts/login/"); },
  "handshake-failed": async (attempts) => {
    if (attempts < 2) return;
    try {
      await api("GET", "/api/chats/keys/");
    } catch (error) {
      if (error instanceof HttpError && (error.status === 401 || error.status === 403)) {
        window.location.assign("/accounts/login/");
      }
    }
  },
  "sync.phase": async (frame) => {
    for (const chat of frame.chats || []) {
      const { messages, ...meta } = chat;
      await ingestChat(meta);
      if (messages) await ingestMessages(chat.chat_id, messages);
    }
    refreshList();
  },
  "sync.done": async (frame) => {
    $("sync-status").textContent = "";
    await loadRemainingChats(frame.total_chats);
  },
  // Another tab's new chat. Not this tab's own: fetching it here would race the first
  // turn's frames and render its messages with the server's (still pending) state.
  "chat.created": (frame) => {
    if (!frame.answersOwnRequest && !state.chats.has(frame.chat_id)) fetchChat(frame.chat_id);
  },
  "chat.updated": (frame) => {
    const chat = state.chats.get(frame.chat_id);
    if (!chat || (frame.version || 0) > (chat.version || 0)) setTimeout(() => fetchChat(frame.chat_id), 50);
  },
  "chat.deleted": (frame) => forgetChat(frame.chat_id),
  "message.accepted": async (frame) => {
    const turn = turnFor(frame);
    turn.userMessageId = frame.message_id;
    turn.assistantMessageId = frame.assistant_message_id;
    status("");
    showTurn(turn);
    syncStopButton();
    await storeUserMessage(frame.message_id);
  },
  "task.queued": async (frame) => {
    status(`Queued: your message will be answered after the current reply (position ${frame.position}).`);
    await storeUserMessage(frame.message_id);
  },
  "task.active": (frame) => {
    for (const task of frame.tasks || []) {
      const turn = turnFor({ ...task, message_id: task.assistant_message_id });
      turn.userMessageId = task.message_id;
    }
    syncStopButton();
  },
  "preprocess.done": async (frame) => {
    const turn = state.turns.get(frame.task_id);
    if (turn) {
      if (frame.language) { turn.language = frame.language; state.languages.set(turn.assistantMessageId, frame.language); }
      if (frame.model) turn.model = frame.model;
      showTurn(turn);
    }
    const chat = state.chats.get(frame.chat_id);
    if (chat && frame.title && !chat.title) {
      await updateChatMeta(frame.chat_id, { title: frame.title, ...(frame.icon ? { icon: frame.icon } : {}) });
    }
  },
  "stream.delta": (frame) => {
    const turn = turnFor(frame);
    turn.content += frame.delta;
    showTurn(turn);
  },
  "stream.snapshot": (frame) => {
    const turn = turnFor(frame);
    turn.content = frame.content;
    showTurn(turn);
    syncStopButton();
  },
  "skill.status": (frame) => {
    const turn = state.turns.get(frame.task_id);
    if (!turn) return;
    state.embedChats.set(frame.embed_id, { chatId: turn.chatId, messageId: turn.assistantMessageId });
    if (turn.chatId === state.currentChatId) view.toolCard(turn.assistantMessageId, frame);
  },
  "embed.update": async (frame) => {
    const owner = state.embedChats.get(frame.embed_id);
    if (!owner) return;
    if (owner.chatId === state.currentChatId) {
      view.toolCard(owner.messageId, { ...frame, content: embedDisplay(frame.content) });
    }
    if (typeof frame.content === "string" && frame.status !== "processing") {
      await storeEmbed(owner.chatId, frame.embed_id, frame.content);
    }
  },
  "stream.done": async (frame) => {
    const turn = turnFor(frame);
    state.turns.delete(frame.task_id);
    state.lastAssistant.set(turn.chatId, frame.message_id);
    // A reply too long for the frame (content_omitted) is the deltas this tab holds, or
    // when it missed some, the server's copy read over REST (fetchChat stores it).
    const content = frame.content_omitted ? (frame.deltasComplete ? turn.content : null) : frame.content;
    if (content !== null) turn.content = content;
    turn.model = frame.model || turn.model;
    showTurn(turn, frame.status);
    syncStopButton();
    status(frame.status === "done" ? "" : `The reply ended: ${frame.status}.`);
    if (frame.status !== "done" && turn.chatId === state.currentChatId && turn.userMessageId) {
      view.showRetry(turn.assistantMessageId, turn.userMessageId);
    }
    if (content) {
      await storeMessage(turn.chatId, frame.message_id, "assistant", content, 0, { status: frame.status, model: frame.model });
    } else if (content === null) {
      await fetchChat(turn.chatId);
    }
  },
  "postprocess.done": async (frame) => {
    const chat = state.chats.get(frame.chat_id);
    const [, active] = activeTurnOf(frame.chat_id);
    if (frame.chat_id === state.currentChatId && !active && frame.follow_ups && frame.follow_ups.length) {
      const last = state.lastAssistant.get(frame.chat_id);
      if (last) view.showFollowUps(last, frame.follow_ups);
    }
    const changes = {};
    if (frame.title && chat && frame.title !== chat.title) changes.title = frame.title;
    if (frame.summary) changes.summary = frame.summary;
    if (chat && Object.keys(changes).length) await updateChatMeta(frame.chat_id, changes);
  },
  "message.stored": async (frame) => {
    const rows = await state.store.messages(frame.chat_id);
    const known = rows.find((m) => m.message_id === frame.message_id);
    if (known && known.encrypted_content) {
      await state.store.putMessage({ ...known, version: frame.version });
    } else {
      await fetchChat(frame.chat_id);
    }
  },
  "task.cancelled": () => { status("Stopped."); },
  "request_chat_history": async (frame) => {
    const rows = await state.store.messages(frame.chat_id);
    const messages = [];
    for (const row of rows) {
      try {
        const content = await decryptMessage(row);
        if (content !== null) messages.push({ message_id: row.message_id, role: row.role, content });
      } catch (error) {
        // A message this device cannot read is left out; the server asked for what we have.
      }
    }
    state.socket.send({ type: "chat.history", chat_id: frame.chat_id, request_id: frame.request_id, messages: historyWithinLimit(messages) });
  },
  "memory.request": (frame) => {
    if (frame.chat_id !== state.currentChatId) {
      state.socket.send({ type: "memory.consent", chat_id: frame.chat_id, request_id: frame.request_id, allowed: [] });
      return;
    }
    view.consentPrompt({ chatId: frame.chat_id, requestId: frame.request_id, categories: frame.categories || [] });
  },
  "error": async (frame) => {
    if (frame.request_id) return; // answered through the request's promise
    // The canned reply in the user's language is the answer (stream.done status "done").
    if (frame.code === "safety_rejected") return;
    if (frame.code === "conflict" && frame.chat_id) {
      await fetchChat(frame.chat_id);
      return;
    }
    status(frame.message || frame.code);
    if (frame.message_id && frame.chat_id === state.currentChatId && state.pendingUser.has(frame.message_id)) {
      syncStopButton();
    }
  },
};

async function loadRemainingChats(total) {
  if (!total || total <= state.chats.size) return;
  let url = "/api/chats/?page_size=200";
  while (url) {
    let page;
    try {
      page = await api("GET", url);
    } catch (error) {
      return;
    }
    const fresh = (page.results || []).filter((chat) => {
      const known = state.chats.get(chat.chat_id);
      return !known || known.version < chat.version;
    });
    await Promise.all(fresh.map((chat) => ingestChat(chat)));
    refreshList();
    url = page.next ? new URL(page.next, window.location.href).pathname + new URL(page.next, window.location.href).search : null;
  }
}

// --- start, lock ------------------------------------------------------------------------

async function startApp() {
  showScreen("app");
  state.store = await openStore(userId);
  const stored = await state.store.chats();
  // Decrypt in parallel batches: a thousand chats must not wait on each other.
  for (let i = 0; i < stored.length; i += 100) {
    await Promise.all(stored.slice(i, i + 100).map((record) => showChat(record)));
  }
  refreshList();
  const socket = new ChatSocket(chatSocketUrl());
  state.socket = socket;
  for (const [type, handler] of Object.entries(handlers)) {
    socket.addEventListener(type, (event) => {
      Promise.resolve(handler(event.detail)).catch((error) => status(`Error: ${error.message}`));
    });
  }
  socket.connect();
  newChat();
}

function lockApp() {
  if (state.socket) state.socket.close();
  state.socket = null;
  if (state.store) state.store.close();
  state.store = null;
  state.chats.clear();
  state.turns.clear();
  state.pendingUser.clear();
  state.currentChatId = null;
  view.clear();
  chatList.setChats([]);
  keyScreens.lock();
}

const keyScreens = setupKeyScreens({ userId, onUnlocked: () => startApp() });

// --- controls ---------------------------------------------------------------------------

function setupControls() {
  const picker = $("instance-picker");
  for (const instance of config.instances) {
    const option = document.createElement("option");
    option.value = instance.slug;
    option.textContent = instance.name;
    picker.append(option);
  }
  $("instance-picker-row").hidden = config.instances.length < 2;
  picker.addEventListener("change", () => { state.instance = picker.value; });

  const input = $("composer-input");
  const grow = () => {
    input.style.height = "auto";
    input.style.height = `${Math.min(input.scrollHeight, 192)}px`;
  };
  input.addEventListener("input", grow);
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = input.value;
    if (!text.trim()) return;
    input.value = "";
    grow();
    send(text);
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !$("app").hidden && !$("confirm-dialog").open) stop();
  });
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", newChat);
  $("lock").addEventListener("click", lockApp);
  $("menu-toggle").addEventListener("click", () => {
    const open = $("app").dataset.sidebar !== "open";
    $("app").dataset.sidebar = open ? "open" : "closed";
    $("menu-toggle").setAttribute("aria-expanded", String(open));
  });
}

setupControls();
keyScreens.start().catch(() => {
  $("screen-loading").textContent = "Could not reach the server. Reload the page to try again.";
});
