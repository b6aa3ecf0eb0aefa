// The conversation view: messages (user text as text, assistant text as sanitised
// markdown), streaming, badges, tool cards, follow-up chips, retry, memory consent, and
// a row of version controls per message (versions.js draws them).
import { el, withoutBidiOverrides } from "./dom.js";
import { fileChips, filesOf } from "./files.js";
import { renderMarkdown } from "./markdown.js";
import { config } from "./state.js";

const ENDED_TEXT = { failed: "The answer failed.", interrupted: "The answer was interrupted.", cancelled: "Stopped." };

// Whether the offered tools ({name, reason}[]) are the tools of names (a stored answer's).
function sameToolNames(offered, names) {
  return Boolean(offered) && offered.length === names.length && offered.every((tool, i) => tool.name === names[i]);
}

// The model badge: the configured label of a model id (app config modelLabels), else the id.
export function modelLabel(model) {
  return (config.modelLabels || {})[model] ?? model;
}

export class ConversationView {
  constructor({ scroller, list, empty, handlers }) {
    this.scroller = scroller;
    this.list = list;
    this.empty = empty;
    this.emptyText = empty.textContent;
    this.handlers = handlers; // {onFollowUp, onRetry, onCancelTool, onConsent}
    this.nodes = new Map(); // message_id -> {root, body, meta, tools, extras, content, role}
    this.pendingRender = new Set();
    this.frame = 0;
  }

  clear() {
    this.nodes.clear();
    this.list.replaceChildren(this.empty);
    this.empty.textContent = this.emptyText;
    this.empty.hidden = false;
  }

  // Says, in the place of the messages, why they are not shown (the chat's key does not open).
  showNotice(text) {
    this.clear();
    this.empty.textContent = text;
  }

  nearBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 120;
  }

  scrollToEnd(force = false) {
    if (force || this.nearBottom()) this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  // message: {message_id, role, content, status, model, language, reason, toolsOffered
  // ({name, reason}[]) or tools_offered (a stored answer's names)}; a user
  // message's status "waiting" is one in the outbox (not yet accepted by the server).
  upsert(message) {
    let node = this.nodes.get(message.message_id);
    const stick = this.nearBottom();
    if (!node) {
      this.empty.hidden = true;
      const body = el("div", { class: "msg-body" });
      const meta = el("div", { class: "msg-meta" });
      const tools = el("div", { class: "msg-tools" });
      const files = el("div", { class: "msg-files", role: "group", "aria-label": "Attached files", hidden: true });
      const extras = el("div", { class: "msg-extras" });
      const controls = el("div", { class: "msg-controls" });
      const root = el("article", {
        class: `msg msg-${message.role}`,
        dataset: { messageId: message.message_id, role: message.role },
        "aria-label": message.role === "user" ? "You said" : "Assistant said",
      }, tools, files, body, meta, controls, extras);
      node = { root, body, meta, tools, files, extras, controls, content: "", role: message.role, status: "", model: "", language: "", reason: "" };
      this.nodes.set(message.message_id, node);
      // A new message goes last; renderStoredMessages puts stored ones in conversation
      // order (order below), which ids need not follow (a client's clock may be ahead).
      this.list.append(root);
      this.setFiles(message.message_id, filesOf(message.message_id));
    }
    if (message.content !== undefined && message.content !== node.content) {
      node.content = message.content;
      this.queueRender(message.message_id);
    }
    if (message.status !== undefined) node.status = message.status;
    if (message.model) node.model = message.model;
    if (message.language) node.language = message.language;
    if (message.reason) node.reason = message.reason;
    if (message.toolsOffered) node.toolsOffered = message.toolsOffered;
    else if (message.tools_offered?.length && !sameToolNames(node.toolsOffered, message.tools_offered)) {
      // A stored answer keeps the names only (the reasons quote the message).
      node.toolsOffered = message.tools_offered.map((name) => ({ name, reason: "" }));
    }
    this.renderMeta(message.message_id);
    if (stick) this.scrollToEnd(true);
    return node;
  }

  // Puts the messages `ids` (the branch shown, from its root) in this order, the other
  // messages shown (a reply streaming, a question waiting) after them as they were.
  order(ids) {
    const first = ids.map((id) => this.nodes.get(id)?.root).filter((root) => root && root.parentNode === this.list);
    const placed = new Set(first);
    const wanted = [...first, ...[...this.list.children].filter((child) => child.dataset.messageId && !placed.has(child))];
    const current = [...this.list.children].filter((child) => child.dataset.messageId);
    if (wanted.every((root, index) => current[index] === root)) return;
    for (const root of wanted) this.list.append(root);
  }

  queueRender(messageId) {
    this.pendingRender.add(messageId);
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      const stick = this.nearBottom();
      for (const id of this.pendingRender) this.renderBody(id);
      this.pendingRender.clear();
      if (stick) this.scrollToEnd(true);
    });
  }

  renderBody(messageId) {
    const node = this.nodes.get(messageId);
    if (!node) return;
    const text = withoutBidiOverrides(node.content);
    if (node.role === "user") node.body.textContent = text;
    else node.body.replaceChildren(renderMarkdown(text));
  }

  renderMeta(messageId) {
    const node = this.nodes.get(messageId);
    const badges = [];
    if (node.role === "assistant") {
      if (node.model) badges.push(el("span", { class: "badge badge-model", title: node.model }, modelLabel(node.model)));
      if (node.language) badges.push(el("span", { class: "badge badge-language", title: "Language" }, node.language));
      // The tools pre-processing offered the model in this turn, each with its reason.
      if (node.toolsOffered && node.toolsOffered.length) {
        const names = node.toolsOffered.map((t) => t.name).join(", ");
        const reasons = node.toolsOffered.map((t) => (t.reason ? `${t.name}: ${t.reason}` : t.name)).join("\n");
        badges.push(el("span", { class: "badge badge-tools", title: `Tools offered\n${reasons}` }, `Tools: ${names}`));
      }
      if (ENDED_TEXT[node.status]) {
        // A failure's reason (error frame) says why and what to do; "Stopped." stays.
        const text = node.status !== "cancelled" && node.reason ? node.reason : ENDED_TEXT[node.status];
        badges.push(el("span", { class: `msg-status-${node.status}` }, text));
      }
    } else if (node.status === "waiting") {
      badges.push(el("span", { class: "msg-status-waiting" }, "Waiting to send…"));
    }
    node.meta.replaceChildren(...badges);
    node.root.classList.toggle("msg-streaming", node.status === "streaming");
    if (node.status) node.root.dataset.status = node.status;
  }

  // The previews of a message's attached files (records of files.js).
  setFiles(messageId, records) {
    const node = this.nodes.get(messageId);
    if (!node) return;
    node.files.replaceChildren(...fileChips(records));
    node.files.hidden = !records.length;
  }

  // A message's failure reason text (shown once its answer ends failed or interrupted).
  setReason(messageId, text) {
    const node = this.nodes.get(messageId);
    if (!node) return;
    node.reason = text;
    this.renderMeta(messageId);
  }

  // Takes a message out of the view (a stopped or failed answer replaced by its retry).
  remove(messageId) {
    const node = this.nodes.get(messageId);
    if (!node) return;
    node.root.remove();
    this.nodes.delete(messageId);
  }

  // Scrolls a message (a search result) into view and marks it; mark(body) may mark
  // words in its rendered text. False when the message is not shown.
  reveal(messageId, mark) {
    const node = this.nodes.get(messageId);
    if (!node) return false;
    // Render what waits for the next frame now, so the marks are not drawn over.
    for (const id of this.pendingRender) this.renderBody(id);
    this.pendingRender.clear();
    for (const found of this.list.querySelectorAll(".msg-found")) found.classList.remove("msg-found");
    mark(node.body);
    node.root.classList.add("msg-found");
    node.root.scrollIntoView({ block: "center" });
    return true;
  }

  // Takes back what reveal() marked (the search that found it was cleared).
  clearFound() {
    for (const found of this.list.querySelectorAll(".msg-found")) found.classList.remove("msg-found");
    for (const mark of this.list.querySelectorAll("mark.found")) {
      const parent = mark.parentNode;
      mark.replaceWith(...mark.childNodes);
      parent.normalize();
    }
  }

  has(messageId) {
    return this.nodes.has(messageId);
  }

  // The ids of the messages shown.
  shownIds() {
    return [...this.nodes.keys()];
  }

  // Replaces a message's version controls (parts: elements, versions.js).
  // A reader at the bottom stays there: the controls under the last answer would
  // otherwise sit under the composer.
  // Takes away every Edit and Regenerate button (a turn started in the chat shown).
  dropTurnControls() {
    for (const node of this.nodes.values()) {
      for (const button of node.controls.querySelectorAll("button.edit, button.regenerate")) button.remove();
    }
  }

  setControls(messageId, parts) {
    const node = this.nodes.get(messageId);
    if (!node) return;
    const stick = this.nearBottom();
    node.controls.replaceChildren(...parts);
    if (stick) this.scrollToEnd(true);
  }

  // A message's body element (the edit form takes its place while open).
  bodyOf(messageId) {
    return this.nodes.get(messageId)?.body || null;
  }

  setStatus(messageId, status) {
    const node = this.nodes.get(messageId);
    if (!node) return;
    node.status = status;
    this.renderMeta(messageId);
  }

  // Adds a Retry button under a failed turn's assistant message.
  showRetry(messageId, userMessageId) {
    const node = this.nodes.get(messageId);
    if (!node) return;
    node.extras.replaceChildren(el("button", {
      type: "button", class: "button-small retry",
      onclick: () => { node.extras.replaceChildren(); this.handlers.onRetry(userMessageId, messageId); },
    }, "Retry"));
  }

  showFollowUps(messageId, followUps) {
    const node = this.nodes.get(messageId);
    if (!node || !followUps || !followUps.length) return;
    const chips = followUps.map((text) => el("button", {
      type: "button", class: "chip follow-up",
      onclick: () => { this.clearFollowUps(); this.handlers.onFollowUp(text); },
    }, text));
    node.extras.replaceChildren(el("div", { class: "follow-ups", role: "group", "aria-label": "Suggested follow-ups" }, chips));
    this.scrollToEnd();
  }

  clearFollowUps() {
    for (const group of this.list.querySelectorAll(".follow-ups")) group.remove();
  }

  // tool: {embed_id, tool, status, preview, error, content}
  toolCard(messageId, tool) {
    let node = this.nodes.get(messageId);
    if (!node) node = this.upsert({ message_id: messageId, role: "assistant", content: "", status: "streaming" });
    let card = node.tools.querySelector(`[data-embed-id="${CSS.escape(tool.embed_id)}"]`);
    if (!card) {
      card = el("div", { class: "tool-card", role: "group", "aria-label": `Tool ${tool.tool || ""}`, dataset: { embedId: tool.embed_id } },
        el("div", { class: "tool-card-head" },
          el("span", { class: "tool-card-name" }, tool.tool || "tool"),
          el("span", { class: "tool-card-status", role: "status" }),
          el("button", { type: "button", class: "button-small tool-cancel", onclick: () => this.handlers.onCancelTool(tool.embed_id) }, "Cancel")),
        el("div", { class: "tool-card-result" }));
      node.tools.append(card);
    }
    if (tool.tool) card.querySelector(".tool-card-name").textContent = tool.tool;
    if (tool.status) {
      card.dataset.status = tool.status;
      card.querySelector(".tool-card-status").textContent = {
        processing: "running…", finished: "done", error: "failed", cancelled: "cancelled",
      }[tool.status] || tool.status;
      card.querySelector(".tool-cancel").hidden = tool.status !== "processing";
    }
    const result = card.querySelector(".tool-card-result");
    if (tool.error) result.textContent = tool.error;
    else if (tool.content !== undefined && tool.content !== null) result.textContent = typeof tool.content === "string" ? tool.content : JSON.stringify(tool.content, null, 2);
    else if (tool.preview && !result.textContent) result.textContent = typeof tool.preview === "string" ? tool.preview : JSON.stringify(tool.preview);
    this.scrollToEnd();
  }

  // request: {chatId, requestId, categories (to ask about), ...} is handed back to
  // handlers.onConsent with `chosen`, the categories the user allowed.
  consentPrompt(request) {
    const { categories } = request;
    const boxes = categories.map((category) => el("label", {},
      el("input", { type: "checkbox", value: category, checked: true }), ` ${category}`));
    const form = el("form", { class: "consent", "aria-label": "Memory consent" },
      el("p", {}, "May the assistant use what it remembers about you in this chat?"),
      el("fieldset", {}, el("legend", { class: "visually-hidden" }, "Memory categories"), boxes),
      el("div", { class: "row" },
        el("button", { type: "submit", class: "button-primary button-small" }, "Allow selected"),
        el("button", { type: "button", class: "button-small consent-deny" }, "Not now")));
    const answer = (chosen) => {
      form.remove();
      this.handlers.onConsent({ ...request, chosen });
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      answer([...form.querySelectorAll("input:checked")].map((box) => box.value));
    });
    form.querySelector(".consent-deny").addEventListener("click", () => answer([]));
    this.empty.hidden = true;
    this.list.append(form);
    this.scrollToEnd(true);
  }

  notice(text) {
    this.list.append(el("p", { class: "notice", role: "status" }, text));
    this.scrollToEnd();
  }
}
