// What the user does in the conversation: open a chat, send, edit, regenerate, switch
// versions, retry, stop, delete. Frames
// go out through state.socket (docs/protocol.md §3); chats are made and deleted through
// storage.
import { $ } from "./dom.js";
import { attachToMessage, filesOf, frameFiles, keepOutgoingFiles, showStoredFiles } from "./files.js";
import { uuidv7 } from "./ids.js";
import { readOnlyHint } from "./screen.js";
import { activeTurnOf, chosenOf, isReadOnly, rememberOpenChat, state } from "./state.js";
import { decryptMessage } from "./storage.js";
import { chosenTier } from "./tiers.js";
import { editForm, placeOf } from "./versions.js";

// A user message's limit on the server (docs/protocol.md: content over 64 KiB of UTF-8 is
// refused), checked before the composer lets go of the text.
export const MAX_CONTENT_BYTES = 64 * 1024;
// Characters that show nothing: whitespace, zero-width and bidi controls, the BOM, tags.
const INVISIBLE = /^[\s\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]*$/u;

// Why `text` cannot be sent as a message (null when it can): too long, or showing nothing.
export function contentProblem(text) {
  const bytes = new TextEncoder().encode(text.trim()).length;
  if (bytes > MAX_CONTENT_BYTES) {
    return `This message is ${Math.ceil(bytes / 1024)} KiB; a message holds at most 64 KiB. Attach long text as a file instead.`;
  }
  if (INVISIBLE.test(text.replace(/[\u{e0000}-\u{e007f}]/gu, ""))) return "The message shows nothing to send.";
  return null;
}

export class ChatActions {
  // screen: a Screen, storage: a ChatStorage, view: a ConversationView, chatList: a
  // ChatList, attachments: the composer's files (files.js Attachments).
  constructor({ screen, storage, view, chatList, attachments }) {
    this.screen = screen;
    this.storage = storage;
    this.view = view;
    this.chatList = chatList;
    this.attachments = attachments;
  }

  // Shows a chat: its stored messages (read over REST first when some are missing here)
  // and the reply of a turn still running in it.
  async openChat(chatId) {
    state.currentChatId = chatId;
    rememberOpenChat(chatId);
    $("app").dataset.sidebar = "closed";
    $("menu-toggle").setAttribute("aria-expanded", "false");
    this.view.clear();
    this.chatList.setActive(chatId);
    this.screen.setHeader();
    const record = state.chats.get(chatId);
    if (record && record.undecryptable) {
      // Its messages are there, but nothing of it opens in this browser: say so rather
      // than show an empty chat or a decryption error per message.
      const count = record.message_count || 0;
      this.view.showNotice(`This chat has ${count} message${count === 1 ? "" : "s"}, but its key cannot be opened in this browser (it is wrapped under another key), so they cannot be shown here.`);
      this.screen.syncStopButton();
      return;
    }
    const stored = await state.store.messages(chatId);
    if (record && record.message_count > stored.filter((m) => m.encrypted_content).length) {
      await this.storage.fetchChat(chatId);
    }
    await this.screen.renderStoredMessages(chatId);
    // The messages' files come from their stored embeds (after a reload, on another device).
    showStoredFiles(chatId, this.view).catch(() => {});
    // Messages still waiting to be sent (typed in an earlier page while offline).
    for (const [messageId, frame] of state.outbox) {
      if (frame.chat_id === chatId && !this.view.has(messageId)) {
        this.view.upsert({ message_id: messageId, role: "user", content: frame.content, status: "waiting" });
      }
    }
    for (const turn of state.turns.values()) {
      if (turn.chatId === chatId) {
        this.view.upsert({ message_id: turn.assistantMessageId, role: "assistant", content: turn.content, status: "streaming" });
      }
    }
    this.screen.syncStopButton();
    this.view.scrollToEnd(true);
    $("composer-input").focus();
  }

