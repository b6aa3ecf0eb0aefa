// OpenMates browser crypto (docs/crypto.md §2–§3), Web Crypto only.
//
// Keys live inside a keyring's closure as non-extractable CryptoKeys: never on window,
// never in storage unwrapped. The server stores only what `createUserKeys`,
// `changePassphrase` and `recover` return (wrapped keys, key ids, KDF salt and parameters).
//
// Formats (base64 is standard base64):
//   envelope   = b64(0x01 | key_id (8 bytes) | iv (12 bytes) | AES-256-GCM ciphertext+tag)
//   field AD   = "om1|<user_id>|<chat_id>|<object_id>|<field>|<role>|<version>"
//   chat key   = envelope of the raw 32-byte chat key under the master key,
//                key_id = master key id, AD "om1|wrap|<user_id>|<chat_id>"
//   master key = envelope of the raw 32-byte master key under the passphrase key
//                (key_id = kdf.key_id, AD "om1|wrap|<user_id>|master|passphrase") and
//                under the recovery key (key_id = recovery key id,
//                AD "om1|wrap|<user_id>|master|recovery")
//   chat key id  = first 8 bytes of SHA-256(wrapped chat key envelope bytes)
//   embed key    = HKDF-SHA256(chat key, salt "om1-embed", info embed id)
//   embed key id = first 8 bytes of SHA-256(chat key id | embed id)
//   recovery key = base32(32 random bytes | first 2 bytes of their SHA-256), groups of 5
//
// Every failure throws CryptoError with a stable `code`.

const subtle = globalThis.crypto.subtle;
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

export const ENVELOPE_VERSION = 0x01;
export const KDF_FLOOR = Object.freeze({ pbkdf2Iterations: 600000, saltBytes: 16 });
export const FIELDS = Object.freeze([
  "content", "title", "summary", "tags", "follow_ups", "category", "icon", "embed",
]);
export const ROLES = Object.freeze(["user", "assistant", "system", "-"]);
const KEY_ID_BYTES = 8;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const MIN_PASSPHRASE_LENGTH = 8;
const BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

export class CryptoError extends Error {
  // code: wrong_passphrase | bad_recovery_key | kdf_below_floor | unsupported_kdf |
  //       passphrase_is_login_password | passphrase_too_short | locked | unknown_chat_key |
  //       wrong_key | decryption_failed | stale_version | malformed | invalid_argument
  constructor(code, message) {
    super(message || code);
    this.name = "CryptoError";
    this.code = code;
  }
}

// --- encoding -------------------------------------------------------------------------

export function toBase64(bytes) {
  let binary = "";
  const chunk = 0x8000;
  for (let i = 0; i < bytes.length; i += chunk) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + chunk));
  }
  return btoa(binary);
}

export function fromBase64(text) {
  let binary;
  try {
    binary = atob(text);
  } catch (error) {
    throw new CryptoError("malformed", "not base64");
  }
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

function equalBytes(a, b) {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i += 1) diff |= a[i] ^ b[i];
  return diff === 0;
}

function randomBytes(n) {
  return globalThis.crypto.getRandomValues(new Uint8Array(n));
}

async function sha256(bytes) {
  return new Uint8Array(await subtle.digest("SHA-256", bytes));
}

function packEnvelope(keyId, iv, ciphertext) {
  return toBase64(concat(Uint8Array.of(ENVELOPE_VERSION), keyId, iv, new Uint8Array(ciphertext)));
}

export function parseEnvelope(text) {
  if (typeof text !== "string") throw new CryptoError("malformed", "envelope is not a string");
  const raw = fromBase64(text);
  if (raw.length < 1 + KEY_ID_BYTES + IV_BYTES + TAG_BYTES) {
    throw new CryptoError("malformed", "envelope too short");
  }
  if (raw[0] !== ENVELOPE_VERSION) {
    throw new CryptoError("malformed", `unknown envelope version ${raw[0]}`);
  }
  return {
    raw,
    keyId: raw.subarray(1, 1 + KEY_ID_BYTES),
    iv: raw.subarray(1 + KEY_ID_BYTES, 1 + KEY_ID_BYTES + IV_BYTES),
    ciphertext: raw.subarray(1 + KEY_ID_BYTES + IV_BYTES),
  };
}

