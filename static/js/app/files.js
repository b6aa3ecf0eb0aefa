// Files attached to a message (docs/protocol.md §13): the composer's attachments (the
// attach button, paste and drop; chips removable before sending), the checks the server
// makes (type, size, count) made here first with a reason shown, each file's embed
// (its JSON {kind: "file", name, mime, size, data} encrypted under the embed key,
// docs/crypto.md §3) stored once the server accepted the message, and the previews of a
// message's files, read back from the stored embeds after a reload or on another device.
// Decrypted files live in page memory only (state.files), never in IndexedDB, whose
// outbox keeps a waiting message's files as their embeds' envelopes.
import { keyring, toBase64 } from "../crypto.js";
import { $, api, el, HttpError } from "./dom.js";
import { uuidv7 } from "./ids.js";
import { config, state } from "./state.js";

const MIB = 1024 * 1024;
// The page's config carries the server's limits (accounts.views.app_shell).
export const fileLimits = {
  maxFileBytes: 2 * MIB, maxFilesBytes: 2.5 * MIB, maxFiles: 8, ...(config.fileLimits || {}),
};
const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/webp", "image/gif"]);
// As pipeline/file_types.py: text-like types beyond text/*, and name endings taken as text.
const TEXT_TYPES = new Set([
  "application/json", "application/ld+json", "application/xml", "application/x-yaml",
  "application/yaml", "application/toml", "application/javascript", "application/x-javascript",
  "application/typescript", "application/x-sh", "application/x-python", "application/sql",
  "application/x-tex", "application/csv",
]);
const TEXT_SUFFIXES = new Set((
  "txt md markdown rst csv tsv json jsonl yaml yml toml ini cfg conf xml html htm css js"
  + " mjs ts tsx jsx py rb go rs java kt c h cc cpp hpp cs php sh bash zsh sql r swift"
  + " scala lua pl tex log env dockerfile makefile").split(" "));
export const ACCEPT = [...IMAGE_TYPES, "text/*", "application/pdf", ...TEXT_TYPES,
  ...[...TEXT_SUFFIXES].map((s) => `.${s}`)].join(",");

// 1536 -> "1.5 KiB".
export function sizeText(bytes) {
  if (bytes < 1024) return `${bytes} bytes`;
  if (bytes < MIB) return `${Math.round(bytes / 102.4) / 10} KiB`;
  return `${Math.round(bytes / (MIB / 10)) / 10} MiB`;
}

function suffixOf(name) {
  const base = name.split("/").pop().toLowerCase();
  return base.includes(".") ? base.split(".").pop() : base;
}

// "image", "pdf", "text", or null for a type the assistant does not read.
export function kindOf({ name, mime }) {
  const type = (mime || "").toLowerCase();
  if (IMAGE_TYPES.has(type)) return "image";
  if (type === "application/pdf" || suffixOf(name) === "pdf") return "pdf";
  if (type.startsWith("image/")) return null;
  if (type.startsWith("text/") || TEXT_TYPES.has(type) || TEXT_SUFFIXES.has(suffixOf(name))) return "text";
  return null;
}

// The reason a file cannot be added to `held` (the files already attached), or null.
export function fileProblem(file, held) {
  if (!kindOf({ name: file.name, mime: file.type })) {
    return `${file.name}: only images (PNG, JPEG, WebP, GIF) and text-like files (text, Markdown, code, CSV, JSON, PDF) can be attached.`;
  }
  if (file.size > fileLimits.maxFileBytes) {
    return `${file.name} is ${sizeText(file.size)}; a file may be at most ${sizeText(fileLimits.maxFileBytes)}.`;
  }
  if (held.length >= fileLimits.maxFiles) return `At most ${fileLimits.maxFiles} files per message.`;
  const total = held.reduce((sum, f) => sum + f.size, 0) + file.size;
  if (total > fileLimits.maxFilesBytes) {
    return `The files together would be ${sizeText(total)}; a message's files may be at most ${sizeText(fileLimits.maxFilesBytes)}.`;
  }
  return null;
}

// A file record: {embed_id, name, mime, size, data (standard base64)}; `url` an object
// URL of its bytes for previews and opening, made once.
function withUrl(record) {
  if (!record.url) {
    const bytes = Uint8Array.from(atob(record.data), (c) => c.charCodeAt(0));
    record.url = URL.createObjectURL(new Blob([bytes], { type: record.mime || "application/octet-stream" }));
  }
  return record;
}

// The chips of a message's files: an image's thumbnail, every file's name and size, each
// opening (or downloading) the file.
export function fileChips(records) {
  return records.map((record) => {
    withUrl(record);
    const image = kindOf(record) === "image";
    return el("a", {
      class: `file-chip${image ? " file-chip-image" : ""}`, href: record.url, download: record.name,
      title: `${record.name} (${sizeText(record.size)})`, dataset: { embedId: record.embed_id },
    },
    image ? el("img", { src: record.url, alt: record.name, class: "file-thumb" }) : null,
    el("span", { class: "file-name" }, record.name),
    el("span", { class: "file-size" }, sizeText(record.size)));
  });
}