  // Sends a message in the open chat, creating the chat first on a new one, on the tier
  // picked beside the composer (none: pre-processing chooses), after the last answer of
  // the branch shown; with `parentId` (an edit: the edited question's parent, null for the
  // first) as a new version beside the question there, which is then shown. The files
  // attached in the composer go with a new question (docs/protocol.md §13), `files` (file
  // records, files.js) with an edit.
  async send(text, { parentId, files: given } = {}) {
    const files = given || (parentId === undefined && this.attachments ? this.attachments.take() : []);
    const content = text.trim() || (files.length ? `(attached: ${files.map((f) => f.name).join(", ")})` : "");
    if (!content || !state.socket) { if (files.length && !given) this.attachments.restore(files); return; }
    const problem = contentProblem(content);
    if (problem) { if (files.length && !given) this.attachments.restore(files); this.screen.status(problem); return; }
    if (!state.instance) { this.screen.status("You are not a member of any assistant yet."); return; }
    const open = state.chats.get(state.currentChatId);
    if (isReadOnly(open)) { this.screen.status(readOnlyHint(open)); return; }
    this.view.clearFollowUps();
    let chatId = state.currentChatId;
    try {
      if (!chatId) {
        chatId = await this.storage.createChat(state.instance);
        this.screen.showCreated(chatId);
      }
    } catch (error) {
      // Nothing typed is lost: the text goes back into an empty composer.
      const input = $("composer-input");
      if (!input.value.trim()) input.value = text.trim();
      if (files.length && !given) this.attachments.restore(files);
      this.screen.status(`Could not start the chat: ${error.message}`);
      return;
    }
    const messageId = uuidv7();
    const tier = chosenTier();
    const parent = parentId !== undefined ? parentId : this.tipOf(chatId);
    if (parentId !== undefined) {
      chosenOf(chatId).set(placeOf({ parent_id: parentId }), messageId);
      await this.screen.renderStoredMessages(chatId);
    }
    if (files.length) await attachToMessage(chatId, messageId, files);
    state.pendingUser.set(messageId, { chatId, content, parentId: parent });
    const frame = {
      type: "message.send", chat_id: chatId, message_id: messageId, content,
      ...(parent !== undefined ? { parent_id: parent } : {}), ...(tier ? { overrides: { tier } } : {}),
    };
    state.outbox.set(messageId, files.length ? { ...frame, files: frameFiles(files) } : frame);
    this.view.upsert({ message_id: messageId, role: "user", content, status: "waiting" });
    this.view.dropTurnControls();
    this.view.scrollToEnd(true);
    // IndexedDB's outbox keeps the text and the files' embeds, encrypted.
    await this.storage.keepOutgoing(frame);
    if (files.length) await keepOutgoingFiles(messageId);
    this.flushOutbox();
    await this.storage.touchChat(chatId);
  }

  // The answer the next question of a chat follows: the branch shown's last answer, while
  // nothing is in flight there (else the server's default, its newest message: the turn
  // just sent from this branch); undefined for the default.
  tipOf(chatId) {
    const inFlight = activeTurnOf(chatId)[0] || [...state.outbox.values()].some((frame) => frame.chat_id === chatId);
    const tip = state.branchTips.get(chatId);
    return inFlight || !tip ? undefined : tip;
  }

  // Edits the question `row` (a stored message) inline; Save sends the new text as a new
  // version of it, answered again, with the question's files (as new embeds of its own).
  async edit(row) {
    const body = this.view.bodyOf(row.message_id);
    if (!body || body.querySelector(".edit-form")) return;
    const text = await editForm(body, await decryptMessage(row));
    const files = filesOf(row.message_id).map(({ url, ...record }) => ({ ...record, embed_id: uuidv7() }));
    if (text) await this.send(text, { parentId: row.parent_id || null, files });
  }

  // Answers the question of the answer `row` again (on the tier picked): a new version
  // beside it, shown in its place once accepted (handlers.startTurn).
  async regenerate(row) {
    const chatId = state.currentChatId;
    const question = (await state.store.messages(chatId)).find((m) => m.message_id === row.parent_id);
    const content = question ? await decryptMessage(question) : null;
    if (!content) { this.screen.status("The question of this answer cannot be read here."); return; }
    const tier = chosenTier();
    state.regenerating.set(question.message_id, row.message_id);
    // The question's files go again (the server keeps none of them: docs/protocol.md §13).
    const files = filesOf(question.message_id);
    state.socket.send({
      type: "message.regenerate", chat_id: chatId, message_id: row.message_id, content,
      ...(tier ? { overrides: { tier } } : {}), ...(files.length ? { files: frameFiles(files) } : {}),
    });
    this.screen.status("Regenerating…");
  }

  // Shows another version (`messageId`) of the messages after `place` (a parent id).
  async switchVersion(place, messageId) {
    const chatId = state.currentChatId;
    chosenOf(chatId).set(place, messageId);
    this.view.clear();
    await this.screen.renderStoredMessages(chatId);
  }

  // Sends the outbox's messages when connected (again on every reconnect until the server
  // answers each: the client-chosen message_id makes a repeat follow the same turn, so a
  // message is answered once).
  flushOutbox() {
    if (!state.socket || !state.socket.isOpen()) {
      if (state.outbox.size) this.screen.status("Not connected: your message will be sent when the connection is back.");
      return;
    }
    for (const frame of state.outbox.values()) state.socket.send(frame);
    if (state.outbox.size) this.screen.status("Sending…");
  }

  // Retries the stopped or failed answer `assistantMessageId` to `userMessageId`: the new
  // answer replaces it in place (handlers.startTurn).
  async retry(userMessageId, assistantMessageId) {
    const chatId = state.currentChatId;
    if (!chatId) return;
    // A failed version beside a done answer (a regenerate that failed) is answered again
    // by message.regenerate: message.retry reopens only a question whose turn ended.
    const rows = await state.store.messages(chatId);
    const answeredBeside = rows.some((m) => m.role === "assistant" && m.parent_id === userMessageId
      && m.message_id !== assistantMessageId && m.status === "done");
    if (assistantMessageId && answeredBeside) {
      await this.regenerate({ message_id: assistantMessageId, parent_id: userMessageId });
      return;
    }
    if (assistantMessageId) state.retrying.set(userMessageId, assistantMessageId);
    const files = filesOf(userMessageId);
    state.socket.send({
      type: "message.retry", chat_id: chatId, message_id: userMessageId,
      ...(files.length ? { files: frameFiles(files) } : {}),
    });
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
