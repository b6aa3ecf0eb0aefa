// The in-memory search index over decrypted chat titles and messages (search.js feeds it).
// An inverted index of normalised tokens: lowercased, diacritics stripped (NFD without
// combining marks), words = runs of letters and digits. Every query word matches the
// tokens it is a prefix of (one-character words only whole tokens); a document matches
// when every query word does. Plaintext stays in this object, never in storage.
//
// document: { id (message id, or chat id for a title), chatId, kind: "title" | "message",
//             text }
// result:   { id, chatId, kind, text, ranges: [[start, end], ...] (matched parts of text) }

const WORD = /[\p{L}\p{N}]+/gu;
const MARKS = /\p{M}+/gu;
const MIN_PREFIX = 2;
const MAX_QUERY_WORDS = 16;

export function normalise(text) {
  return String(text).normalize("NFD").replace(MARKS, "").toLowerCase();
}

// The distinct normalised tokens of `text`.
export function tokens(text) {
  return [...new Set(normalise(text).match(WORD) || [])];
}

// The first index of `sorted` whose value is >= `value`.
function lowerBound(sorted, value) {
  let low = 0;
  let high = sorted.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (sorted[middle] < value) low = middle + 1;
    else high = middle;
  }
  return low;
}

// The original-text ranges of the words of `text` that start with one of `words`
// (normalised query words); a range covers the matched prefix of its word.
export function matchRanges(text, words) {
  const ranges = [];
  for (const found of String(text).matchAll(WORD)) {
    const word = normalise(found[0]);
    const hit = words.filter((w) => (w.length < MIN_PREFIX ? word === w : word.startsWith(w)))
      .reduce((longest, w) => Math.max(longest, w.length), 0);
    if (!hit) continue;
    // Walk the original characters until their normalised form covers the prefix.
    let length = 0;
    let covered = 0;
    for (const char of found[0]) {
      if (covered >= hit) break;
      covered += normalise(char).length;
      length += char.length;
    }
    ranges.push([found.index, found.index + length]);
  }
  return ranges;
}

export class SearchIndex {
  constructor() {
    this.clear();
  }

  clear() {
    this.docs = []; // slot -> document, or null once removed
    this.slots = new Map(); // document id -> slot
    this.byChat = new Map(); // chat id -> Set of its document ids
    this.postings = new Map(); // token -> [slot, ...] in insertion order
    this.sortedTokens = null; // the tokens sorted, rebuilt after new tokens arrive
  }

  get size() {
    return this.slots.size;
  }

  // Adds or replaces a document.
  put(doc) {
    this.remove(doc.id);
    // Removed slots linger in the postings: rebuild once they outnumber the live ones.
    if (this.docs.length > 2 * this.slots.size + 1024) this.compact();
    const slot = this.docs.length;
    this.docs.push(doc);
    this.slots.set(doc.id, slot);
    if (!this.byChat.has(doc.chatId)) this.byChat.set(doc.chatId, new Set());
    this.byChat.get(doc.chatId).add(doc.id);
    for (const token of tokens(doc.text)) {
      let list = this.postings.get(token);
      if (!list) {
        list = [];
        this.postings.set(token, list);
        this.sortedTokens = null;
      }
      list.push(slot);
    }
  }

  compact() {
    const live = this.docs.filter((doc) => doc !== null);
    this.clear();
    for (const doc of live) this.put(doc);
  }

  // A removed document's slot stays in the postings and is skipped when found.
  remove(id) {
    const slot = this.slots.get(id);
    if (slot === undefined) return;
    this.byChat.get(this.docs[slot].chatId)?.delete(id);
    this.docs[slot] = null;
    this.slots.delete(id);
  }

  removeChat(chatId) {
    for (const id of this.byChat.get(chatId) || []) this.remove(id);
    this.byChat.delete(chatId);
  }

  // The tokens a query word matches: itself, or every token it is a prefix of.
  matchingTokens(word) {
    if (word.length < MIN_PREFIX) return this.postings.has(word) ? [word] : [];
    if (!this.sortedTokens) this.sortedTokens = [...this.postings.keys()].sort();
    const sorted = this.sortedTokens;
    const out = [];
    for (let i = lowerBound(sorted, word); i < sorted.length && sorted[i].startsWith(word); i += 1) {
      out.push(sorted[i]);
    }
    return out;
  }

  // Up to `limit` results for `query`: titles first, then the newest documents (ids are
  // UUIDv7, so a later id is a later message). [] for a query without words.
  search(query, limit = 50) {
    const words = tokens(query).slice(0, MAX_QUERY_WORDS);
    if (!words.length) return [];
    // level[slot] = how many query words matched so far; only slots matching every word
    // before the current one are looked at again.
    const level = new Uint8Array(this.docs.length);
    let candidates = null;
    for (const [index, word] of words.entries()) {
      const next = [];
      for (const token of this.matchingTokens(word)) {
        for (const slot of this.postings.get(token)) {
          if (level[slot] !== index || this.docs[slot] === null) continue;
          level[slot] = index + 1;
          next.push(slot);
        }
      }
      candidates = next;
      if (!candidates.length) return [];
    }
    const ranked = candidates.map((slot) => this.docs[slot]).sort((a, b) => {
      if (a.kind !== b.kind) return a.kind === "title" ? -1 : 1;
      return a.id < b.id ? 1 : a.id > b.id ? -1 : 0;
    });
    return ranked.slice(0, limit).map((doc) => ({ ...doc, ranges: matchRanges(doc.text, words) }));
  }
}
