// The memories page (templates/app/_memories.html): what the assistant remembers about the
// user in one instance, over REST /api/memories/<slug>/ (memories/api.py): the list by
// category (newest first, 50 a page), search, add, edit, delete, the memory switch,
// forget everything (after a confirmation) and the JSON export. Memory texts travel in
// clear over TLS; the server keeps them sealed (docs/crypto.md §4). Every failure shows
// the API's {code, message} in the page's alert line.
import { $, api, el, HttpError } from "./dom.js";

export const CATEGORIES = ["preference", "fact", "event", "relationship", "decision", "general"];

// What a failed call shows: the API's message and its stable code.
export function errorText(error) {
  if (error instanceof HttpError) {
    const body = error.body || {};
    if (body.code && body.message) return `${body.message} (${body.code})`;
    return `The server answered ${error.status}.`;
  }
  return `The server could not be reached (${error.message}).`;
}

// "1 memory", "2 memories", "0 memories".
export function countText(count, one, many) {
  return `${count} ${count === 1 ? one : many}`;
}

function categoryOptions(select, { withAll = false, counts = null } = {}) {
  const chosen = select.value;
  const options = CATEGORIES.map((category) => {
    const count = counts ? ` (${counts[category] || 0})` : "";
    return el("option", { value: category }, `${category}${count}`);
  });
  if (withAll) options.unshift(el("option", { value: "" }, "All categories"));
  select.replaceChildren(...options);
  if (chosen && [...select.options].some((option) => option.value === chosen)) select.value = chosen;
}

function dateText(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleString();
}