// The files shown with message `messageId` (known to this page), in their order.
export function filesOf(messageId) {
  return (state.messageFiles.get(messageId) || []).map((id) => state.files.get(id)).filter(Boolean);
}

// The composer's attachments: chips in `list`, filled from the file `input` (opened by
// `button`), a paste or a drop on `target`; `status(text)` says why a file was refused.
export class Attachments {
  constructor({ list, input, button, target, status }) {
    this.list = list;
    this.input = input;
    this.status = status;
    this.held = [];
    input.accept = ACCEPT;
    button.addEventListener("click", () => input.click());
    input.addEventListener("change", () => { this.add([...input.files]); input.value = ""; });
    target.addEventListener("paste", (event) => {
      const files = [...(event.clipboardData?.files || [])];
      if (files.length) { event.preventDefault(); this.add(files); }
    });
    target.addEventListener("dragover", (event) => { if (event.dataTransfer?.types.includes("Files")) event.preventDefault(); });
    target.addEventListener("drop", (event) => {
      const files = [...(event.dataTransfer?.files || [])];
      if (files.length) { event.preventDefault(); this.add(files); }
    });
  }

  get count() {
    return this.held.length;
  }

  // Reads and attaches `files` (File objects), refusing those over a limit (said in the
  // status, which an earlier refusal does not keep once these files are all taken).
  async add(files) {
    const problems = [];
    for (const file of files) {
      const problem = fileProblem(file, this.held);
      if (problem) { problems.push(problem); continue; }
      const data = toBase64(new Uint8Array(await file.arrayBuffer()));
      this.held.push({ embed_id: uuidv7(), name: file.name.slice(0, 255) || "file", mime: file.type || "", size: file.size, data });
    }
    this.status(problems.join(" "));
    this.render();
  }

  remove(embedId) {
    this.held = this.held.filter((f) => f.embed_id !== embedId);
    this.render();
  }

  // The attached files, taken out of the composer (sending them).
  take() {
    const taken = this.held;
    this.held = [];
    this.render();
    return taken;
  }

  // Puts files back (a send that could not start).
  restore(files) {
    this.held = [...files, ...this.held];
    this.render();
  }

  clear() {
    this.held = [];
    this.render();
  }

  render() {
    this.list.replaceChildren(...this.held.map((record) => {
      const [chip] = fileChips([record]);
      chip.removeAttribute("href");
      chip.append(el("button", {
        type: "button", class: "file-remove", "aria-label": `Remove ${record.name}`,
        onclick: (event) => { event.preventDefault(); this.remove(record.embed_id); },
      }, "×"));
      return chip;
    }));
    this.list.hidden = !this.held.length;
  }
}

// message.send's `files` of the records.
export function frameFiles(records) {
  return records.map(({ embed_id, name, mime, data }) => ({ embed_id, name, mime, data }));
}

function embedPlaintext({ name, mime, size, data }) {
  return JSON.stringify({ kind: "file", name, mime, size, data });
}

// Encrypts the files of message `messageId` of chat `chatId` as their embeds (stored by
// storeFiles once the server accepted the message) and shows them with the message.
export async function attachToMessage(chatId, messageId, records) {
  const envelopes = [];
  for (const record of records) {
    envelopes.push({
      embed_id: record.embed_id,
      encrypted: await keyring.encryptField({
        chatId, objectId: record.embed_id, field: "embed", role: "-", version: 1, plaintext: embedPlaintext(record),
      }),
    });
    state.files.set(record.embed_id, record);
  }
  state.messageFiles.set(messageId, records.map((r) => r.embed_id));
  state.pendingFiles.set(messageId, { chatId, envelopes });
}

// Stores the embeds of message `messageId`'s files (after message.accepted or
// task.queued: the server made them); an embed already stored (409) stays.
export async function storeFiles(messageId) {
  const pending = state.pendingFiles.get(messageId);
  if (!pending) return;
  state.pendingFiles.delete(messageId);
  for (const { embed_id: embedId, encrypted } of pending.envelopes) {
    try {
      await api("PUT", `/api/chats/${pending.chatId}/embeds/${embedId}/`, { encrypted_content: encrypted, version: 0 });
    } catch (error) {
      if (!(error instanceof HttpError && error.status === 409)) throw error;
    }
  }
}

