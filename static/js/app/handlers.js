// The handlers of the socket's events: one small function per server frame type
// (docs/protocol.md §4) and per ChatSocket event (ws.js: connected, state,
// session-ended, handshake-failed). Each is called as handler(app, detail) with
// app = {screen, storage, view, consent, actions} (see main.js); `frameHandlers` maps event type to handler.
import { $, api, HttpError } from "./dom.js";
import { consentOf } from "./consent.js";
import { storeFiles } from "./files.js";
import { reasonText } from "./reasons.js";
import { FOLLOWER_WAIT_MS, activeTurnOf, chosenOf, config, isServerManaged, noteStored, settledStatus, state, storedWithin, turnFor } from "./state.js";

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

// On every (re)connect: the outbox's messages go out, then the sync catches up the gap.
async function reconnected({ actions }) {
  actions.flushOutbox();
  await requestSync();
}

async function requestSync() {
  const known = {};
  for (const record of await state.store.chats()) {
    // A server-managed chat's title is kept in memory only: one this page was not told yet
    // is asked for again (version 0 reads as changed, docs/protocol.md §4).
    const untitled = isServerManaged(record) && !state.plainTitles.has(record.chat_id);
    known[record.chat_id] = untitled ? 0 : record.version;
  }
  $("sync-status").textContent = "Syncing…";
  state.socket.send({ type: "sync.request", known });
}

function showConnection({ screen }, value) {
  const badge = $("conn");
  badge.dataset.state = value;
  badge.textContent = CONNECTION_LABELS[value];
  screen.syncSendButton();
}

// The server answered a message of the outbox: it leaves the outbox, shown as sent.
function messageAnswered({ view }, messageId) {
  if (!state.outbox.delete(messageId)) return;
  state.store.deleteOutbox(messageId).catch(() => {});
  view.setStatus(messageId, "done");
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
  // The open chat's header too: after a reload a server-managed chat's title arrives here.
  if ((frame.chats || []).some((chat) => chat.chat_id === state.currentChatId)) screen.setHeader();
}

async function finishSync({ storage }, frame) {
  $("sync-status").textContent = "";
  await dropDeletedChats(storage, frame.deleted || []);
  await storage.loadRemainingChats(frame.total_chats);
}

// Chats this browser held that were deleted while its socket was down (sync.done's
// `deleted`, docs/protocol.md §4); not one started offline whose chat.create still waits
// in the outbox (the server does not have it yet).
async function dropDeletedChats(storage, deleted) {
  if (!deleted.length) return;
  const waiting = new Set((await state.store.outbox()).filter((r) => r.kind === "chat").map((r) => r.chat_id));
  for (const chatId of deleted) {
    if (!waiting.has(chatId)) await storage.forgetChat(chatId, { elsewhere: true });
  }
}

// Another tab's new chat. Not this tab's own: fetching it here would race the first
// turn's frames and render its messages with the server's (still pending) state.
function fetchCreatedChat({ storage }, frame) {
  if (!frame.answersOwnRequest && !state.chats.has(frame.chat_id)) storage.fetchChat(frame.chat_id);
}

// Another tab's or device's change of a chat. Not this tab's own (storage.applyChatMeta
// takes its answer): a read then would only race the turn that asked for the change.
function fetchUpdatedChat({ storage }, frame) {
  if (frame.answersOwnRequest) return;
  const chat = state.chats.get(frame.chat_id);
  if (!chat || (frame.version || 0) > (chat.version || 0)) setTimeout(() => storage.fetchChat(frame.chat_id), 50);
}

function forgetDeletedChat({ storage }, frame) {
  return storage.forgetChat(frame.chat_id, { elsewhere: !frame.answersOwnRequest });
}

// --- turns ----------------------------------------------------------------------------------

