// IndexedDB store of the user's chats and messages, ciphertext only (docs/crypto.md §3
// envelopes plus plaintext metadata the server has anyway: ids, roles, statuses,
// versions, model names, timestamps). One database per user.
//
// chats:    { chat_id, instance, version, meta_version, encrypted_chat_key,
//             encrypted_title, encrypted_summary, encrypted_tags, encrypted_icon,
//             encrypted_category, pinned, message_count, created_at, updated_at }
// messages: { message_id, chat_id, role, status, version, encrypted_content, model,
//             created_at }
// outbox:   what this browser sent that the server has not answered yet, kept across a
//           reload or a closed tab: { id: message_id, kind: "message", chat_id, role,
//           version, encrypted_content, frame (message.send without its content) } and
//           { id: "chat:" + chat_id, kind: "chat", frame (chat.create: no plaintext) }

const DB_VERSION = 2;

function promisify(request) {
  return new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

function done(tx) {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

export async function openStore(userId) {
  const request = indexedDB.open(`openmates-u${userId}`, DB_VERSION);
  request.onupgradeneeded = () => {
    const db = request.result;
    if (!db.objectStoreNames.contains("chats")) db.createObjectStore("chats", { keyPath: "chat_id" });
    if (!db.objectStoreNames.contains("messages")) {
      const messages = db.createObjectStore("messages", { keyPath: "message_id" });
      messages.createIndex("chat", "chat_id");
    }
    if (!db.objectStoreNames.contains("outbox")) db.createObjectStore("outbox", { keyPath: "id" });
  };
  const db = await promisify(request);
  return new Store(db);
}

class Store {
  constructor(db) {
    this.db = db;
    // onChange(chatId): called after a chat's record or one of its messages was written
    // or deleted (the chat search reads the chat again).
    this.onChange = null;
  }

  changed(chatId) {
    if (this.onChange) this.onChange(chatId);
  }

  async chats() {
    const tx = this.db.transaction("chats");
    return promisify(tx.objectStore("chats").getAll());
  }

  async chat(chatId) {
    const tx = this.db.transaction("chats");
    return (await promisify(tx.objectStore("chats").get(chatId))) || null;
  }

  // Keeps the stored record when it is newer than `record` (merge by version) and
  // returns whichever record is kept.
  async putChat(record) {
    const tx = this.db.transaction("chats", "readwrite");
    const chats = tx.objectStore("chats");
    const existing = await promisify(chats.get(record.chat_id));
    let kept = record;
    if (existing && existing.version > record.version) kept = existing;
    else if (existing) kept = { ...existing, ...record };
    chats.put(kept);
    await done(tx);
    this.changed(record.chat_id);
    return kept;
  }

  async patchChat(chatId, changes) {
    const tx = this.db.transaction("chats", "readwrite");
    const chats = tx.objectStore("chats");
    const existing = await promisify(chats.get(chatId));
    if (!existing) return null;
    const updated = { ...existing, ...changes };
    chats.put(updated);
    await done(tx);
    this.changed(chatId);
    return updated;
  }

  async deleteChat(chatId) {
    const tx = this.db.transaction(["chats", "messages"], "readwrite");
    tx.objectStore("chats").delete(chatId);
    const keys = await promisify(tx.objectStore("messages").index("chat").getAllKeys(chatId));
    for (const key of keys) tx.objectStore("messages").delete(key);
    await done(tx);
    this.changed(chatId);
  }

  async messages(chatId) {
    const tx = this.db.transaction("messages");
    const rows = await promisify(tx.objectStore("messages").index("chat").getAll(chatId));
    return rows.sort((a, b) => (a.message_id < b.message_id ? -1 : a.message_id > b.message_id ? 1 : 0));
  }

  // Merge by version: a stored message with a higher version wins; ciphertext is never
  // replaced by null.
  async putMessage(record) {
    const tx = this.db.transaction("messages", "readwrite");
    const messages = tx.objectStore("messages");
    const existing = await promisify(messages.get(record.message_id));
    let kept = record;
    if (existing) {
      if ((existing.version || 0) > (record.version || 0)) kept = { ...record, ...existing, status: record.status || existing.status };
      else kept = { ...existing, ...record, encrypted_content: record.encrypted_content ?? existing.encrypted_content };
      // An answer never reopens: an ended one stays ended when an older read arrives.
      const unfinished = (status) => status === "pending" || status === "streaming";
      if (existing.role === "assistant" && existing.status && unfinished(kept.status) && !unfinished(existing.status)) {
        kept = { ...kept, status: existing.status };
      }
    }
    messages.put(kept);
    await done(tx);
    this.changed(record.chat_id);
    return kept;
  }

  async outbox() {
    const tx = this.db.transaction("outbox");
    const rows = await promisify(tx.objectStore("outbox").getAll());
    return rows.sort((a, b) => String(a.queued_at).localeCompare(String(b.queued_at)));
  }

  async putOutbox(record) {
    const tx = this.db.transaction("outbox", "readwrite");
    tx.objectStore("outbox").put({ queued_at: new Date().toISOString(), ...record });
    await done(tx);
  }

  async deleteOutbox(id) {
    const tx = this.db.transaction("outbox", "readwrite");
    tx.objectStore("outbox").delete(id);
    await done(tx);
  }

  close() {
    this.db.close();
  }
}

export async function deleteStore(userId) {
  await promisify(indexedDB.deleteDatabase(`openmates-u${userId}`));
}
