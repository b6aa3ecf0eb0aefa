// The chat app's wiring: the key screens, the socket and its handlers (handlers.js), the
// IndexedDB store and the server copies (storage.js), the chat list and the conversation
// view with the user's actions (actions.js), the chat's memory consent line (consent.js),
// the memories page (memories.js, shown at #memories) and the search across chats
// (search.js); the state they share is state.js.
import { $ } from "./dom.js";
import { openStore } from "./store.js";
import { ChatSocket, chatSocketUrl } from "./ws.js";
import { ChatList } from "./chatlist.js";
import { ConversationView } from "./conversation.js";
import { setupKeyScreens, showScreen } from "./keys.js";
import { forgetDevice } from "./device.js";
import { ChatActions, contentProblem } from "./actions.js";
import { frameHandlers } from "./handlers.js";
import { Screen } from "./screen.js";
import { clearState, config, rememberedOpenChat, state, userId } from "./state.js";
import { ChatStorage } from "./storage.js";
import { ConsentLine } from "./consent.js";
import { MemoriesPage } from "./memories.js";
import { ChatSearch, markMatches } from "./search.js";
import { attachmentsFromPage, forgetFiles, restoreOutboxFiles } from "./files.js";

// The views call the actions and storage below only on user input, after this module ran.
const view = new ConversationView({
  scroller: $("messages"),
  list: $("messages-inner"),
  empty: $("empty-state"),
  handlers: {
    onFollowUp: (text) => actions.send(text),
    onRetry: (userMessageId, assistantMessageId) => actions.retry(userMessageId, assistantMessageId),
    onCancelTool: (embedId) => state.socket && state.socket.send({ type: "skill.cancel", embed_id: embedId }),
    onConsent: (answer) => consent.answer(answer),
    onSwitch: (place, messageId) => actions.switchVersion(place, messageId),
    onEdit: (row) => actions.edit(row),
    onRegenerate: (row) => actions.regenerate(row),
  },
});

const chatList = new ChatList({
  container: $("chat-list"),
  spacer: $("chat-list-spacer"),
  onOpen: (chatId) => { leaveMemories(); actions.openChat(chatId); },
  onRename: (chatId, title) => (title
    ? storage.updateChatMeta(chatId, { title }, { explicit: true })
    : screen.status("A chat's name cannot be empty: it keeps the one it had.")),
  onPin: (chatId, pinned) => storage.updateChatMeta(chatId, { pinned }, { explicit: true }),
  onDelete: (chatId) => actions.deleteChat(chatId),
});

const consent = new ConsentLine();
const screen = new Screen({ view, chatList, consent });
const storage = new ChatStorage(screen);
const attachments = attachmentsFromPage((text) => screen.status(text));
const actions = new ChatActions({ screen, storage, view, chatList, attachments });
const memories = new MemoriesPage({ instances: config.instances, confirm: (text, action) => screen.confirm(text, action) });
const app = { screen, storage, view, consent, actions };
const search = new ChatSearch({
  input: $("chat-search"),
  results: $("search-results"),
  list: $("chat-list"),
  onOpen: async (chatId, messageId, words) => {
    leaveMemories();
    if (chatId !== state.currentChatId) await actions.openChat(chatId);
    if (messageId) view.reveal(messageId, (body) => markMatches(body, words));
  },
  onClear: () => view.clearFound(),
});

// --- start, lock ------------------------------------------------------------------------

async function startApp() {
  showScreen("app");
  state.store = await openStore(userId);
  state.store.onChange = (chatId) => search.chatChanged(chatId);
  const stored = await state.store.chats();
  // Decrypt in parallel batches: a thousand chats must not wait on each other.
  for (let i = 0; i < stored.length; i += 100) {
    await Promise.all(stored.slice(i, i + 100).map((record) => storage.showChat(record)));
  }
  screen.refreshList();
  const socket = new ChatSocket(chatSocketUrl());
  state.socket = socket;
  await storage.restoreOutbox();
  await restoreOutboxFiles();
  for (const [type, handler] of Object.entries(frameHandlers)) {
    socket.addEventListener(type, (event) => {
      Promise.resolve(handler(app, event.detail)).catch((error) => screen.status(`Error: ${error.message}`));
    });
  }
  socket.connect();
  // A reload opens the chat the tab had open (a chat gone meanwhile: a new one).
  const reopen = rememberedOpenChat();
  screen.newChat();
  if (reopen && state.chats.has(reopen)) await actions.openChat(reopen);
  showRoute();
}

