// The encryption screens: first set-up (passphrase + recovery key shown once), unlock on
// later visits (or none, on a remembered device: device.js), and reset with the recovery
// key. Keys stay inside crypto.js's keyring.
import { keyring, CryptoError } from "../crypto.js";
import { forgetDevice, recallDevice, rememberDevice } from "./device.js";
import { $, api, HttpError, postForm } from "./dom.js";

const KEYS_URL = "/api/chats/keys/";
const VERIFY_URL = "/accounts/password/verify/";
const MIN_SCORE = 2;

// A rough passphrase strength score 0..4 from length, variety and obvious patterns.
export function passphraseStrength(text) {
  if (!text) return { score: 0, label: "" };
  let classes = 0;
  for (const pattern of [/[a-z]/, /[A-Z]/, /[0-9]/, /[^A-Za-z0-9]/]) if (pattern.test(text)) classes += 1;
  const words = text.trim().split(/[\s\-_.]+/).filter((w) => w.length >= 3).length;
  let bits = text.length * Math.log2(Math.max(10, classes * 20));
  if (/^(.)\1+$/.test(text) || /^(?:0123|1234|abcd|qwer|pass|word)/i.test(text)) bits /= 3;
  if (words >= 4) bits += 20;
  const score = bits < 40 ? 0 : bits < 60 ? 1 : bits < 80 ? 2 : bits < 110 ? 3 : 4;
  const labels = ["very weak", "weak", "fair", "strong", "very strong"];
  return { score, label: labels[score] };
}

function meter(inputId, barId, textId) {
  const input = $(inputId);
  input.addEventListener("input", () => {
    const { score, label } = passphraseStrength(input.value);
    // An empty field has no strength yet: no bar rather than a red one.
    if (input.value) $(barId).dataset.score = String(score);
    else delete $(barId).dataset.score;
    $(textId).textContent = input.value ? `Strength: ${label}` : "";
  });
}

export function showScreen(name) {
  for (const id of ["screen-loading", "screen-setup", "screen-unlock", "screen-recover", "app"]) {
    $(id).hidden = id !== name;
  }
  const focusTarget = {
    "screen-setup": "setup-passphrase",
    "screen-unlock": "unlock-passphrase",
    "screen-recover": "recover-key",
  }[name];
  if (focusTarget) $(focusTarget).focus();
}

export async function fetchUserKeys() {
  try {
    return await api("GET", KEYS_URL);
  } catch (error) {
    if (error instanceof HttpError && error.status === 404) return null;
    throw error;
  }
}

async function checkLoginPassword(password) {
  const answer = await postForm(VERIFY_URL, { password });
  return answer.ok === true;
}

function newPassphraseProblem(passphrase, again) {
  if (passphrase.length < 8) return "The passphrase needs at least 8 characters.";
  if (passphrase !== again) return "The two passphrases differ.";
  if (passphraseStrength(passphrase).score < MIN_SCORE) {
    return "This passphrase is too easy to guess. Use a longer one, e.g. four unrelated words.";
  }
  return null;
}

// The stored wrapped key names another key than its parameters: not a mistyped passphrase
// but keys that were replaced or damaged on the server.
const KEYS_MISMATCH = "The encryption keys stored for your account do not fit together: "
  + "they were changed or damaged on the server. If you have your recovery key, reset your "
  + "passphrase with it (\"Forgot it? Use the recovery key\"); if that fails too, ask your administrator.";

function describe(error) {
  if (error instanceof CryptoError) {
    return {
      wrong_passphrase: "Wrong passphrase. Try again, or reset it with your recovery key.",
      wrong_key: KEYS_MISMATCH,
      malformed: KEYS_MISMATCH,
      bad_recovery_key: "This recovery key does not fit (check for typos).",
      passphrase_is_login_password: "The passphrase must differ from your login password.",
      passphrase_too_short: "The passphrase needs at least 8 characters.",
      kdf_below_floor: "The stored key parameters are weaker than this app accepts; refusing them.",
    }[error.code] || `Encryption error (${error.code}).`;
  }
  if (error instanceof HttpError && error.body?.code === "permission_denied") {
    return "The server did not accept your login password. Check it and try again.";
  }
  if (error instanceof HttpError && error.body?.code === "locked_out") {
    // The sign-in lockout (django-axes), not the one-minute throttle below: say how long.
    return error.body.message;
  }
  if (error instanceof HttpError && error.status === 429) {
    return "Too many password attempts. Wait a minute, then try again.";
  }
  if (error instanceof HttpError) return `The server answered ${error.status}. Try again.`;
  return "Something went wrong. Check your connection and try again.";
}

