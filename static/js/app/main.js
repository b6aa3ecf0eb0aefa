// The chat app: wires the key screens, the socket, the stored chats and messages
// (storage.js), the chat list and the conversation view (screen.js); the state they
// share is state.js.
import { $, api, HttpError } from "./dom.js";
import { uuidv7 } from "./ids.js";
import { openStore } from "./store.js";
import { ChatSocket, chatSocketUrl } from "./ws.js";
import { ChatList } from "./chatlist.js";
import { ConversationView } from "./conversation.js";
import { setupKeyScreens, showScreen } from "./keys.js";
import { READ_ONLY_HINT, Screen } from "./screen.js";
import { activeTurnOf, clearState, config, isReadOnly, state, turnFor, userId } from "./state.js";
import { ChatStorage } from "./storage.js";

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
  onRename: (chatId, title) => storage.updateChatMeta(chatId, { title }),
  onPin: (chatId, pinned) => storage.updateChatMeta(chatId, { pinned }),
  onDelete: (chatId) => deleteChat(chatId),
});

const screen = new Screen({ view, chatList });
const storage = new ChatStorage(screen);

// --- actions ----------------------------------------------------------------------------

// Shows a chat: its stored messages (read over REST first when some are missing here)
// and the reply of a turn still running in it.
async function openChat(chatId) {
  state.currentChatId = chatId;
  $("app").dataset.sidebar = "closed";
  $("menu-toggle").setAttribute("aria-expanded", "false");
  view.clear();
  chatList.setActive(chatId);
  screen.setHeader();
  const record = state.chats.get(chatId);
  const stored = await state.store.messages(chatId);
  if (record && record.message_count > stored.filter((m) => m.encrypted_content).length) {
    await storage.fetchChat(chatId);
  }
  await screen.renderStoredMessages(chatId);
  for (const turn of state.turns.values()) {
    if (turn.chatId === chatId) {
      view.upsert({ message_id: turn.assistantMessageId, role: "assistant", content: turn.content, status: "streaming" });
    }
  }
  screen.syncStopButton();
  view.scrollToEnd(true);
  $("composer-input").focus();
}

// Sends a message in the open chat, creating the chat first on a new one.
async function send(text) {
  const content = text.trim();
  if (!content || !state.socket) return;
  if (!state.instance) { screen.status("You are not a member of any assistant yet."); return; }
  if (isReadOnly(state.chats.get(state.currentChatId))) { screen.status(READ_ONLY_HINT); return; }
  view.clearFollowUps();
  let chatId = state.currentChatId;
  try {
    if (!chatId) {
      chatId = await storage.createChat(state.instance);
      screen.showCreated(chatId);
    }
  } catch (error) {
    screen.status(`Could not start the chat: ${error.message}`);
    return;
  }
  const messageId = uuidv7();
  state.pendingUser.set(messageId, { chatId, content });
  view.upsert({ message_id: messageId, role: "user", content });
  view.scrollToEnd(true);
  state.socket.send({ type: "message.send", chat_id: chatId, message_id: messageId, content });
  screen.status("Sending…");
}

function retry(userMessageId) {
  const chatId = state.currentChatId;
  if (!chatId) return;
  state.socket.send({ type: "message.retry", chat_id: chatId, message_id: userMessageId });
  screen.status("Retrying…");
}

function stop() {
  const [taskId] = activeTurnOf(state.currentChatId);
  if (taskId) {
    state.socket.send({ type: "task.cancel", task_id: taskId });
    screen.status("Stopping…");
  }
}

async function deleteChat(chatId) {
  if (!(await screen.confirmDelete(state.chats.get(chatId)))) return;
  await storage.deleteChat(chatId);
}