async function startTurn({ screen, storage, view }, frame) {
  if (state.pendingUser.has(frame.message_id) || state.retrying.has(frame.message_id) || state.regenerating.has(frame.message_id)) {
    state.askedTurns.add(frame.task_id);
  }
  messageAnswered({ view }, frame.message_id);
  // A retry's answer takes the place of the answer it retries.
  const replaced = state.retrying.get(frame.message_id);
  if (replaced && replaced !== frame.assistant_message_id) {
    state.retrying.delete(frame.message_id);
    state.replaced.add(replaced);
    view.remove(replaced);
  }
  // A regenerated answer is a new version shown in the place of the one it answers again.
  const earlier = state.regenerating.get(frame.message_id);
  if (earlier && earlier !== frame.assistant_message_id) {
    state.regenerating.delete(frame.message_id);
    chosenOf(frame.chat_id).set(frame.message_id, frame.assistant_message_id);
    view.remove(earlier);
  }
  if (!state.askedTurns.has(frame.task_id)) await replaceEarlierAnswers(view, frame);
  const turn = turnFor(frame);
  turn.userMessageId = frame.message_id;
  turn.assistantMessageId = frame.assistant_message_id;
  state.branchTips.set(frame.chat_id, frame.assistant_message_id);
  if (frame.chat_id === state.currentChatId) view.dropTurnControls();
  screen.status("");
  screen.showTurn(turn);
  screen.syncStopButton();
  await storage.storeUserMessage(frame.message_id);
  await storeFiles(frame.message_id);
}

// Another tab or device retried or regenerated this question: its new answer takes the
// place of the ones shown, as in the tab that asked (a retried answer, one that ended
// without finishing, is replaced; a done one stays a version behind the new one).
async function replaceEarlierAnswers(view, frame) {
  if (!state.store) return;
  const rows = await state.store.messages(frame.chat_id);
  for (const row of rows) {
    if (row.role !== "assistant" || row.parent_id !== frame.message_id || row.message_id === frame.assistant_message_id) continue;
    if (settledStatus(row) === "done") chosenOf(frame.chat_id).set(frame.message_id, frame.assistant_message_id);
    else state.replaced.add(row.message_id);
    view.remove(row.message_id);
  }
}

