// Versions of messages (docs/protocol.md §12): a chat's messages form a tree by parent_id;
// an edited question and a regenerated answer are siblings. This module finds the branch
// shown (the chosen child at each step, else the newest) and draws the "‹ 2 / 3 ›"
// arrows, the Edit form of a question and the Regenerate button of the last answer.
import { el } from "./dom.js";

const ENDED = ["failed", "interrupted", "cancelled"];
const ROOT = "";

// The key of a message's place among its siblings: its parent's id ("" for a root).
export function placeOf(row) {
  return row.parent_id || ROOT;
}

// rows: a chat's stored messages, oldest first; a row stored before parents existed
// (parent_id undefined) follows the row before it. Returns Map(parent key -> children,
// oldest first), without an ended answer that a later sibling retried (it is replaced).
export function childrenOf(rows, replaced = new Set()) {
  const children = new Map();
  let previous = null;
  for (const row of rows) {
    const parent = row.parent_id === undefined ? (previous ? previous.message_id : null) : row.parent_id;
    const place = parent || ROOT;
    if (!children.has(place)) children.set(place, []);
    children.get(place).push({ ...row, parent_id: parent });
    previous = row;
  }
  for (const [place, list] of children) {
    const kept = list.filter((row, index) => !replaced.has(row.message_id)
      && !(row.role === "assistant" && ENDED.includes(row.status) && list.slice(index + 1).some((later) => later.role === "assistant")));
    children.set(place, kept);
  }
  return children;
}

// The shown branch: [{row, siblings, index}] from the root, following chosen (Map parent
// key -> child id) or the newest child. A chosen child not stored yet (a question just
// sent) ends the branch there.
export function branchOf(rows, chosen = new Map(), replaced = new Set()) {
  const children = childrenOf(rows, replaced);
  const branch = [];
  let place = ROOT;
  const seen = new Set();
  while (children.has(place) && !seen.has(place)) {
    seen.add(place);
    const siblings = children.get(place);
    if (!siblings.length) break;
    const wanted = chosen.get(place);
    let index = siblings.length - 1;
    if (wanted) {
      index = siblings.findIndex((row) => row.message_id === wanted);
      if (index < 0) break;
    }
    const row = siblings[index];
    branch.push({ row, siblings: siblings.map((s) => s.message_id), index });
    place = row.message_id;
  }
  return branch;
}

// The controls under a shown message: arrows between its versions, Edit (questions) and
// Regenerate (the last answer). handlers: {onSwitch(place, id), onEdit(row), onRegenerate(row)}.
export function versionControls(entry, { last, editable, handlers }) {
  const { row, siblings, index } = entry;
  const parts = [];
  if (siblings.length > 1) {
    const go = (step) => handlers.onSwitch(placeOf(row), siblings[index + step]);
    parts.push(el("span", { class: "versions", role: "group", "aria-label": "Versions" },
      el("button", { type: "button", class: "button-small version-prev", disabled: index === 0, "aria-label": "Previous version", onclick: () => go(-1) }, "‹"),
      el("span", { class: "version-count" }, `${index + 1} / ${siblings.length}`),
      el("button", { type: "button", class: "button-small version-next", disabled: index === siblings.length - 1, "aria-label": "Next version", onclick: () => go(1) }, "›")));
  }
  if (editable && row.role === "user") {
    parts.push(el("button", { type: "button", class: "button-small edit", onclick: () => handlers.onEdit(row) }, "Edit"));
  }
  if (editable && last && row.role === "assistant" && !ENDED.includes(row.status)) {
    parts.push(el("button", { type: "button", class: "button-small regenerate", onclick: () => handlers.onRegenerate(row) }, "Regenerate"));
  }
  return parts;
}

// The inline edit form of a question: resolves with the new text, or null when cancelled.
export function editForm(body, text) {
  return new Promise((resolve) => {
    const input = el("textarea", { class: "edit-input", rows: 3, "aria-label": "Edit your message" });
    input.value = text;
    const shown = [...body.childNodes];
    const done = (value) => { form.remove(); for (const node of shown) body.append(node); resolve(value); };
    const form = el("form", { class: "edit-form" }, input,
      el("div", { class: "row" },
        el("button", { type: "submit", class: "button-primary button-small edit-save" }, "Save"),
        el("button", { type: "button", class: "button-small edit-cancel", onclick: () => done(null) }, "Cancel")));
    form.addEventListener("submit", (event) => { event.preventDefault(); done(input.value.trim() || null); });
    body.replaceChildren(form);
    input.focus();
  });
}