// --- recovery key text ----------------------------------------------------------------

function base32Encode(bytes) {
  let bits = 0;
  let value = 0;
  let out = "";
  for (const byte of bytes) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += BASE32[(value << (5 - bits)) & 31];
  return out;
}

function base32Decode(text) {
  let bits = 0;
  let value = 0;
  const out = [];
  for (const char of text) {
    const index = BASE32.indexOf(char);
    if (index < 0) throw new CryptoError("bad_recovery_key", "the recovery key has a typo");
    value = (value << 5) | index;
    bits += 5;
    if (bits >= 8) {
      out.push((value >>> (bits - 8)) & 255);
      bits -= 8;
    }
  }
  if ((value & ((1 << bits) - 1)) !== 0) {
    throw new CryptoError("bad_recovery_key", "the recovery key has a typo");
  }
  return new Uint8Array(out);
}

async function formatRecoveryKey(raw) {
  const checksum = (await sha256(raw)).subarray(0, 2);
  const text = base32Encode(concat(raw, checksum));
  return text.match(/.{1,5}/g).join("-");
}

async function parseRecoveryKey(text) {
  const cleaned = String(text).toUpperCase().replace(/[\s-]/g, "");
  const bytes = base32Decode(cleaned);
  if (bytes.length !== 34) throw new CryptoError("bad_recovery_key", "wrong recovery key length");
  const raw = bytes.subarray(0, 32);
  const checksum = (await sha256(raw)).subarray(0, 2);
  if (!equalBytes(checksum, bytes.subarray(32))) {
    throw new CryptoError("bad_recovery_key", "the recovery key has a typo");
  }
  return raw;
}

// --- passphrase key -------------------------------------------------------------------

export function checkKdf(kdf) {
  if (!kdf || kdf.name !== "PBKDF2") {
    throw new CryptoError("unsupported_kdf", "only PBKDF2-SHA256 is supported in this client");
  }
  if (kdf.hash !== "SHA-256") {
    throw new CryptoError("kdf_below_floor", "PBKDF2 must use SHA-256");
  }
  if (!Number.isInteger(kdf.iterations) || kdf.iterations < KDF_FLOOR.pbkdf2Iterations) {
    throw new CryptoError(
      "kdf_below_floor",
      `PBKDF2 needs at least ${KDF_FLOOR.pbkdf2Iterations} iterations, got ${kdf.iterations}`,
    );
  }
  const salt = fromBase64(kdf.salt || "");
  if (salt.length < KDF_FLOOR.saltBytes) {
    throw new CryptoError("kdf_below_floor", `the salt needs ${KDF_FLOOR.saltBytes} bytes`);
  }
  if (fromBase64(kdf.key_id || "").length !== KEY_ID_BYTES) {
    throw new CryptoError("malformed", "kdf.key_id must be 8 bytes");
  }
  return salt;
}

async function passphraseKey(passphrase, kdf) {
  const salt = checkKdf(kdf);
  const material = await subtle.importKey("raw", encoder.encode(passphrase), "PBKDF2", false, [
    "deriveKey",
  ]);
  return subtle.deriveKey(
    { name: "PBKDF2", hash: "SHA-256", salt, iterations: kdf.iterations },
    material,
    { name: "AES-GCM", length: 256 },
    false,
    ["wrapKey", "unwrapKey"],
  );
}

function checkNewPassphrase(passphrase, loginPassword) {
  if (typeof passphrase !== "string" || passphrase.length < MIN_PASSPHRASE_LENGTH) {
    throw new CryptoError(
      "passphrase_too_short",
      `the passphrase needs at least ${MIN_PASSPHRASE_LENGTH} characters`,
    );
  }
  if (loginPassword !== undefined && loginPassword !== null && passphrase === loginPassword) {
    throw new CryptoError(
      "passphrase_is_login_password",
      "the passphrase must differ from the login password (the server sees that one)",
    );
  }
}