// --- socket events ----------------------------------------------------------------------

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
      await storage.ingestChat(meta);
      if (messages) await storage.ingestMessages(chat.chat_id, messages);
    }
    screen.refreshList();
  },
  "sync.done": async (frame) => {
    $("sync-status").textContent = "";
    await storage.loadRemainingChats(frame.total_chats);
  },
  // Another tab's new chat. Not this tab's own: fetching it here would race the first
  // turn's frames and render its messages with the server's (still pending) state.
  "chat.created": (frame) => {
    if (!frame.answersOwnRequest && !state.chats.has(frame.chat_id)) storage.fetchChat(frame.chat_id);
  },
  "chat.updated": (frame) => {
    const chat = state.chats.get(frame.chat_id);
    if (!chat || (frame.version || 0) > (chat.version || 0)) setTimeout(() => storage.fetchChat(frame.chat_id), 50);
  },
  "chat.deleted": (frame) => storage.forgetChat(frame.chat_id),
  "message.accepted": async (frame) => {
    const turn = turnFor(frame);
    turn.userMessageId = frame.message_id;
    turn.assistantMessageId = frame.assistant_message_id;
    screen.status("");
    screen.showTurn(turn);
    screen.syncStopButton();
    await storage.storeUserMessage(frame.message_id);
  },
  "task.queued": async (frame) => {
    screen.status(`Queued: your message will be answered after the current reply (position ${frame.position}).`);
    await storage.storeUserMessage(frame.message_id);
  },
  "task.active": (frame) => {
    for (const task of frame.tasks || []) {
      const turn = turnFor({ ...task, message_id: task.assistant_message_id });
      turn.userMessageId = task.message_id;
    }
    screen.syncStopButton();
  },
  "preprocess.done": async (frame) => {
    const turn = state.turns.get(frame.task_id);
    if (turn) {
      if (frame.language) { turn.language = frame.language; state.languages.set(turn.assistantMessageId, frame.language); }
      if (frame.model) turn.model = frame.model;
      screen.showTurn(turn);
    }
    const chat = state.chats.get(frame.chat_id);
    if (chat && frame.title && !chat.title) {
      await storage.updateChatMeta(frame.chat_id, { title: frame.title, ...(frame.icon ? { icon: frame.icon } : {}) });
    }
  },
  "stream.delta": (frame) => {
    const turn = turnFor(frame);
    turn.content += frame.delta;
    screen.showTurn(turn);
  },
  "stream.snapshot": (frame) => {
    const turn = turnFor(frame);
    turn.content = frame.content;
    screen.showTurn(turn);
    screen.syncStopButton();
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
      await storage.storeEmbed(owner.chatId, frame.embed_id, frame.content);
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
    screen.showTurn(turn, frame.status);
    screen.syncStopButton();
    screen.status(frame.status === "done" ? "" : `The reply ended: ${frame.status}.`);
    if (frame.status !== "done" && turn.chatId === state.currentChatId && turn.userMessageId) {
      view.showRetry(turn.assistantMessageId, turn.userMessageId);
    }
    if (content) {
      await storage.storeMessage(turn.chatId, frame.message_id, "assistant", content, 0, { status: frame.status, model: frame.model });
    } else if (content === null) {
      await storage.fetchChat(turn.chatId);
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
    if (chat && Object.keys(changes).length) await storage.updateChatMeta(frame.chat_id, changes);
  },
  "message.stored": async (frame) => {
    const rows = await state.store.messages(frame.chat_id);
    const known = rows.find((m) => m.message_id === frame.message_id);
    if (known && known.encrypted_content) {
      await state.store.putMessage({ ...known, version: frame.version });
    } else {
      await storage.fetchChat(frame.chat_id);
    }
  },
  "task.cancelled": () => { screen.status("Stopped."); },
  "request_chat_history": async (frame) => {
    const messages = await storage.readableHistory(frame.chat_id);
    state.socket.send({ type: "chat.history", chat_id: frame.chat_id, request_id: frame.request_id, messages });
  },
  "memory.request": (frame) => {
    if (frame.chat_id !== state.currentChatId) {
      state.socket.send({ type: "memory.consent", chat_id: frame.chat_id, request_id: frame.request_id, allowed: [] });
      return;
    }
    view.consentPrompt({ chatId: frame.chat_id, requestId: frame.request_id, categories: frame.categories || [] });
  },
  "error": async (frame) => {
    if (frame.code === "forbidden" && state.chats.has(frame.chat_id)) {
      state.chats.get(frame.chat_id).readOnly = true;
      if (frame.chat_id === state.currentChatId) screen.setHeader();
    }
    if (frame.request_id) return; // answered through the request's promise
    // The canned reply in the user's language is the answer (stream.done status "done").
    if (frame.code === "safety_rejected") return;
    if (frame.code === "conflict" && frame.chat_id) {
      await storage.fetchChat(frame.chat_id);
      return;
    }
    screen.status(frame.message || frame.code);
    if (frame.message_id && frame.chat_id === state.currentChatId && state.pendingUser.has(frame.message_id)) {
      screen.syncStopButton();
    }
  },
};

// --- start, lock ------------------------------------------------------------------------

async function startApp() {
  showScreen("app");
  state.store = await openStore(userId);
  const stored = await state.store.chats();
  // Decrypt in parallel batches: a thousand chats must not wait on each other.
  for (let i = 0; i < stored.length; i += 100) {
    await Promise.all(stored.slice(i, i + 100).map((record) => storage.showChat(record)));
  }
  screen.refreshList();
  const socket = new ChatSocket(chatSocketUrl());
  state.socket = socket;
  for (const [type, handler] of Object.entries(handlers)) {
    socket.addEventListener(type, (event) => {
      Promise.resolve(handler(event.detail)).catch((error) => screen.status(`Error: ${error.message}`));
    });
  }
  socket.connect();
  screen.newChat();
}

function lockApp() {
  clearState();
  view.clear();
  chatList.setChats([]);
  keyScreens.lock();
}

const keyScreens = setupKeyScreens({ userId, onUnlocked: () => startApp() });

// --- controls ---------------------------------------------------------------------------

function setupInstancePicker() {
  const picker = $("instance-picker");
  for (const instance of config.instances) {
    const option = document.createElement("option");
    option.value = instance.slug;
    option.textContent = instance.name;
    picker.append(option);
  }
  $("instance-picker-row").hidden = config.instances.length < 2;
  picker.addEventListener("change", () => { state.instance = picker.value; });
}

// The composer grows with its text; Enter sends, Shift+Enter starts a new line.
function setupComposer() {
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
}

function setupControls() {
  setupInstancePicker();
  setupComposer();
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !$("app").hidden && !$("confirm-dialog").open) stop();
  });
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", () => screen.newChat());
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
