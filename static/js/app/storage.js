// Chats, messages and embeds kept in IndexedDB (state.store) and on the server: written
// through the socket (chat.create, chat.update, chat.delete, message.store) and REST
// (embeds), read over REST. Every stored text is docs/crypto.md §3 ciphertext under its
// chat's key (crypto.js keyring); decrypted metadata goes into state.chats.
import { keyring } from "../crypto.js";
import { api, HttpError } from "./dom.js";
import { historyFiles } from "./files.js";
import { uuidv7 } from "./ids.js";
import { isServerManaged, settledStatus, state } from "./state.js";
import { historyWithinLimit } from "./ws.js";

const REQUEST_TIMEOUT_MS = 20000;
// How long a new chat's creation waits for the server's answer before it counts as sent.
const CREATE_WAIT_MS = 3000;
const META_FIELDS = ["title", "summary", "tags", "icon"];

export async function ensureChatKey(record) {
  if (!keyring.hasChatKey(record.chat_id)) {
    await keyring.loadChatKey(record.chat_id, record.encrypted_chat_key);
  }
}

// A chat record's metadata field in plaintext, or null when absent or unreadable; throws
// the CryptoError stale_version for metadata older than a version already read (a copy
// that lost a race with a newer one, or a server passing off old metadata).
async function decryptMeta(record, field) {
  const ciphertext = record[`encrypted_${field}`];
  if (!ciphertext) return null;
  try {
    return await keyring.decryptField({
      chatId: record.chat_id, objectId: record.chat_id, field, role: "-",
      version: record.meta_version || 1, ciphertext,
    });
  } catch (error) {
    if (error.code === "stale_version") throw error;
    return null;
  }
}

// A stored message's text, null without ciphertext; throws (CryptoError) when unreadable.
export async function decryptMessage(record) {
  if (!record.encrypted_content) return null;
  return keyring.decryptField({
    chatId: record.chat_id, objectId: record.message_id, field: "content",
    role: record.role, version: record.version, ciphertext: record.encrypted_content,
  });
}

function withTimeout(promise) {
  return Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error("timeout")), REQUEST_TIMEOUT_MS))]);
}

// The metadata ciphertexts of `changes` over the chat's present fields, all at `version`:
// every field shares the chat's meta_version in its associated data.
async function encryptMeta(chat, changes, version) {
  const encrypted = {};
  for (const field of META_FIELDS) {
    const value = changes[field] !== undefined ? changes[field] : chat[field];
    if (value === undefined || value === null) continue;
    encrypted[`encrypted_${field}`] = await keyring.encryptField({
      chatId: chat.chat_id, objectId: chat.chat_id, field, role: "-", version, plaintext: value,
    });
  }
  return encrypted;
}

// The list's name of a server-managed chat whose title the server could not open.
const SERVER_MANAGED_TITLE = "API conversation";

export class ChatStorage {
  // screen: a Screen; storage shows what it changed through it (list, header, the open
  // chat's messages, an error in the status line).
  constructor(screen) {
    this.screen = screen;
    this.metaQueues = new Map(); // chat_id -> the promise of its last metadata update
    this.showCalls = new Map(); // chat_id -> the number of showChat calls so far
    this.shownTickets = new Map(); // chat_id -> the call whose record the list shows
  }

  async ingestChat(incoming) {
    if (isServerManaged(incoming)) {
      // Its plaintext title stays in memory; IndexedDB keeps the record without it.
      const { title, ...record } = incoming;
      if (typeof title === "string" && title) state.plainTitles.set(incoming.chat_id, title);
      return this.showChat(await state.store.putChat(record));
    }
    return this.showChat(await state.store.putChat(incoming));
  }