// The export arrives as JSON; the browser saves it as a file without leaving the page.
function saveJson(filename, body) {
  const url = URL.createObjectURL(new Blob([JSON.stringify(body, null, 2)], { type: "application/json" }));
  const link = el("a", { href: url, download: filename, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export class MemoriesPage {
  // instances: [{slug, name}] (the page's config); confirm(text, action) resolves true
  // when the user confirmed.
  constructor({ instances, confirm }) {
    this.instances = instances;
    this.confirm = confirm;
    this.instance = instances.length ? instances[0].slug : null;
    this.next = null; // the URL of the list's next page
    this.query = ""; // the search shown, "" for the list
    this.setupControls();
  }

  get base() {
    return `/api/memories/${encodeURIComponent(this.instance)}/`;
  }

  setupControls() {
    const picker = $("memories-instance");
    picker.replaceChildren(...this.instances.map((i) => el("option", { value: i.slug }, i.name)));
    picker.hidden = this.instances.length < 2;
    picker.addEventListener("change", () => { this.instance = picker.value; this.reload(); });
    categoryOptions($("memories-add-category"));
    $("memories-add-category").value = "general";
    categoryOptions($("memories-filter"), { withAll: true });
    $("memories-filter").addEventListener("change", () => this.showList());
    $("memories-add").addEventListener("submit", (event) => { event.preventDefault(); this.add(); });
    $("memories-search").addEventListener("submit", (event) => { event.preventDefault(); this.search(); });
    $("memories-search-clear").addEventListener("click", () => { $("memories-search-input").value = ""; this.showList(); });
    $("memories-more").addEventListener("click", () => this.loadPage(this.next, true));
    $("memories-enabled").addEventListener("change", (event) => this.setEnabled(event.target.checked));
    $("memories-export").addEventListener("click", () => this.exportJson());
    $("memories-forget").addEventListener("click", () => this.forget());
  }

  // Shows the page for `instance` (a slug the user is a member of; else the first).
  open(instance) {
    if (instance && this.instances.some((i) => i.slug === instance)) this.instance = instance;
    $("memories-instance").value = this.instance || "";
    return this.reload();
  }

  async reload() {
    this.clearError();
    if (!this.instance) {
      this.showError("You are not a member of any assistant yet.");
      return;
    }
    await Promise.all([this.loadSettings(), this.showList()]);
  }

  // On lock: no memory text stays in the page.
  clear() {
    $("memories-list").replaceChildren();
    $("memories-search-input").value = "";
    $("memories-add-content").value = "";
    this.status("");
    this.clearError();
  }

  showError(text) {
    $("memories-error").textContent = text;
    $("memories-error").hidden = false;
  }

  clearError() {
    $("memories-error").hidden = true;
    $("memories-error").textContent = "";
  }

  status(text) {
    $("memories-status").textContent = text || "";
  }

  // Runs one API call; a failure is shown and answers null.
  async call(method, url, body) {
    try {
      const answer = await api(method, url, body);
      this.clearError();
      return answer ?? {};
    } catch (error) {
      this.showError(errorText(error));
      return null;
    }
  }

  async loadSettings() {
    const settings = await this.call("GET", `${this.base}settings/`);
    if (!settings) return;
    $("memories-enabled").checked = settings.enabled;
    $("memories-instance-off").hidden = settings.instance_enabled;
    categoryOptions($("memories-filter"), { withAll: true, counts: settings.categories || {} });
  }

  showList() {
    this.query = "";
    $("memories-search-clear").hidden = true;
    const category = $("memories-filter").value;
    $("memories-list-title").textContent = category ? `Memories: ${category}` : "All memories";
    const params = new URLSearchParams(category ? { category } : {});
    return this.loadPage(`${this.base}?${params}`, false);
  }

  async loadPage(url, append) {
    if (!url) return;
    const page = await this.call("GET", url);
    if (!page) return;
    this.render(page.results || [], append);
    this.next = page.next ? new URL(page.next, window.location.href).pathname + new URL(page.next, window.location.href).search : null;
    $("memories-more").hidden = !this.next;
  }

  async search() {
    const q = $("memories-search-input").value.trim();
    // A status of an earlier action ("Memory saved.") says nothing about the results.
    this.status("");
    if (!q) { this.showList(); return; }
    const category = $("memories-filter").value;
    const params = new URLSearchParams({ q, ...(category ? { category } : {}) });
    const answer = await this.call("GET", `${this.base}search/?${params}`);
    if (!answer) return;
    this.query = q;
    this.next = null;
    $("memories-more").hidden = true;
    $("memories-search-clear").hidden = false;
    $("memories-list-title").textContent = `Search results for “${q}”`;
    this.render(answer.results || [], false);
  }

  render(memories, append) {
    const list = $("memories-list");
    const items = memories.map((memory) => this.item(memory));
    if (append) list.append(...items);
    else list.replaceChildren(...items);
    this.showEmpty();
  }

  // The empty list's line: a search with no hits is not an empty memory.
  showEmpty() {
    const empty = $("memories-empty");
    empty.textContent = this.query ? `No memory matches “${this.query}”.` : "No memories here yet.";
    empty.hidden = $("memories-list").children.length > 0;
  }

  // memory: {id, category, content, created_at, updated_at, source_chat_id}
  item(memory) {
    const content = el("p", { class: "memory-content" }, memory.content);
    const item = el("li", { class: "memory-item", dataset: { memoryId: memory.id, category: memory.category } },
      el("div", { class: "memory-head" },
        el("span", { class: "badge memory-category" }, memory.category),
        el("span", { class: "muted memory-date", title: "Last changed" }, dateText(memory.updated_at)),
        el("button", { type: "button", class: "button-small memory-edit", "aria-label": `Edit memory: ${memory.content}`, onclick: () => this.edit(item, memory) }, "Edit"),
        el("button", { type: "button", class: "button-small memory-delete", "aria-label": `Delete memory: ${memory.content}`, onclick: () => this.remove(item, memory) }, "Delete")),
      content);
    return item;
  }

  edit(item, memory) {
    const category = el("select", { class: "memory-edit-category", "aria-label": "Category" });
    categoryOptions(category);
    category.value = memory.category;
    const text = el("textarea", { class: "memory-edit-content", rows: 2, maxlength: 2000, "aria-label": "Memory" });
    text.value = memory.content;
    const form = el("form", { class: "memory-edit-form", "aria-label": "Edit memory" }, category, text,
      el("div", { class: "row" },
        el("button", { type: "submit", class: "button-primary button-small" }, "Save"),
        el("button", { type: "button", class: "button-small", onclick: () => item.replaceWith(this.item(memory)) }, "Cancel")));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const changes = {};
      if (category.value !== memory.category) changes.category = category.value;
      if (text.value.trim() !== memory.content) changes.content = text.value;
      if (!Object.keys(changes).length) { item.replaceWith(this.item(memory)); return; }
      const updated = await this.call("PATCH", `${this.base}${encodeURIComponent(memory.id)}/`, changes);
      if (!updated) return;
      form.closest(".memory-item").replaceWith(this.item(updated));
      this.status("Memory saved.");
      this.loadSettings();
    });
    item.replaceChildren(form);
    text.focus();
  }

  async add() {
    const content = $("memories-add-content").value;
    if (!content.trim()) return;
    const created = await this.call("POST", this.base, { category: $("memories-add-category").value, content });
    if (!created) return;
    $("memories-add-content").value = "";
    this.status("Memory added.");
    await Promise.all([this.loadSettings(), this.showList()]);
  }

  async remove(item, memory) {
    if ((await this.call("DELETE", `${this.base}${encodeURIComponent(memory.id)}/`)) === null) return;
    item.remove();
    this.showEmpty();
    this.status("Memory deleted.");
    this.loadSettings();
  }

  async setEnabled(enabled) {
    const settings = await this.call("PUT", `${this.base}settings/`, { enabled });
    if (!settings) { $("memories-enabled").checked = !enabled; return; }
    $("memories-enabled").checked = settings.enabled;
    this.status(settings.enabled ? "Memory is on." : "Memory is off: nothing new is remembered or used.");
  }

  async forget() {
    const name = (this.instances.find((i) => i.slug === this.instance) || {}).name || this.instance;
    const text = `Forget everything ${name} remembers about you? Every memory is destroyed and cannot be recovered.`;
    if (!(await this.confirm(text, "Forget everything"))) return;
    const answer = await this.call("POST", `${this.base}forget/`, { confirm: true });
    if (!answer) return;
    this.status(`Forgotten: ${countText(answer.deleted, "memory", "memories")}.`);
    await Promise.all([this.loadSettings(), this.showList()]);
  }

  async exportJson() {
    const body = await this.call("GET", `${this.base}export/`);
    if (!body) return;
    saveJson(`memories-${this.instance}.json`, body);
    this.status(`Exported ${countText((body.memories || []).length, "memory", "memories")}.`);
  }
}