async function noteQueued({ screen, storage, view }, frame) {
  messageAnswered({ view }, frame.message_id);
  screen.status(`Queued: your message will be answered after the current reply (position ${frame.position}).`);
  await storage.storeUserMessage(frame.message_id);
  await storeFiles(frame.message_id);
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
    // The tools offered to the model and why (a title's own frame carries no reasons);
    // not on an instance whose model cannot call tools (its composer says so).
    const chat = state.chats.get(frame.chat_id);
    const instance = config.instances.find((i) => i.slug === (chat ? chat.instance : state.instance));
    if (frame.tool_reasons && (!instance || instance.toolsAvailable !== false)) {
      turn.toolsOffered = frame.tools.map((name) => ({ name, reason: frame.tool_reasons[name] || "" }));
    }
    screen.showTurn(turn);
  }
  if (!frame.title || !state.chats.get(frame.chat_id) || state.chats.get(frame.chat_id).title) return;
  // A follower leaves the title to the tab that asked, unless that one is gone.
  if (!state.askedTurns.has(frame.task_id)) await sleep(FOLLOWER_WAIT_MS);
  const chat = state.chats.get(frame.chat_id);
  if (chat && !chat.title) {
    await storage.updateChatMeta(frame.chat_id, { title: frame.title, ...(frame.icon ? { icon: frame.icon } : {}) });
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
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
  // A failed tool (reason tool_failed) shows its error, else the reason's text.
  const shown = frame.status === "error" && frame.reason ? { ...frame, error: frame.error || reasonText(frame.reason, "") } : frame;
  if (turn.chatId === state.currentChatId) view.toolCard(turn.assistantMessageId, shown);
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
  state.endedStatus.set(frame.message_id, frame.status);
  state.lastAssistant.set(turn.chatId, frame.message_id);
  // A reply too long for the frame (content_omitted) is the deltas this tab holds, or
  // when it missed some, the server's copy read over REST (fetchChat stores it).
  const content = frame.content_omitted ? (frame.deltasComplete ? turn.content : null) : frame.content;
  if (content !== null) turn.content = content;
  turn.model = frame.model || turn.model;
  if (frame.language && !turn.language) {
    turn.language = frame.language;
    state.languages.set(turn.assistantMessageId, frame.language);
  }
  // A tab that missed the turn's error (it followed the turn late) has its reason here.
  if (frame.reason && !state.failureReasons.has(frame.message_id)) {
    state.failureReasons.set(frame.message_id, reasonText(frame.reason, ""));
  }
  screen.showTurn(turn, frame.status);
  screen.syncStopButton();
  const reason = state.failureReasons.get(frame.message_id);
  // A message waiting in the outbox keeps its "Not connected" / "Sending…" line.
  if (frame.status !== "done") screen.status(reason || `The reply ended: ${frame.status}.`);
  else if (!state.outbox.size) screen.status("");
  if (frame.status !== "done" && turn.chatId === state.currentChatId && turn.userMessageId) {
    view.showRetry(turn.assistantMessageId, turn.userMessageId);
  }
  const asked = state.askedTurns.has(frame.task_id);
  if (content) {
    // A follower leaves the reply to the tab that asked, unless that one is gone; a reply
    // stored by another device arrives over REST (confirmStored), which shows it then.
    if (asked || !(await storedWithin(frame.message_id, FOLLOWER_WAIT_MS))) {
      await storage.storeMessage(turn.chatId, frame.message_id, "assistant", content, 0, {
        status: frame.status, model: turn.model, language: turn.language, parent_id: turn.userMessageId || undefined,
        failure_reason: frame.reason, tools_offered: (turn.toolsOffered || []).map((tool) => tool.name),
      });
    }
    // The new version's arrows, and Edit / Regenerate now that the turn is over.
    const held = state.store && (await state.store.messages(turn.chatId)).some((m) => m.message_id === frame.message_id);
    if (turn.chatId === state.currentChatId && held) await screen.renderStoredMessages(turn.chatId);
  } else if (content === null) {
    await storage.fetchChat(turn.chatId);
  } else if (state.store) {
    await keepEndedAnswer(turn, frame);
  }
  // A question this tab never got (a program sent it with an API token and stores
  // nothing): the server kept a copy when the turn ended, read now (this tab stores it).
  if (!asked && turn.userMessageId && state.store) {
    const rows = await state.store.messages(turn.chatId);
    if (!rows.some((m) => m.message_id === turn.userMessageId && m.encrypted_content)) await storage.fetchChat(turn.chatId);
  }
  // Edit and Regenerate come back now that no turn runs in the chat.
  await screen.refreshVersions(turn.chatId);
}

// An answer that ended without text (failed, stopped at once) is kept as IndexedDB holds
// a stored one, with its status and failure reason, so a reload shows it as this page
// does: a row a server read put here meanwhile gets them, else one is made. (The sync
// does not bring it back: the chat's version this tab holds may already count it.)
async function keepEndedAnswer(turn, frame) {
  const reason = frame.reason ? { failure_reason: frame.reason } : {};
  const row = (await state.store.messages(turn.chatId)).find((m) => m.message_id === frame.message_id);
  if (row) {
    const model = row.model || turn.model || "";
    const stale = row.status !== frame.status || (frame.reason && !row.failure_reason) || model !== (row.model || "");
    if (stale) await state.store.putMessage({ ...row, status: frame.status, model, ...reason });
    return;
  }
  if (frame.status === "done" || !state.chats.has(turn.chatId)) return;
  await state.store.putMessage({
    message_id: frame.message_id, chat_id: turn.chatId, role: "assistant", status: frame.status, version: 0,
    encrypted_content: null, model: turn.model || "", created_at: new Date().toISOString(), ...reason,
    ...(turn.userMessageId ? { parent_id: turn.userMessageId } : {}),
  });
}

// Follow-ups under the open chat's last reply; a new title or a summary is stored.
async function applyPostprocess({ storage, view }, frame) {
  const chat = state.chats.get(frame.chat_id);
  const [, active] = activeTurnOf(frame.chat_id);
  if (frame.chat_id === state.currentChatId && !active && frame.follow_ups && frame.follow_ups.length) {
    const last = state.lastAssistant.get(frame.chat_id);
    if (last) view.showFollowUps(last, frame.follow_ups);
  }
  const asked = state.askedTurns.delete(frame.task_id);
  if (!chat || !(frame.title || frame.summary)) return;
  // A follower leaves the new title and summary to the tab that asked, unless that one
  // is gone.
  if (!asked) await sleep(FOLLOWER_WAIT_MS);
  const current = state.chats.get(frame.chat_id);
  const changes = {};
  if (frame.title && current && frame.title !== current.title) changes.title = frame.title;
  if (frame.summary && current && frame.summary !== current.summary) changes.summary = frame.summary;
  if (Object.keys(changes).length) await storage.updateChatMeta(frame.chat_id, changes);
}