// First set-up: checks the login password, creates and saves the user keys, then shows
// the recovery key once.
function setupCreateForm(session, userId) {
  $("setup-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const error = $("setup-error");
    error.textContent = "";
    const passphrase = $("setup-passphrase").value;
    const loginPassword = $("setup-login-password").value;
    const problem = newPassphraseProblem(passphrase, $("setup-passphrase2").value);
    if (problem) { error.textContent = problem; return; }
    if (passphrase === loginPassword) {
      error.textContent = "The passphrase must differ from your login password.";
      return;
    }
    if (!loginPassword) { error.textContent = "Enter your login password."; return; }
    $("setup-submit").disabled = true;
    try {
      if (!(await checkLoginPassword(loginPassword))) {
        error.textContent = "That is not your login password.";
        return;
      }
      error.textContent = "Creating your keys…";
      const created = await keyring.createUserKeys({ userId, passphrase, loginPassword });
      // The server checks the login password again before it stores keys (docs/crypto.md §2).
      const saved = await api("PUT", KEYS_URL, { ...created.userKeys, password: loginPassword });
      session.userKeys = { ...created.userKeys, version: saved.version };
      session.recoveryText = created.recoveryKey;
      error.textContent = "";
      showRecoverySheet(session, created.recoveryKey, false);
    } catch (caught) {
      keyring.lock();
      error.textContent = describe(caught);
    } finally {
      $("setup-submit").disabled = false;
      $("setup-login-password").value = "";
    }
  });
}

// Shows the recovery key `text` once, on the set-up screen's sheet; `replaced`: it replaces
// the key a recovery just used (which opens nothing any more).
function showRecoverySheet(session, text, replaced) {
  session.recoveryText = text;
  showScreen("screen-setup");
  $("setup-form").hidden = true;
  $("setup-recovery").hidden = false;
  $("setup-recovery-replaced").hidden = !replaced;
  $("setup-saved").checked = false;
  $("setup-continue").disabled = true;
  $("setup-recovery-key").textContent = text;
  $("setup-copy").focus();
}

// The recovery key shown once: copy, download, and go on once the user saved it.
function setupRecoverySheet(session, onUnlocked) {
  $("setup-copy").addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(session.recoveryText);
      $("setup-copy-status").textContent = "Copied.";
    } catch (error) {
      $("setup-copy-status").textContent = "Copying failed; select the key and copy it by hand.";
    }
  });
  $("setup-download").addEventListener("click", () => {
    const blob = new Blob([`OpenMates recovery key\n\n${session.recoveryText}\n`], { type: "text/plain" });
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = "openmates-recovery-key.txt";
    link.click();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
    $("setup-copy-status").textContent = "Downloaded.";
  });
  $("setup-saved").addEventListener("change", () => {
    $("setup-continue").disabled = !$("setup-saved").checked;
  });
  $("setup-continue").addEventListener("click", () => {
    session.recoveryText = "";
    $("setup-recovery-key").textContent = "";
    onUnlocked(session.userKeys);
  });
}

// Keeps or forgets the unlocked master key on this device as the user chose; a browser
// that cannot store it (IndexedDB refused) just asks for the passphrase next time.
async function applyRemember(remember, userId, sessionTag) {
  try {
    if (remember) await rememberDevice(keyring.rememberable(), sessionTag);
    else await forgetDevice(userId);
  } catch (error) {
    // Not remembered: the unlock itself succeeded.
  }
}

// Unlocks with the key remembered for this user, session and master key, if any.
async function unlockRemembered(userKeys, userId, sessionTag) {
  try {
    const remembered = await recallDevice(userId, { sessionTag, masterKeyId: userKeys.master_key_id });
    if (!remembered) return false;
    await keyring.unlockWithDeviceKey(remembered);
    return true;
  } catch (error) {
    await forgetDevice(userId).catch(() => {});
    return false;
  }
}