  // Decrypts a stored chat record's metadata into the in-memory list. Calls for one chat
  // come in the order of the store's writes, but their decryptions may finish in any
  // order: a record is shown only if no later call for the chat was shown already (an
  // older record finishing last would silently undo a new title), and never after the
  // chat was forgotten.
  async showChat(record) {
    const chatId = record.chat_id;
    const ticket = (this.showCalls.get(chatId) || 0) + 1;
    this.showCalls.set(chatId, ticket);
    const shown = { ...record };
    if (isServerManaged(record)) {
      shown.title = state.plainTitles.get(chatId) || SERVER_MANAGED_TITLE;
    } else {
      try {
        await ensureChatKey(record);
        for (const field of META_FIELDS) shown[field] = (await decryptMeta(record, field)) || null;
      } catch (error) {
        // Older metadata than the list shows: the list keeps what it has.
        if (error.code === "stale_version" && state.chats.has(chatId)) return state.chats.get(chatId);
        shown.title = "(cannot decrypt)";
        // Nothing new can be sealed for it here: the composer stays locked (isReadOnly).
        shown.undecryptable = true;
      }
    }
    if ((this.shownTickets.get(chatId) || 0) > ticket) return state.chats.get(chatId) || shown;
    this.shownTickets.set(chatId, ticket);
    // A "forbidden" answer is known only to this page, not to the stored record: keep it
    // when the record is shown again (a metadata update would otherwise unlock the composer).
    if (state.chats.get(chatId)?.readOnly) shown.readOnly = true;
    state.chats.set(chatId, shown);
    return shown;
  }

  // messages: server message records (sync.phase, REST); one marked needs_store carries
  // the server's plaintext copy, which this tab encrypts and stores.
  async ingestMessages(chatId, messages) {
    if (isServerManaged(state.chats.get(chatId))) {
      this.keepPlainMessages(chatId, messages || []);
      if (chatId === state.currentChatId) await this.screen.renderStoredMessages(chatId);
      return;
    }
    // A turn stopped before its answer named a model reaches the server without one;
    // the model this page saw start it stays on the answer.
    const held = (messages || []).some((m) => m.role === "assistant" && !m.model)
      ? new Map((await state.store.messages(chatId)).map((m) => [m.message_id, m.model]))
      : new Map();
    for (const message of messages || []) {
      // A server read made before a turn ended must not undo the end this page saw.
      const status = settledStatus(message);
      if (message.needs_store && typeof message.content === "string") {
        const model = message.model || held.get(message.message_id) || "";
        await this.storeMessage(chatId, message.message_id, message.role, message.content, message.version || 0, { ...message, status, model });
        continue;
      }
      await state.store.putMessage({
        message_id: message.message_id, chat_id: chatId, role: message.role,
        ...(message.parent_id !== undefined ? { parent_id: message.parent_id } : {}),
        status, version: message.version,
        encrypted_content: message.encrypted_content, model: message.model || held.get(message.message_id) || "",
        failure_reason: message.failure_reason || null,
        ...(message.language ? { language: message.language } : {}),
        ...(message.tools_offered?.length ? { tools_offered: message.tools_offered } : {}),
        created_at: message.created_at,
      });
    }
    if (chatId === state.currentChatId) await this.screen.renderStoredMessages(chatId);
  }

  // A server-managed chat's messages as the server sent them (content: its opened copy),
  // merged by message_id into what this tab holds, oldest first.
  keepPlainMessages(chatId, messages) {
    const held = new Map((state.plainMessages.get(chatId) || []).map((m) => [m.message_id, m]));
    for (const message of messages) {
      held.set(message.message_id, {
        message_id: message.message_id, role: message.role, status: message.status,
        model: message.model || "", created_at: message.created_at,
        failure_reason: message.failure_reason || null, language: message.language || "",
        tools_offered: message.tools_offered || [],
        content: typeof message.content === "string" ? message.content : held.get(message.message_id)?.content ?? null,
      });
    }
    const rows = [...held.values()].sort((a, b) => String(a.created_at).localeCompare(String(b.created_at))
      || (a.message_id < b.message_id ? -1 : 1));
    state.plainMessages.set(chatId, rows);
  }