// #memories shows the memories page of the picked assistant instead of the conversation.
function showRoute() {
  const onMemories = window.location.hash === "#memories" && !$("app").hidden;
  $("memories-page").hidden = !onMemories;
  $("conversation").hidden = onMemories;
  if (onMemories) {
    $("app").dataset.sidebar = "closed";
    memories.open(state.instance);
  }
}

// Lock in one tab locks every tab of this user in the browser: the decrypted chats must
// not stay open in a tab the user did not look at.
const lockChannel = typeof BroadcastChannel === "function" ? new BroadcastChannel(`openmates-lock-${userId}`) : null;
if (lockChannel) {
  lockChannel.addEventListener("message", (event) => {
    if (event.data === "lock" && !$("app").hidden) lockApp({ broadcast: false });
  });
}

function lockApp({ broadcast = true } = {}) {
  if (broadcast && lockChannel) lockChannel.postMessage("lock");
  attachments.clear();
  forgetFiles();
  clearState();
  view.clear();
  memories.clear();
  search.clear();
  chatList.setChats([]);
  return keyScreens.lock();
}

const keyScreens = setupKeyScreens({ userId, sessionTag: config.sessionTag, onUnlocked: () => startApp() });

// Signing out forgets a remembered key before the form goes (the sign-in page, where it
// lands, forgets every one too). This tab's socket closes first: the sign-out's 4401
// would otherwise send it to the sign-in page while the form's own navigation runs.
function setupSignOut() {
  for (const form of document.querySelectorAll("form[action$='/accounts/logout/']")) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (state.socket) state.socket.close();
      forgetDevice(userId).catch(() => {}).finally(() => form.submit());
    }, { once: true });
  }
}

// --- controls ---------------------------------------------------------------------------

function setupInstancePicker() {
  const picker = $("instance-picker");
  for (const instance of config.instances) {
    const option = document.createElement("option");
    option.value = instance.slug;
    option.textContent = instance.name;
    picker.append(option);
  }
  $("instance-picker-row").hidden = config.instances.length < 2;
  picker.addEventListener("change", () => { state.instance = picker.value; screen.setHeader(); });
}

// The composer grows with its text; Enter sends, Shift+Enter starts a new line.
function setupComposer() {
  const input = $("composer-input");
  const grow = () => {
    input.style.height = "auto";
    input.style.height = `${Math.min(input.scrollHeight, 192)}px`;
  };
  input.addEventListener("input", grow);
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = input.value;
    if (!text.trim() && !attachments.count) return;
    // A message the server would refuse stays in the composer, with the reason.
    const problem = text.trim() ? contentProblem(text) : null;
    if (problem) { screen.status(problem); return; }
    input.value = "";
    grow();
    actions.send(text);
  });
}

// Opening a chat or a new one from the memories page goes back to the conversation.
function leaveMemories() {
  if (window.location.hash === "#memories") history.pushState(null, "", window.location.pathname + window.location.search);
  showRoute();
}

function setupControls() {
  setupInstancePicker();
  setupComposer();
  setupSignOut();
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !$("app").hidden && !$("confirm-dialog").open) actions.stop();
  });
  $("stop").addEventListener("click", () => actions.stop());
  $("new-chat").addEventListener("click", () => { leaveMemories(); screen.newChat(); });
  window.addEventListener("hashchange", showRoute);
  $("lock").addEventListener("click", () => lockApp());
  $("menu-toggle").addEventListener("click", () => {
    const open = $("app").dataset.sidebar !== "open";
    $("app").dataset.sidebar = open ? "open" : "closed";
    $("menu-toggle").setAttribute("aria-expanded", String(open));
  });
}

setupControls();
keyScreens.start().catch(() => {
  $("screen-loading").textContent = "Could not reach the server. Reload the page to try again.";
});
