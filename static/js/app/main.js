// The chat app's wiring: the key screens, the socket and its handlers (handlers.js), the
// IndexedDB store and the server copies (storage.js), the chat list and the conversation
// view with the user's actions (actions.js); the state they share is state.js.
import { $ } from "./dom.js";
import { openStore } from "./store.js";
import { ChatSocket, chatSocketUrl } from "./ws.js";
import { ChatList } from "./chatlist.js";
import { ConversationView } from "./conversation.js";
import { setupKeyScreens, showScreen } from "./keys.js";
import { ChatActions } from "./actions.js";
import { frameHandlers } from "./handlers.js";
import { Screen } from "./screen.js";
import { clearState, config, state, userId } from "./state.js";
import { ChatStorage } from "./storage.js";

// The views call the actions and storage below only on user input, after this module ran.
const view = new ConversationView({
  scroller: $("messages"),
  list: $("messages-inner"),
  empty: $("empty-state"),
  handlers: {
    onFollowUp: (text) => actions.send(text),
    onRetry: (userMessageId) => actions.retry(userMessageId),
    onCancelTool: (embedId) => state.socket && state.socket.send({ type: "skill.cancel", embed_id: embedId }),
    onConsent: ({ chatId, requestId, allowed }) => state.socket.send({
      type: "memory.consent", chat_id: chatId, request_id: requestId, allowed,
    }),
  },
});

const chatList = new ChatList({
  container: $("chat-list"),
  spacer: $("chat-list-spacer"),
  onOpen: (chatId) => actions.openChat(chatId),
  onRename: (chatId, title) => storage.updateChatMeta(chatId, { title }),
  onPin: (chatId, pinned) => storage.updateChatMeta(chatId, { pinned }),
  onDelete: (chatId) => actions.deleteChat(chatId),
});

const screen = new Screen({ view, chatList });
const storage = new ChatStorage(screen);
const actions = new ChatActions({ screen, storage, view, chatList });
const app = { screen, storage, view };

// --- start, lock ------------------------------------------------------------------------

async function startApp() {
  showScreen("app");
  state.store = await openStore(userId);
  const stored = await state.store.chats();
  // Decrypt in parallel batches: a thousand chats must not wait on each other.
  for (let i = 0; i < stored.length; i += 100) {
    await Promise.all(stored.slice(i, i + 100).map((record) => storage.showChat(record)));
  }
  screen.refreshList();
  const socket = new ChatSocket(chatSocketUrl());
  state.socket = socket;
  for (const [type, handler] of Object.entries(frameHandlers)) {
    socket.addEventListener(type, (event) => {
      Promise.resolve(handler(app, event.detail)).catch((error) => screen.status(`Error: ${error.message}`));
    });
  }
  socket.connect();
  screen.newChat();
}

function lockApp() {
  clearState();
  view.clear();
  chatList.setChats([]);
  keyScreens.lock();
}

const keyScreens = setupKeyScreens({ userId, onUnlocked: () => startApp() });

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
  picker.addEventListener("change", () => { state.instance = picker.value; });
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
    if (!text.trim()) return;
    input.value = "";
    grow();
    actions.send(text);
  });
}

function setupControls() {
  setupInstancePicker();
  setupComposer();
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !$("app").hidden && !$("confirm-dialog").open) actions.stop();
  });
  $("stop").addEventListener("click", () => actions.stop());
  $("new-chat").addEventListener("click", () => screen.newChat());
  $("lock").addEventListener("click", lockApp);
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