function setupUnlockForm(session, userId, sessionTag, onUnlocked) {
  $("unlock-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const error = $("unlock-error");
    error.textContent = "Unlocking…";
    $("unlock-submit").disabled = true;
    try {
      // The keys as the server has them now: a passphrase changed in another tab or on
      // another device since this page read them no longer opens them here. Offline, the
      // keys read earlier.
      session.userKeys = (await fetchUserKeys().catch(() => null)) || session.userKeys;
      if (!session.userKeys) throw new Error("the user keys cannot be read");
      await keyring.unlock({ userId, userKeys: session.userKeys, passphrase: $("unlock-passphrase").value });
      await applyRemember($("unlock-remember").checked, userId, sessionTag);
      error.textContent = "";
      $("unlock-passphrase").value = "";
      onUnlocked(session.userKeys);
    } catch (caught) {
      error.textContent = describe(caught);
      $("unlock-passphrase").select();
    } finally {
      $("unlock-submit").disabled = false;
    }
  });
  $("unlock-forgot").addEventListener("click", () => showScreen("screen-recover"));
  $("recover-back").addEventListener("click", () => showScreen("screen-unlock"));
}

// Reset with the recovery key: a new passphrase over the same master key, and a new
// recovery key in place of the one used.
function setupRecoverForm(session, userId) {
  $("recover-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const error = $("recover-error");
    error.textContent = "";
    const passphrase = $("recover-passphrase").value;
    const loginPassword = $("recover-login-password").value;
    const problem = newPassphraseProblem(passphrase, $("recover-passphrase2").value);
    if (problem) { error.textContent = problem; return; }
    // The field is emptied after every try (the password is not kept in the page).
    if (!loginPassword) { error.textContent = "Enter your login password."; return; }
    $("recover-submit").disabled = true;
    try {
      if (!(await checkLoginPassword(loginPassword))) {
        error.textContent = "That is not your login password.";
        return;
      }
      session.userKeys = session.userKeys || (await fetchUserKeys());
      // A recovery key is used once: a new one replaces it, shown once like the first.
      const recovered = await keyring.recover({
        userId, userKeys: session.userKeys, recoveryKey: $("recover-key").value, newPassphrase: passphrase, loginPassword,
      });
      const saved = await api("PUT", KEYS_URL, {
        ...recovered.userKeys, version: session.userKeys.version, password: loginPassword,
      });
      session.userKeys = { ...recovered.userKeys, version: saved.version };
      $("recover-key").value = "";
      $("recover-passphrase").value = "";
      $("recover-passphrase2").value = "";
      showRecoverySheet(session, recovered.recoveryKey, true);
    } catch (caught) {
      keyring.lock();
      error.textContent = describe(caught);
    } finally {
      $("recover-submit").disabled = false;
      $("recover-login-password").value = "";
    }
  });
}

// Wires the three screens; `onUnlocked(userKeys)` runs once the keyring is unlocked.
// sessionTag: the page's tag of the server session, which a remembered key is bound to.
// Returns {start(): unlocks a remembered device or shows set-up or unlock, lock(): locks
// the keyring and forgets the remembered key, back to unlock}.
export function setupKeyScreens({ userId, sessionTag, onUnlocked }) {
  // The user's stored keys once read or made, and the recovery key while it is shown.
  const session = { userKeys: null, recoveryText: "" };
  meter("setup-passphrase", "setup-strength-bar", "setup-strength-text");
  meter("recover-passphrase", "recover-strength-bar", "recover-strength-text");
  setupCreateForm(session, userId);
  setupRecoverySheet(session, onUnlocked);
  setupUnlockForm(session, userId, sessionTag, onUnlocked);
  setupRecoverForm(session, userId);
  return {
    async start() {
      // The page says whether keys exist: a first visit asks for none (no 404).
      const known = $("user-keys-set-up");
      const setUp = known ? JSON.parse(known.textContent) !== false : true;
      session.userKeys = setUp ? await fetchUserKeys() : null;
      if (session.userKeys && (await unlockRemembered(session.userKeys, userId, sessionTag))) {
        onUnlocked(session.userKeys);
        return;
      }
      showScreen(session.userKeys ? "screen-unlock" : "screen-setup");
    },
    async lock() {
      keyring.lock();
      await forgetDevice(userId).catch(() => {});
      $("unlock-remember").checked = false;
      showScreen("screen-unlock");
    },
  };
}