function newKdf(iterations) {
  const kdf = {
    name: "PBKDF2",
    hash: "SHA-256",
    iterations: iterations ?? KDF_FLOOR.pbkdf2Iterations,
    salt: toBase64(randomBytes(16)),
    key_id: toBase64(randomBytes(KEY_ID_BYTES)),
  };
  checkKdf(kdf);
  return kdf;
}

// --- wrapping -------------------------------------------------------------------------

function masterAd(userId, via) {
  return encoder.encode(`om1|wrap|${userId}|master|${via}`);
}

function chatKeyAd(userId, chatId) {
  return encoder.encode(`om1|wrap|${userId}|${chatId}`);
}

async function wrapRaw(key, wrappingKey, keyId, additionalData) {
  const iv = randomBytes(IV_BYTES);
  const wrapped = await subtle.wrapKey("raw", key, wrappingKey, {
    name: "AES-GCM", iv, additionalData,
  });
  return packEnvelope(keyId, iv, wrapped);
}

async function unwrapRaw(envelope, wrappingKey, expectedKeyId, additionalData, algorithm,
  usages, extractable, failure) {
  const parsed = parseEnvelope(envelope);
  if (!equalBytes(parsed.keyId, expectedKeyId)) {
    throw new CryptoError("wrong_key", "wrapped under another key");
  }
  try {
    return await subtle.unwrapKey(
      "raw", parsed.ciphertext, wrappingKey,
      { name: "AES-GCM", iv: parsed.iv, additionalData },
      algorithm, extractable, usages,
    );
  } catch (error) {
    throw new CryptoError(failure, "the key does not unwrap");
  }
}

const MASTER_USAGES = ["wrapKey", "unwrapKey"];

function unwrapMaster(userKeys, userId, wrappingKey, via, extractable) {
  const [envelope, keyId, failure] = via === "passphrase"
    ? [userKeys.wrapped_master_key, fromBase64(userKeys.kdf.key_id), "wrong_passphrase"]
    : [userKeys.recovery_wrapped_master_key, fromBase64(userKeys.recovery_key_id),
      "bad_recovery_key"];
  return unwrapRaw(envelope, wrappingKey, keyId, masterAd(userId, via), { name: "AES-GCM" },
    MASTER_USAGES, extractable, failure);
}

async function recoveryWrappingKey(raw) {
  return subtle.importKey("raw", raw, { name: "AES-GCM" }, false, ["wrapKey", "unwrapKey"]);
}

function checkArgs(userId, ...ids) {
  for (const value of [userId, ...ids]) {
    if (value === undefined || value === null || String(value) === "" || String(value).includes("|")) {
      throw new CryptoError("invalid_argument", "ids must be non-empty and free of '|'");
    }
  }
}

// --- the keyring ----------------------------------------------------------------------