// Reads the stored file embeds of chat `chatId` this page does not hold yet (REST, then
// decrypted here) into state.files and state.messageFiles; the ids of the messages with
// files, none when offline (the files come with the next opening).
async function loadStoredFiles(chatId) {
  // Offline, opening a chat works on what IndexedDB holds, without a request.
  if (!navigator.onLine) return [];
  let listed;
  try {
    listed = (await api("GET", `/api/chats/${chatId}/embeds/`)).embeds || [];
  } catch (error) {
    return [];
  }
  const byMessage = new Map();
  for (const embed of listed) {
    if (embed.tool !== "file" || !embed.message_id) continue;
    if (!byMessage.has(embed.message_id)) byMessage.set(embed.message_id, []);
    byMessage.get(embed.message_id).push(embed);
  }
  for (const [messageId, embeds] of byMessage) {
    for (const embed of embeds) {
      if (state.files.has(embed.embed_id) || embed.version < 1) continue;
      const record = await readEmbed(chatId, embed.embed_id);
      if (record) state.files.set(embed.embed_id, record);
    }
    state.messageFiles.set(messageId, embeds.map((e) => e.embed_id));
  }
  return [...byMessage.keys()];
}

// Reads the stored files of chat `chatId` (loadStoredFiles) and shows them with their
// messages in `view`.
export async function showStoredFiles(chatId, view) {
  for (const messageId of await loadStoredFiles(chatId)) {
    if (chatId === state.currentChatId) view.setFiles(messageId, filesOf(messageId));
  }
}

// The files of chat `chatId`'s messages for a chat.history answer (docs/protocol.md §13),
// read from the stored embeds: message id -> [{embed_id, name, mime, data}], an image
// without `data` (the server keeps only its name in a history). ws.js historyWithinLimit
// decides which data fits the frame.
export async function historyFiles(chatId) {
  await loadStoredFiles(chatId);
  const files = new Map();
  for (const messageId of state.messageFiles.keys()) {
    const records = filesOf(messageId);
    if (!records.length) continue;
    files.set(messageId, records.map(({ embed_id, name, mime, data }) => (kindOf({ name, mime }) === "image"
      ? { embed_id, name, mime } : { embed_id, name, mime, data })));
  }
  return files;
}

async function readEmbed(chatId, embedId) {
  try {
    const stored = await api("GET", `/api/chats/${chatId}/embeds/${embedId}/`);
    return stored.encrypted_content ? await decryptEmbed(chatId, embedId, stored.encrypted_content) : null;
  } catch (error) {
    return null; // unreadable here: no preview
  }
}

// A file embed's envelope as a file record, or null when it is not a file's.
async function decryptEmbed(chatId, embedId, ciphertext) {
  const plaintext = await keyring.decryptField({ chatId, objectId: embedId, field: "embed", role: "-", version: 1, ciphertext });
  const parsed = JSON.parse(plaintext);
  if (parsed.kind !== "file") return null;
  return { embed_id: embedId, name: String(parsed.name), mime: String(parsed.mime || ""), size: Number(parsed.size) || 0, data: String(parsed.data) };
}

// IndexedDB's outbox row of message `messageId` (ChatStorage.keepOutgoing wrote it) also
// keeps its files' embed envelopes, so a reload before the server answered sends them too;
// a message answered meanwhile keeps no row.
export async function keepOutgoingFiles(messageId) {
  const pending = state.pendingFiles.get(messageId);
  if (!pending) return;
  const row = (await state.store.outbox()).find((r) => r.id === messageId);
  if (!row || !state.outbox.has(messageId)) return;
  await state.store.putOutbox({ ...row, encrypted_files: pending.envelopes });
}

// After ChatStorage.restoreOutbox: the kept messages' files go back into their frames
// (decrypted from their envelopes); a message whose files cannot be read here goes without.
export async function restoreOutboxFiles() {
  for (const row of await state.store.outbox()) {
    const frame = state.outbox.get(row.id);
    if (row.kind !== "message" || !Array.isArray(row.encrypted_files) || !frame) continue;
    const records = [];
    for (const { embed_id: embedId, encrypted } of row.encrypted_files) {
      try {
        const record = await decryptEmbed(row.chat_id, embedId, encrypted);
        if (record) records.push(record);
      } catch (error) {
        // unreadable here: left out
      }
    }
    if (!records.length) continue;
    for (const record of records) state.files.set(record.embed_id, record);
    state.messageFiles.set(row.id, records.map((r) => r.embed_id));
    const kept = new Set(records.map((r) => r.embed_id));
    state.pendingFiles.set(row.id, { chatId: row.chat_id, envelopes: row.encrypted_files.filter((e) => kept.has(e.embed_id)) });
    state.outbox.set(row.id, { ...frame, files: frameFiles(records) });
  }
}

// On lock: the decrypted files and their object URLs go.
export function forgetFiles() {
  for (const record of state.files.values()) if (record.url) URL.revokeObjectURL(record.url);
  state.files.clear();
  state.messageFiles.clear();
  state.pendingFiles.clear();
}

export function attachmentsFromPage(status) {
  return new Attachments({
    list: $("composer-files"), input: $("file-input"), button: $("attach"), target: $("composer"), status,
  });
}
