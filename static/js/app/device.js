// "Remember this device" (docs/crypto.md §2): the unwrapped master key kept across reloads
// and tabs as the non-extractable CryptoKey the keyring holds, in an IndexedDB database of
// its own. Structured cloning stores a CryptoKey with its extractable flag, so no page
// script can read its bytes later; the key only wraps and unwraps chat keys.
//
// devices: { user_id, master_key_id (b64), session (the page's sessionTag), key: CryptoKey }
//
// A record is used only by the same user, under the same server session and master key
// id; any other record found is deleted. Lock, sign-out and the sign-in page (a session
// that ended) delete it.

const DB_NAME = "openmates-device";
const STORE = "devices";

function promisify(request) {
  return new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

// Runs `work(objectStore)` in one transaction and closes the database, so a deletion of it
// (the sign-in page, another tab) is never blocked by a connection left open here.
async function withStore(mode, work) {
  const request = indexedDB.open(DB_NAME, 1);
  request.onupgradeneeded = () => request.result.createObjectStore(STORE, { keyPath: "user_id" });
  const db = await promisify(request);
  try {
    const tx = db.transaction(STORE, mode);
    const result = await promisify(work(tx.objectStore(STORE)));
    await new Promise((resolve, reject) => {
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
    return result;
  } finally {
    db.close();
  }
}

// Keeps `remembered` ({userId, masterKeyId, key} from keyring.rememberable()) for this
// session. Refuses a key that could be exported.
export async function rememberDevice(remembered, sessionTag) {
  if (remembered.key.extractable) throw new Error("refusing to store an extractable master key");
  await withStore("readwrite", (store) => store.put({
    user_id: remembered.userId, master_key_id: remembered.masterKeyId, session: sessionTag,
    key: remembered.key,
  }));
}

// The remembered key of `userId` ({userId, masterKeyId, key}) when it was stored under
// this session for this master key id, else null (and a stale record is deleted).
export async function recallDevice(userId, { sessionTag, masterKeyId }) {
  const record = await withStore("readonly", (store) => store.get(String(userId)));
  if (!record) return null;
  const usable = record.session === sessionTag && record.master_key_id === masterKeyId
    && record.key instanceof CryptoKey && !record.key.extractable;
  if (!usable) {
    await forgetDevice(userId);
    return null;
  }
  return { userId: record.user_id, masterKeyId: record.master_key_id, key: record.key };
}

export async function forgetDevice(userId) {
  await withStore("readwrite", (store) => store.delete(String(userId)));
}

// Signed out: no remembered key of anyone stays in this browser profile.
export function forgetAllDevices() {
  return promisify(indexedDB.deleteDatabase(DB_NAME));
}
