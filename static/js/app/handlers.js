// The handlers of the socket's events: one small function per server frame type
// (docs/protocol.md §4) and per ChatSocket event (ws.js: connected, state,
// session-ended, handshake-failed). Each is called as handler(app, detail) with
// app = {screen, storage, view} (see main.js); `frameHandlers` maps event type to handler.
import { $, api, HttpError } from "./dom.js";
import { activeTurnOf, state, turnFor } from "./state.js";

const LOGIN_URL = "/accounts/login/";
const CONNECTION_LABELS = { connecting: "Connecting…", open: "Connected", reconnecting: "Reconnecting…", closed: "Offline" };

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

// --- connection ---------------------------------------------------------------------------

async function requestSync() {
  const known = {};
  for (const record of await state.store.chats()) known[record.chat_id] = record.version;
  $("sync-status").textContent = "Syncing…";
  state.socket.send({ type: "sync.request", known });
}

function showConnection(app, value) {
  const badge = $("conn");
  badge.dataset.state = value;
  badge.textContent = CONNECTION_LABELS[value];
}

function signIn() {
  window.location.assign(LOGIN_URL);
}

// A socket that keeps failing its handshake may belong to a signed-out session: REST tells.
async function checkSignedIn(app, attempts) {
  if (attempts < 2) return;
  try {
    await api("GET", "/api/chats/keys/");
  } catch (error) {
    if (error instanceof HttpError && (error.status === 401 || error.status === 403)) signIn();
  }
}

// --- sync and chats -------------------------------------------------------------------------

async function ingestSyncPhase({ screen, storage }, frame) {
  for (const chat of frame.chats || []) {
    const { messages, ...meta } = chat;
    await storage.ingestChat(meta);
    if (messages) await storage.ingestMessages(chat.chat_id, messages);
  }
  screen.refreshList();
}

async function finishSync({ storage }, frame) {
  $("sync-status").textContent = "";
  await storage.loadRemainingChats(frame.total_chats);
}

// Another tab's new chat. Not this tab's own: fetching it here would race the first
// turn's frames and render its messages with the server's (still pending) state.
function fetchCreatedChat({ storage }, frame) {
  if (!frame.answersOwnRequest && !state.chats.has(frame.chat_id)) storage.fetchChat(frame.chat_id);
}

function fetchUpdatedChat({ storage }, frame) {
  const chat = state.chats.get(frame.chat_id);
  if (!chat || (frame.version || 0) > (chat.version || 0)) setTimeout(() => storage.fetchChat(frame.chat_id), 50);
}

function forgetDeletedChat({ storage }, frame) {
  return storage.forgetChat(frame.chat_id);
}

// --- turns ----------------------------------------------------------------------------------

async function startTurn({ screen, storage }, frame) {
  const turn = turnFor(frame);
  turn.userMessageId = frame.message_id;
  turn.assistantMessageId = frame.assistant_message_id;
  screen.status("");
  screen.showTurn(turn);
  screen.syncStopButton();
  await storage.storeUserMessage(frame.message_id);
}

async function noteQueued({ screen, storage }, frame) {
  screen.status(`Queued: your message will be answered after the current reply (position ${frame.position}).`);
  await storage.storeUserMessage(frame.message_id);
}

function trackActiveTurns({ screen }, frame) {
  for (const task of frame.tasks || []) {
    const turn = turnFor({ ...task, message_id: task.assistant_message_id });
    turn.userMessageId = task.message_id;
  }
  screen.syncStopButton();
}

// The turn's language and model; a chat without a title gets the proposed one.
async function applyPreprocess({ screen, storage }, frame) {
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
}

function appendDelta({ screen }, frame) {
  const turn = turnFor(frame);
  turn.content += frame.delta;
  screen.showTurn(turn);
}

function applySnapshot({ screen }, frame) {
  const turn = turnFor(frame);
  turn.content = frame.content;
  screen.showTurn(turn);
  screen.syncStopButton();
}

function showToolStatus({ view }, frame) {
  const turn = state.turns.get(frame.task_id);
  if (!turn) return;
  state.embedChats.set(frame.embed_id, { chatId: turn.chatId, messageId: turn.assistantMessageId });
  if (turn.chatId === state.currentChatId) view.toolCard(turn.assistantMessageId, frame);
}

// A finished tool's embed is shown and stored (the status "processing" is not final).
async function applyEmbed({ storage, view }, frame) {
  const owner = state.embedChats.get(frame.embed_id);
  if (!owner) return;
  if (owner.chatId === state.currentChatId) {
    view.toolCard(owner.messageId, { ...frame, content: embedDisplay(frame.content) });
  }
  if (typeof frame.content === "string" && frame.status !== "processing") {
    await storage.storeEmbed(owner.chatId, frame.embed_id, frame.content);
  }
}

async function finishTurn({ screen, storage, view }, frame) {
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
}

// Follow-ups under the open chat's last reply; a new title or a summary is stored.
async function applyPostprocess({ storage, view }, frame) {
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
}

// The server took a message.store: the stored copy gets the server's version; a message
// this tab does not hold is read over REST.
async function confirmStored({ storage }, frame) {
  const rows = await state.store.messages(frame.chat_id);
  const known = rows.find((m) => m.message_id === frame.message_id);
  if (known && known.encrypted_content) {
    await state.store.putMessage({ ...known, version: frame.version });
  } else {
    await storage.fetchChat(frame.chat_id);
  }
}

function noteCancelled({ screen }) {
  screen.status("Stopped.");
}

async function sendHistory({ storage }, frame) {
  const messages = await storage.readableHistory(frame.chat_id);
  state.socket.send({ type: "chat.history", chat_id: frame.chat_id, request_id: frame.request_id, messages });
}

// Only the open chat asks the user; a request about another chat is declined.
function askConsent({ view }, frame) {
  if (frame.chat_id !== state.currentChatId) {
    state.socket.send({ type: "memory.consent", chat_id: frame.chat_id, request_id: frame.request_id, allowed: [] });
    return;
  }
  view.consentPrompt({ chatId: frame.chat_id, requestId: frame.request_id, categories: frame.categories || [] });
}

async function showError({ screen, storage }, frame) {
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
}

export const frameHandlers = {
  "connected": requestSync,
  "state": showConnection,
  "session-ended": signIn,
  "handshake-failed": checkSignedIn,
  "sync.phase": ingestSyncPhase,
  "sync.done": finishSync,
  "chat.created": fetchCreatedChat,
  "chat.updated": fetchUpdatedChat,
  "chat.deleted": forgetDeletedChat,
  "message.accepted": startTurn,
  "task.queued": noteQueued,
  "task.active": trackActiveTurns,
  "preprocess.done": applyPreprocess,
  "stream.delta": appendDelta,
  "stream.snapshot": applySnapshot,
  "skill.status": showToolStatus,
  "embed.update": applyEmbed,
  "stream.done": finishTurn,
  "postprocess.done": applyPostprocess,
  "message.stored": confirmStored,
  "task.cancelled": noteCancelled,
  "request_chat_history": sendHistory,
  "memory.request": askConsent,
  "error": showError,
};
