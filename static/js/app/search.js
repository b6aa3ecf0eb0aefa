// Search across chats: the sidebar's search box over the titles and message texts of
// every chat stored in this browser (so it works offline on what is cached). The index
// (search_index.js) holds decrypted text in memory only; it is filled from IndexedDB's
// ciphertext on first use and kept current from the store's change notices (a chat
// marked stale is read again before the next query). Results show the chat's title and
// the message with its matches highlighted; opening one jumps to the message.
import { displayLine, el } from "./dom.js";
import { SearchIndex, matchRanges, tokens } from "./search_index.js";
import { state } from "./state.js";
import { decryptMessage } from "./storage.js";

const LIMIT = 50;
const SNIPPET_CHARS = 140;
const DEBOUNCE_MS = 60;

// `text` as nodes with `ranges` ([[start, end]], sorted) wrapped in <mark>.
export function highlighted(text, ranges) {
  const nodes = [];
  let at = 0;
  for (const [start, end] of ranges) {
    if (start > at) nodes.push(text.slice(at, start));
    nodes.push(el("mark", {}, text.slice(start, end)));
    at = end;
  }
  if (at < text.length) nodes.push(text.slice(at));
  return nodes;
}

// The part of a long text around its first match, with ranges shifted to fit.
function snippet(text, ranges) {
  if (text.length <= SNIPPET_CHARS) return { text, ranges };
  const first = ranges.length ? ranges[0][0] : 0;
  const start = Math.max(0, Math.min(first - 40, text.length - SNIPPET_CHARS));
  const end = start + SNIPPET_CHARS;
  const lead = start > 0 ? "…" : "";
  const shifted = ranges.filter(([s, e]) => s >= start && e <= end)
    .map(([s, e]) => [s - start + lead.length, e - start + lead.length]);
  return { text: lead + text.slice(start, end) + (end < text.length ? "…" : ""), ranges: shifted };
}

// Wraps the words of `root`'s text that match `words` (normalised) in <mark class="found">.
export function markMatches(root, words) {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const texts = [];
  while (walker.nextNode()) texts.push(walker.currentNode);
  for (const node of texts) {
    const ranges = matchRanges(node.data, words);
    if (!ranges.length) continue;
    const parts = highlighted(node.data, ranges).map((part) => (typeof part === "string" ? document.createTextNode(part) : part));
    for (const part of parts) if (part.nodeName === "MARK") part.className = "found";
    node.replaceWith(...parts);
  }
}

export class ChatSearch {
  // input: the search box, results: the results list (shown instead of `list`, the chat
  // list, while there is a query), onOpen(chatId, messageId | null, words): opens a result,
  // onClear(): the query went (what a result marked in the conversation goes too).
  constructor({ input, results, list, onOpen, onClear = () => {} }) {
    this.input = input;
    this.results = results;
    this.list = list;
    this.onOpen = onOpen;
    this.onClear = onClear;
    this.index = new SearchIndex();
    this.stale = new Set(); // chat ids to read again before the next query
    this.titles = new Map(); // chat id -> the title indexed
    this.loading = null;
    this.timer = 0;
    input.addEventListener("input", () => {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.run(), DEBOUNCE_MS);
    });
    input.addEventListener("focus", () => this.ensureLoaded());
    input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") { event.stopPropagation(); this.reset(); }
      if (event.key === "Enter") { event.preventDefault(); this.results.querySelector("button")?.click(); }
    });
  }

  // A chat's stored title or messages changed (store.js onChange).
  chatChanged(chatId) {
    if (this.loading) this.stale.add(chatId);
  }

  // On lock: the plaintext goes.
  clear() {
    this.index.clear();
    this.loading = null;
    this.stale.clear();
    this.titles.clear();
    this.reset();
  }

  reset() {
    this.onClear();
    this.input.value = "";
    this.results.replaceChildren();
    delete this.results.dataset.query;
    this.results.hidden = true;
    this.list.hidden = false;
  }

  ensureLoaded() {
    if (!this.loading) {
      this.loading = (async () => {
        // A few chats at a time: their reads and decryptions overlap.
        const chatIds = [...state.chats.keys()];
        for (let i = 0; i < chatIds.length; i += 16) {
          await Promise.all(chatIds.slice(i, i + 16).map((chatId) => this.indexChat(chatId)));
        }
      })();
    }
    return this.loading;
  }

  // (Re)reads one chat's title and messages into the index; a message this device
  // cannot decrypt is left out.
  async indexChat(chatId) {
    this.index.removeChat(chatId);
    this.titles.delete(chatId);
    const chat = state.chats.get(chatId);
    if (!chat || !state.store) return;
    this.syncTitle(chatId, chat.title);
    for (const row of await state.store.messages(chatId)) {
      try {
        const text = await decryptMessage(row);
        if (text) this.index.put({ id: row.message_id, chatId, kind: "message", text });
      } catch (error) {
        // Unreadable here: not searchable either.
      }
    }
  }

  // Titles are decrypted into state.chats after the store changed: compare them there.
  syncTitle(chatId, title) {
    if ((this.titles.get(chatId) || "") === (title || "")) return;
    this.titles.set(chatId, title || "");
    if (title) this.index.put({ id: chatId, chatId, kind: "title", text: title });
    else this.index.remove(chatId);
  }

  async run() {
    const query = this.input.value;
    const words = tokens(query);
    if (!query.trim()) { this.reset(); return; }
    if (!words.length) {
      // Only punctuation or symbols: nothing to look for, and what was typed stays.
      this.list.hidden = true;
      this.results.hidden = false;
      this.results.dataset.query = query;
      this.results.replaceChildren(el("p", { class: "muted search-empty", role: "status" }, "Type a word to search: letters or digits."));
      return;
    }
    await this.ensureLoaded();
    for (const chatId of [...this.stale]) {
      this.stale.delete(chatId);
      await this.indexChat(chatId);
    }
    for (const [chatId, chat] of state.chats) if (this.titles.has(chatId) || chat.title) this.syncTitle(chatId, chat.title);
    if (this.input.value !== query) return; // a newer query runs
    this.show(query, this.index.search(query, LIMIT), words);
  }

  // Shows the results of `query` (which the list's data-query then names).
  show(query, found, words) {
    this.list.hidden = true;
    this.results.hidden = false;
    this.results.dataset.query = query;
    if (!found.length) {
      this.results.replaceChildren(el("p", { class: "muted search-empty", role: "status" }, "No matches in the chats stored here."));
      return;
    }
    this.results.replaceChildren(...found.map((result) => this.row(result, words)));
  }

  row(result, words) {
    const chat = state.chats.get(result.chatId);
    const title = (chat && chat.title ? displayLine(chat.title) : "") || "New chat";
    const titleNodes = result.kind === "title" ? highlighted(result.text, result.ranges) : [title];
    const body = result.kind === "message" ? snippet(result.text, result.ranges) : null;
    return el("button", {
      type: "button", class: "search-result", role: "listitem",
      dataset: { chatId: result.chatId, ...(result.kind === "message" ? { messageId: result.id } : {}) },
      onclick: () => this.onOpen(result.chatId, result.kind === "message" ? result.id : null, words),
    },
    el("span", { class: "search-result-title" }, titleNodes),
    body ? el("span", { class: "search-result-text" }, highlighted(body.text, body.ranges)) : null);
  }
}