  // Reads a chat and its messages over REST; a chat the server no longer has is forgotten.
  // Reads a chat and its messages over REST; offline (also when the connection went
  // between the two reads) it leaves the chat as IndexedDB has it.
  async fetchChat(chatId) {
    if (!navigator.onLine) return;
    try {
      const record = await api("GET", `/api/chats/${chatId}/`);
      await this.ingestChat(record);
      if (!navigator.onLine) return;
      const messages = await api("GET", `/api/chats/${chatId}/messages/?since=0`);
      await this.ingestMessages(chatId, messages.messages || messages.results || messages);
      this.screen.chatChanged(chatId);
    } catch (error) {
      if (error instanceof HttpError && error.status === 404) this.forgetChat(chatId, { elsewhere: true });
    }
  }

  // elsewhere: the chat went in another tab or on another device (a notice says so when
  // it was the open one).
  async forgetChat(chatId, { elsewhere = false } = {}) {
    // A showChat still decrypting this chat must not bring it back.
    const ticket = (this.showCalls.get(chatId) || 0) + 1;
    this.showCalls.set(chatId, ticket);
    this.shownTickets.set(chatId, ticket);
    state.chats.delete(chatId);
    await state.store.deleteChat(chatId);
    if (state.currentChatId === chatId) {
      this.screen.newChat();
      if (elsewhere) this.screen.status("The chat you had open was deleted in another tab or on another device.");
    }
    this.screen.refreshList();
  }

  // Creates a chat on `instance` (a slug) under a fresh chat key; returns its id. The
  // chat.create frame is kept in IndexedDB first (no plaintext in it), so a reload or a
  // closed tab still creates the chat, and it leaves that outbox once the server answers.
  // Connected (the socket open and the browser online), the answer is awaited a moment, so
  // a refusal comes back as an error; without it in time (a network gone while the socket
  // still looks open) the chat stays here as created and the frame waits for its answer.
  async createChat(instance) {
    const chatId = uuidv7();
    const encryptedChatKey = await keyring.createChatKey(chatId);
    const frame = { type: "chat.create", chat_id: chatId, instance, encrypted_chat_key: encryptedChatKey };
    await state.store.putOutbox({ id: `chat:${chatId}`, kind: "chat", chat_id: chatId, frame });
    let answered = null;
    const answer = this.sendKeptChat(frame, (created) => { answered = created; });
    answer.catch(() => {}); // a refusal after the wait is told by sendKeptChat's status
    if (state.socket.isOpen() && navigator.onLine) {
      await Promise.race([answer, new Promise((resolve) => setTimeout(resolve, CREATE_WAIT_MS))]);
    }
    const now = new Date().toISOString();
    await this.ingestChat({
      chat_id: chatId, instance, version: (answered && answered.version) || 1, meta_version: 1,
      encrypted_chat_key: encryptedChatKey, pinned: false, message_count: 0,
      created_at: now, updated_at: now, last_message_at: now,
    });
    return chatId;
  }

  // Sends a kept chat.create; once the server answered it (created, or refused; created
  // again for a repeat), it leaves IndexedDB's outbox. `onCreated` gets the chat.created
  // frame. The promise returned rejects with a refusal (an error frame) and resolves
  // otherwise; an answer that never comes leaves it pending.
  sendKeptChat(frame, onCreated = () => {}) {
    return state.socket.request(frame, ["chat.created"])
      .then(async (created) => {
        onCreated(created);
        await state.store.deleteOutbox(`chat:${frame.chat_id}`);
      })
      .catch(async (error) => {
        if (!error.code) return;
        await state.store.deleteOutbox(`chat:${frame.chat_id}`);
        this.screen.status(`Could not start the chat: ${error.message}`);
        throw error;
      });
  }

