// The page side of bench/chat_search.py: generate, index, query; returns the timings.
// Evaluated by Playwright as a function of {messages, chats, queries}.
({ messages, chats, queries }) => {
  let seed = 42;
  const random = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
  const syllables = ["ka", "ri", "mo", "te", "su", "na", "lo", "pe", "zu", "vi", "ha", "do", "ne", "bu", "sa", "li"];
  const accents = { a: "á", e: "é", o: "ö", u: "ü", i: "í" };
  const vocabulary = [];
  for (let i = 0; i < 20000; i += 1) {
    let word = "";
    for (let s = 0, n = 2 + Math.floor(random() * 3); s < n; s += 1) word += syllables[Math.floor(random() * syllables.length)];
    if (i % 8 === 0) word = word.replace(/[aeoui]/, (v) => accents[v]);
    vocabulary.push(word);
  }
  // Zipf: rank r drawn with weight 1/r.
  const harmonic = vocabulary.map((_, r) => 1 / (r + 1));
  const cumulative = [];
  harmonic.reduce((sum, w, i) => (cumulative[i] = sum + w), 0);
  const total = cumulative[cumulative.length - 1];
  const draw = () => {
    const x = random() * total;
    let low = 0, high = cumulative.length - 1;
    while (low < high) { const mid = (low + high) >> 1; if (cumulative[mid] < x) low = mid + 1; else high = mid; }
    return vocabulary[low];
  };
  const sentence = (n) => Array.from({ length: n }, draw).join(" ");
  const docs = [];
  for (let c = 0; c < chats; c += 1) {
    const chatId = `0190${String(c).padStart(4, "0")}-0000-7000-8000-000000000000`;
    docs.push({ id: chatId, chatId, kind: "title", text: sentence(4) });
  }
  for (let m = 0; m < messages; m += 1) {
    const chatId = docs[m % chats].chatId;
    const id = `0191${String(m).padStart(8, "0")}-0000-7000-8000-000000000000`;
    docs.push({ id, chatId, kind: "message", text: sentence(10 + Math.floor(random() * 111)) + "." });
  }
  const strip = (w) => w.normalize("NFD").replace(/\p{M}+/gu, "");
  const asked = [];
  for (let q = 0; q < queries; q += 1) {
    // One to three adjacent words of a random message, as someone recalling it would type.
    const source = docs[chats + Math.floor(random() * messages)].text.replace(".", "").split(" ");
    const first = Math.floor(random() * (source.length - 2));
    const words = source.slice(first, first + 1 + (q % 3));
    const shaped = words.map((w, i) => {
      if ((q + i) % 4 === 1) return strip(w).slice(0, 3 + (q % 3));
      if ((q + i) % 4 === 2) return w.toUpperCase();
      if ((q + i) % 4 === 3) return strip(w);
      return w;
    });
    asked.push(shaped.join(" "));
  }
  const index = new window.SearchIndex();
  const started = performance.now();
  for (const doc of docs) index.put(doc);
  const buildMs = performance.now() - started;
  const times = [];
  const counts = [];
  for (const query of asked) {
    const t0 = performance.now();
    const results = index.search(query, 50);
    times.push(performance.now() - t0);
    counts.push(results.length);
  }
  return { buildMs, times, counts, indexed: index.size };
}
