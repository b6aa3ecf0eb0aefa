// Small DOM and HTTP helpers shared by the app's modules.

export function $(id) {
  return document.getElementById(id);
}

// el("button", {class: "x", type: "button", onclick: fn}, "text", child) -> element.
// Text is always set as text (never parsed as HTML).
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else if (name === "dataset") {
      Object.assign(node.dataset, value);
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Bidi controls (an override such as U+202E shows what follows it reversed: a title
// "<U+202E>txt.exe" reads "exe.txt"), zero-width spaces, byte-order marks and control
// characters; emoji joiners and ZWNJ stay.
const HIDDEN_IN_A_LINE = /[\u0000-\u001f\u007f-\u009f\u061c\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]/g;

// Bidi embeddings and overrides (U+202A-U+202E): they reorder the text after them beyond
// what the words themselves ask for. Isolates and marks, which stay contained, are kept.
const BIDI_OVERRIDES = /[\u202a-\u202e]/g;

// A message's text as shown: without bidi embeddings and overrides.
export function withoutBidiOverrides(text) {
  return String(text).replace(BIDI_OVERRIDES, "");
}

// A title (or another short text from storage or the server) fit for one line of the UI.
export function displayLine(text) {
  return String(text).replace(HIDDEN_IN_A_LINE, "").replace(/\s+/g, " ").trim();
}

export function csrfToken() {
  const input = document.querySelector("#csrf-holder input[name=csrfmiddlewaretoken]");
  return input ? input.value : "";
}

export class HttpError extends Error {
  constructor(status, body) {
    super(`HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

// JSON over fetch with the session cookie and the CSRF header; throws HttpError.
export async function api(method, url, body) {
  const init = {
    method,
    credentials: "same-origin",
    headers: { Accept: "application/json", "X-CSRFToken": csrfToken() },
  };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(url, init);
  const text = await response.text();
  let parsed = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch (error) {
      parsed = { raw: text };
    }
  }
  if (!response.ok) throw new HttpError(response.status, parsed);
  return parsed;
}

export async function postForm(url, fields) {
  const body = new URLSearchParams(fields);
  const response = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "X-CSRFToken": csrfToken(), Accept: "application/json" },
    body,
  });
  if (!response.ok) {
    const parsed = await response.json().catch(() => null);
    throw new HttpError(response.status, parsed);
  }
  return response.json();
}