  // Keeps a message.send in IndexedDB until the server answers it, its text encrypted
  // under the chat's key as a stored message is: typed text survives a reload or a
  // closed tab while offline.
  async keepOutgoing(frame) {
    const chat = state.chats.get(frame.chat_id);
    if (!chat) return;
    await ensureChatKey(chat);
    const { content, ...rest } = frame;
    const encrypted = await keyring.encryptField({
      chatId: frame.chat_id, objectId: frame.message_id, field: "content", role: "user", version: 1, plaintext: content,
    });
    // The files' embed envelopes in the same write: a tab closed between two writes would
    // keep the text without its files.
    const pending = state.pendingFiles.get(frame.message_id);
    await state.store.putOutbox({
      id: frame.message_id, kind: "message", chat_id: frame.chat_id, role: "user", version: 1,
      encrypted_content: encrypted, frame: rest, ...(pending ? { encrypted_files: pending.envelopes } : {}),
    });
  }

  // What IndexedDB's outbox holds from an earlier page: chats to create go to the socket
  // (sent first when it opens), messages back into the page's outbox (sent on connect).
  async restoreOutbox() {
    for (const record of await state.store.outbox()) {
      if (record.kind === "chat") {
        this.sendKeptChat(record.frame).catch(() => {});
        continue;
      }
      let content = null;
      try {
        content = await decryptMessage({ ...record, message_id: record.id });
      } catch (error) {
        content = null;
      }
      if (content === null) { await state.store.deleteOutbox(record.id); continue; }
      state.pendingUser.set(record.id, { chatId: record.chat_id, content, parentId: record.frame.parent_id });
      state.outbox.set(record.id, { ...record.frame, content });
    }
  }

  // A message was just sent in `chatId`: it moves to the top of the list now (the server's
  // last_message_at replaces this time at the next sync).
  async touchChat(chatId) {
    const record = await state.store.chat(chatId);
    if (!record) return;
    await this.showChat(await state.store.putChat({ ...record, last_message_at: new Date().toISOString() }));
    this.screen.refreshList();
  }

  // changes: {title?, icon?, summary?, tags?, pinned?}. Updates of one chat run one after
  // another, so each starts from the version the one before it stored. `explicit`: the
  // user's own change (a rename, a pin), made again on top of the chat's new version when
  // another tab or device changed it meanwhile (conflict), not dropped.
  updateChatMeta(chatId, changes, { explicit = false } = {}) {
    const previous = this.metaQueues.get(chatId) || Promise.resolve();
    const next = previous.catch(() => {}).then(() => this.applyChatMeta(chatId, changes, explicit));
    this.metaQueues.set(chatId, next);
    return next;
  }

  // Re-encrypts all present metadata fields at the new meta_version when one changes.
  async applyChatMeta(chatId, changes, again = false) {
    const chat = state.chats.get(chatId);
    if (!chat) return;
    const base = Math.max(chat.version || 1, chat.meta_version || 1);
    const metaChanged = META_FIELDS.some((field) => changes[field] !== undefined);
    const local = metaChanged ? await encryptMeta(chat, changes, base + 1) : {};
    const frame = { type: "chat.update", chat_id: chatId, version: base, ...local };
    if (changes.pinned !== undefined) frame.pinned = changes.pinned;
    try {
      const answer = await withTimeout(state.socket.request(frame, ["chat.updated"]));
      const record = await state.store.patchChat(chatId, {
        ...local,
        ...(changes.pinned !== undefined ? { pinned: changes.pinned } : {}),
        version: answer.version,
        ...(metaChanged ? { meta_version: base + 1 } : {}),
      });
      if (record) await this.ingestChat(record);
      this.screen.chatChanged(chatId);
    } catch (error) {
      if (error.code !== "conflict") { this.screen.status(`Could not update the chat: ${error.message}`); return; }
      await this.fetchChat(chatId);
      if (again) await this.applyChatMeta(chatId, changes, false);
    }
  }