export function createKeyring() {
  // Everything secret stays in these bindings; nothing here is reachable from outside.
  let userId = null;
  let masterKey = null;
  let masterKeyId = null;
  const chatKeys = new Map(); // chat id -> { aes, hkdf, keyId }
  const embedKeys = new Map(); // chat id|embed id -> { aes, keyId }
  const highestVersion = new Map(); // chat id|object id -> highest version seen

  function requireUnlocked() {
    if (masterKey === null) throw new CryptoError("locked", "unlock the keys first");
  }

  function adopt(uid, key, keyIdB64) {
    userId = String(uid);
    masterKey = key;
    masterKeyId = fromBase64(keyIdB64);
    chatKeys.clear();
    embedKeys.clear();
  }

  async function createUserKeys({ userId: uid, passphrase, loginPassword, iterations } = {}) {
    checkArgs(uid);
    checkNewPassphrase(passphrase, loginPassword);
    const kdf = newKdf(iterations);
    const masterKeyIdB64 = toBase64(randomBytes(KEY_ID_BYTES));
    const recoveryKeyId = randomBytes(KEY_ID_BYTES);
    // Extractable only inside this function, to be wrapped twice; then dropped.
    const fresh = await subtle.generateKey({ name: "AES-GCM", length: 256 }, true, MASTER_USAGES);
    const passKey = await passphraseKey(passphrase, kdf);
    const recoveryRaw = randomBytes(32);
    const recoveryKey = await recoveryWrappingKey(recoveryRaw);
    const userKeys = {
      wrapped_master_key: await wrapRaw(fresh, passKey, fromBase64(kdf.key_id),
        masterAd(uid, "passphrase")),
      recovery_wrapped_master_key: await wrapRaw(fresh, recoveryKey, recoveryKeyId,
        masterAd(uid, "recovery")),
      master_key_id: masterKeyIdB64,
      recovery_key_id: toBase64(recoveryKeyId),
      kdf,
    };
    const recoveryText = await formatRecoveryKey(recoveryRaw);
    recoveryRaw.fill(0);
    adopt(uid, await unwrapMaster(userKeys, uid, passKey, "passphrase", false), masterKeyIdB64);
    return { userKeys, recoveryKey: recoveryText };
  }

  async function unlock({ userId: uid, userKeys, passphrase }) {
    checkArgs(uid);
    const passKey = await passphraseKey(passphrase, userKeys.kdf);
    adopt(uid, await unwrapMaster(userKeys, uid, passKey, "passphrase", false),
      userKeys.master_key_id);
  }

  async function unlockWithRecoveryKey({ userId: uid, userKeys, recoveryKey }) {
    checkArgs(uid);
    const raw = await parseRecoveryKey(recoveryKey);
    const wrapping = await recoveryWrappingKey(raw);
    raw.fill(0);
    adopt(uid, await unwrapMaster(userKeys, uid, wrapping, "recovery", false),
      userKeys.master_key_id);
  }

  // "Remember this device": the unlocked master key as the non-extractable CryptoKey it
  // is here, with its owner and id, to be stored in IndexedDB (app/device.js) and given
  // back to unlockWithDeviceKey after a reload. Its bytes cannot be read from it.
  function rememberable() {
    requireUnlocked();
    if (masterKey.extractable) throw new CryptoError("invalid_argument", "the master key is extractable");
    return Object.freeze({ userId, masterKeyId: toBase64(masterKeyId), key: masterKey });
  }

  // Adopts a remembered master key ({userId, masterKeyId, key}); refuses a key that is
  // extractable or not an AES-GCM wrapping key.
  async function unlockWithDeviceKey({ userId: uid, masterKeyId: keyIdB64, key }) {
    checkArgs(uid);
    const fits = key instanceof CryptoKey && !key.extractable && key.algorithm.name === "AES-GCM"
      && MASTER_USAGES.every((usage) => key.usages.includes(usage));
    if (!fits) throw new CryptoError("invalid_argument", "not a non-extractable master key");
    adopt(uid, key, keyIdB64);
  }

  // Rewraps the master key only (chat keys stay as they are). Give the old passphrase
  // or the recovery key. Returns the new userKeys to store; the keyring stays unlocked.
  async function changePassphrase({ userId: uid, userKeys, oldPassphrase, recoveryKey,
    newPassphrase, loginPassword, iterations }) {
    checkArgs(uid);
    checkNewPassphrase(newPassphrase, loginPassword);
    let current;
    if (recoveryKey !== undefined) {
      const raw = await parseRecoveryKey(recoveryKey);
      const wrapping = await recoveryWrappingKey(raw);
      raw.fill(0);
      current = await unwrapMaster(userKeys, uid, wrapping, "recovery", true);
    } else {
      const oldKey = await passphraseKey(oldPassphrase, userKeys.kdf);
      current = await unwrapMaster(userKeys, uid, oldKey, "passphrase", true);
    }
    const kdf = newKdf(iterations);
    const newKey = await passphraseKey(newPassphrase, kdf);
    const updated = {
      ...userKeys,
      wrapped_master_key: await wrapRaw(current, newKey, fromBase64(kdf.key_id),
        masterAd(uid, "passphrase")),
      kdf,
    };
    current = null;
    adopt(uid, await unwrapMaster(updated, uid, newKey, "passphrase", false),
      updated.master_key_id);
    return updated;
  }

  // Recovery with the recovery key: a new passphrase, and the recovery key replaced by a
  // fresh one (the old one then opens nothing the server keeps). Returns {userKeys: the
  // keys to store, recoveryKey: the new key's text, to show once}; the keyring stays
  // unlocked. Throws bad_recovery_key / wrong_key / malformed for a key that does not open
  // `userKeys`, and the new passphrase's errors as changePassphrase does.
  async function recover({ userId: uid, userKeys, recoveryKey, newPassphrase, loginPassword,
    iterations }) {
    checkArgs(uid);
    checkNewPassphrase(newPassphrase, loginPassword);
    const raw = await parseRecoveryKey(recoveryKey);
    let current = await unwrapMaster(userKeys, uid, await recoveryWrappingKey(raw), "recovery", true);
    raw.fill(0);
    const kdf = newKdf(iterations);
    const newKey = await passphraseKey(newPassphrase, kdf);
    const recoveryRaw = randomBytes(32);
    const recoveryKeyId = randomBytes(KEY_ID_BYTES);
    const updated = {
      ...userKeys,
      wrapped_master_key: await wrapRaw(current, newKey, fromBase64(kdf.key_id),
        masterAd(uid, "passphrase")),
      recovery_wrapped_master_key: await wrapRaw(current, await recoveryWrappingKey(recoveryRaw),
        recoveryKeyId, masterAd(uid, "recovery")),
      recovery_key_id: toBase64(recoveryKeyId),
      kdf,
    };
    current = null;
    const recoveryText = await formatRecoveryKey(recoveryRaw);
    recoveryRaw.fill(0);
    adopt(uid, await unwrapMaster(updated, uid, newKey, "passphrase", false),
      updated.master_key_id);
    return { userKeys: updated, recoveryKey: recoveryText };
  }

  function lock() {
    userId = null;
    masterKey = null;
    masterKeyId = null;
    chatKeys.clear();
    embedKeys.clear();
  }

  async function loadChatKey(chatId, encryptedChatKey) {
    requireUnlocked();
    checkArgs(userId, chatId);
    const ad = chatKeyAd(userId, chatId);
    const aes = await unwrapRaw(encryptedChatKey, masterKey, masterKeyId, ad,
      { name: "AES-GCM" }, ["encrypt", "decrypt"], false, "decryption_failed");
    const hkdf = await unwrapRaw(encryptedChatKey, masterKey, masterKeyId, ad,
      { name: "HKDF" }, ["deriveKey"], false, "decryption_failed");
    const keyId = (await sha256(parseEnvelope(encryptedChatKey).raw)).subarray(0, KEY_ID_BYTES);
    chatKeys.set(String(chatId), { aes, hkdf, keyId });
  }

  async function createChatKey(chatId) {
    requireUnlocked();
    checkArgs(userId, chatId);
    const fresh = await subtle.generateKey({ name: "AES-GCM", length: 256 }, true,
      ["encrypt", "decrypt"]);
    const wrapped = await wrapRaw(fresh, masterKey, masterKeyId, chatKeyAd(userId, chatId));
    await loadChatKey(chatId, wrapped);
    return wrapped;
  }

  function chatKey(chatId) {
    const entry = chatKeys.get(String(chatId));
    if (!entry) throw new CryptoError("unknown_chat_key", `no key loaded for chat ${chatId}`);
    return entry;
  }

  async function embedKey(chatId, embedId) {
    const slot = `${chatId}|${embedId}`;
    let entry = embedKeys.get(slot);
    if (!entry) {
      const parent = chatKey(chatId);
      const aes = await subtle.deriveKey(
        { name: "HKDF", hash: "SHA-256", salt: encoder.encode("om1-embed"),
          info: encoder.encode(String(embedId)) },
        parent.hkdf,
        { name: "AES-GCM", length: 256 },
        false,
        ["encrypt", "decrypt"],
      );
      const keyId = (await sha256(concat(parent.keyId, encoder.encode(String(embedId)))))
        .subarray(0, KEY_ID_BYTES);
      entry = { aes, keyId };
      embedKeys.set(slot, entry);
    }
    return entry;
  }

  function fieldAd({ chatId, objectId, field, role, version }) {
    checkArgs(userId, chatId, objectId);
    if (!FIELDS.includes(field)) throw new CryptoError("invalid_argument", `unknown field ${field}`);
    if (!ROLES.includes(role)) throw new CryptoError("invalid_argument", `unknown role ${role}`);
    if (!Number.isSafeInteger(version) || version < 0) {
      throw new CryptoError("invalid_argument", "version must be a non-negative integer");
    }
    return encoder.encode(`om1|${userId}|${chatId}|${objectId}|${field}|${role}|${version}`);
  }

  function fieldKey(args) {
    return args.field === "embed" ? embedKey(args.chatId, args.objectId)
      : Promise.resolve(chatKey(args.chatId));
  }

  // Rollback protection: the highest version read of each object. A version counts once
  // a ciphertext of it has been read, not when this keyring encrypts it: the server may
  // still refuse that write (a conflict), and the version it keeps must stay readable.
  function refuseStale(chatId, objectId, version) {
    const highest = highestVersion.get(`${chatId}|${objectId}`);
    if (highest !== undefined && version < highest) {
      throw new CryptoError("stale_version",
        `version ${version} is older than version ${highest} already seen`);
    }
  }

  function noteVersion(chatId, objectId, version) {
    const slot = `${chatId}|${objectId}`;
    const highest = highestVersion.get(slot);
    if (highest === undefined || version > highest) highestVersion.set(slot, version);
  }

  // args: { chatId, objectId, field, role, version, plaintext (string) } -> envelope text
  async function encryptField(args) {
    requireUnlocked();
    const additionalData = fieldAd(args);
    const key = await fieldKey(args);
    refuseStale(args.chatId, args.objectId, args.version);
    const iv = randomBytes(IV_BYTES);
    const ciphertext = await subtle.encrypt({ name: "AES-GCM", iv, additionalData }, key.aes,
      encoder.encode(String(args.plaintext)));
    return packEnvelope(key.keyId, iv, ciphertext);
  }

  // args: { chatId, objectId, field, role, version, ciphertext (envelope text) } -> string
  async function decryptField(args) {
    requireUnlocked();
    const additionalData = fieldAd(args);
    const key = await fieldKey(args);
    const parsed = parseEnvelope(args.ciphertext);
    if (!equalBytes(parsed.keyId, key.keyId)) {
      throw new CryptoError("wrong_key", "encrypted under another key");
    }
    refuseStale(args.chatId, args.objectId, args.version);
    let plaintext;
    try {
      plaintext = await subtle.decrypt({ name: "AES-GCM", iv: parsed.iv, additionalData },
        key.aes, parsed.ciphertext);
    } catch (error) {
      throw new CryptoError("decryption_failed", "tampered, or moved to another object");
    }
    noteVersion(args.chatId, args.objectId, args.version);
    return decoder.decode(plaintext);
  }

  return Object.freeze({
    createUserKeys,
    unlock,
    unlockWithRecoveryKey,
    unlockWithDeviceKey,
    rememberable,
    changePassphrase,
    recover,
    lock,
    isUnlocked: () => masterKey !== null,
    createChatKey,
    loadChatKey,
    hasChatKey: (chatId) => chatKeys.has(String(chatId)),
    encryptField,
    decryptField,
  });
}

// The page's keyring. Other code imports these functions; the keys stay in its closure.
export const keyring = createKeyring();
