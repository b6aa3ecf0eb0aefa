// UUIDv7 ids (docs/crypto.md §1): 48-bit Unix milliseconds, version 7, RFC 4122 variant,
// the rest random; monotonic within one page so ids sort in creation order.
let lastMs = 0;
let lastRand = null;

function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function uuidv7() {
  let ms = Date.now();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  if (ms <= lastMs && lastRand) {
    // Same millisecond: increment the previous random tail so ids stay ordered.
    ms = lastMs;
    bytes.set(lastRand, 6);
    for (let i = 15; i >= 6; i -= 1) {
      bytes[i] = (bytes[i] + 1) & 0xff;
      if (bytes[i] !== 0) break;
    }
  }
  lastMs = ms;
  lastRand = bytes.slice(6);
  bytes[0] = Math.floor(ms / 2 ** 40) & 0xff;
  bytes[1] = Math.floor(ms / 2 ** 32) & 0xff;
  bytes[2] = (ms >>> 24) & 0xff;
  bytes[3] = (ms >>> 16) & 0xff;
  bytes[4] = (ms >>> 8) & 0xff;
  bytes[5] = ms & 0xff;
  bytes[6] = (bytes[6] & 0x0f) | 0x70;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const h = hex(bytes);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