  // Deletes a chat on the server (one already gone counts as deleted) and here.
  async deleteChat(chatId) {
    try {
      await withTimeout(state.socket.request({ type: "chat.delete", chat_id: chatId }, ["chat.deleted"]));
    } catch (error) {
      if (error.code !== "not_found") { this.screen.status(`Could not delete the chat: ${error.message}`); return; }
    }
    await this.forgetChat(chatId);
  }

  // Encrypts a message at baseVersion + 1, keeps it in IndexedDB and sends message.store.
  // meta: {status?, model?, language?, created_at?, parent_id? (docs/protocol.md §12),
  // failure_reason? (docs/protocol.md §8), tools_offered? (names)}.
  async storeMessage(chatId, messageId, role, content, baseVersion = 0, meta = {}) {
    const chat = state.chats.get(chatId);
    if (!chat) return;
    await ensureChatKey(chat);
    const encrypted = await keyring.encryptField({
      chatId, objectId: messageId, field: "content", role, version: baseVersion + 1, plaintext: content,
    });
    await state.store.putMessage({
      message_id: messageId, chat_id: chatId, role, status: meta.status || "done",
      version: baseVersion + 1, encrypted_content: encrypted, model: meta.model || "",
      ...(meta.language ? { language: meta.language } : {}),
      ...(meta.parent_id !== undefined ? { parent_id: meta.parent_id } : {}),
      ...(meta.failure_reason ? { failure_reason: meta.failure_reason } : {}),
      ...(meta.tools_offered?.length ? { tools_offered: meta.tools_offered } : {}),
      created_at: meta.created_at || new Date().toISOString(),
    });
    state.socket.send({
      type: "message.store", chat_id: chatId, message_id: messageId,
      encrypted_content: encrypted, version: baseVersion,
    });
  }

  // Stores a message this tab sent, once (message.accepted and task.queued both ask).
  async storeUserMessage(messageId) {
    const pending = state.pendingUser.get(messageId);
    if (!pending || state.storedUser.has(messageId)) return;
    state.storedUser.add(messageId);
    await this.storeMessage(pending.chatId, messageId, "user", pending.content, 0, { status: "done", parent_id: pending.parentId });
  }

  // Embeds are stored like messages: client ciphertext (field "embed", the embed's own id).
  // An embed the server already has (409) is left as it is.
  async storeEmbed(chatId, embedId, content) {
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

  // After a sync of `total` chats: reads over REST, page by page, the chats sync did not
  // bring or brought older. A failed page ends the reading.
  async loadRemainingChats(total) {
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
        // A server-managed chat's title lives in memory only: a page without it takes it.
        const untitled = isServerManaged(chat) && !state.plainTitles.has(chat.chat_id);
        return !known || known.version < chat.version || untitled;
      });
      await Promise.all(fresh.map((chat) => this.ingestChat(chat)));
      this.screen.refreshList();
      if (fresh.some((chat) => chat.chat_id === state.currentChatId)) this.screen.setHeader();
      url = page.next ? new URL(page.next, window.location.href).pathname + new URL(page.next, window.location.href).search : null;
    }
  }

  // The chat's messages this device can read, [{message_id, role, content, opt. files}]
  // oldest first, a question with its files (historyFiles), fitted into one chat.history
  // frame.
  async readableHistory(chatId) {
    const rows = await state.store.messages(chatId);
    const files = await historyFiles(chatId);
    const messages = [];
    for (const row of rows) {
      try {
        const content = await decryptMessage(row);
        if (content === null) continue;
        const message = { message_id: row.message_id, role: row.role, content };
        const attached = row.role === "user" ? files.get(row.message_id) : null;
        messages.push(attached?.length ? { ...message, files: attached } : message);
      } catch (error) {
        // A message this device cannot read is left out; the server asked for what we have.
      }
    }
    return historyWithinLimit(messages);
  }
}