// The server took a message.store (from this tab or another of the user's): the stored
// copy gets the server's version; a message this browser does not hold is read over REST,
// one another tab stored here (IndexedDB is shared) is shown when its chat is open.
async function confirmStored({ screen, storage, view }, frame) {
  noteStored(frame.message_id);
  const rows = await state.store.messages(frame.chat_id);
  const known = rows.find((m) => m.message_id === frame.message_id);
  if (known && known.encrypted_content) {
    await state.store.putMessage({ ...known, version: frame.version });
    if (frame.chat_id === state.currentChatId && !view.has(frame.message_id)) {
      await screen.renderStoredMessages(frame.chat_id);
    }
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

// Categories the chat answered before are answered from its record (consent.js); the
// open chat asks the user about the others, a request about another chat declines them.
function askConsent({ view, consent }, frame) {
  const categories = frame.categories || [];
  const known = consentOf(frame.chat_id);
  const asked = categories.filter((category) => !(category in known));
  const alsoAllowed = categories.filter((category) => known[category] === "allowed");
  const request = { chatId: frame.chat_id, requestId: frame.request_id, asked, alsoAllowed };
  if (!asked.length || frame.chat_id !== state.currentChatId) return consent.answer({ ...request, chosen: [] });
  view.consentPrompt({ ...request, categories: asked });
}

// The assistant message an error frame's message_id names (a turn's user message names
// its turn's answer).
function answerNamed(messageId) {
  for (const turn of state.turns.values()) {
    if (turn.userMessageId === messageId) return turn.assistantMessageId;
  }
  return messageId;
}

// A failed model call's reason: its text replaces "The answer failed." on the answer.
function noteFailureReason({ view }, frame) {
  const text = reasonText(frame.reason, frame.message);
  const answerId = answerNamed(frame.message_id);
  state.failureReasons.set(answerId, text);
  view.setReason(answerId, text);
  return text;
}

// Whether the chat holds nothing yet: no stored message, none waiting to be sent or
// accepted, no turn running.
async function isEmptyChat(chatId) {
  if (!state.chats.has(chatId) || activeTurnOf(chatId)[0]) return false;
  if ([...state.outbox.values()].some((frame) => frame.chat_id === chatId)) return false;
  if ([...state.pendingUser.values()].some((pending) => pending.chatId === chatId)) return false;
  return (await state.store.messages(chatId)).length === 0;
}

// Codes that refuse a message for its files (docs/protocol.md §13): it was not accepted.
const FILE_REFUSALS = new Set(["file_too_large", "unsupported_file"]);

async function showError({ screen, storage, view }, frame) {
  if (frame.message_id) messageAnswered({ view }, frame.message_id);
  if (FILE_REFUSALS.has(frame.code) && frame.message_id) {
    // Nothing of it was kept: the question leaves the conversation and its text goes back
    // into the box, to send again with other files or none.
    state.pendingFiles.delete(frame.message_id);
    const pending = state.pendingUser.get(frame.message_id);
    state.pendingUser.delete(frame.message_id);
    view.remove(frame.message_id);
    const input = $("composer-input");
    if (pending && !input.value.trim()) input.value = pending.content;
    // A chat made for this question alone goes with it (no empty "New chat" is left).
    if (pending && (await isEmptyChat(pending.chatId))) await storage.deleteChat(pending.chatId);
    const reason = String(frame.message || frame.code).replace(/^files\.\d+: /, "");
    screen.status(`Not sent: ${reason} Your text is back in the box.`);
    return;
  }
  if (frame.reason && frame.message_id) {
    screen.status(noteFailureReason({ view }, frame));
    return;
  }
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
  "connected": reconnected,
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
