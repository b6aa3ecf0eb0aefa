// Model output → safe DOM. marked parses markdown; raw HTML in the text is shown as text,
// images are never loaded (a placeholder names them), code is highlighted by
// highlight.js, and DOMPurify sanitises the result with a short allow-list. Links open
// in a new tab with rel="noopener noreferrer".
import { Marked } from "../../vendor/marked/marked.esm.js";
import DOMPurify from "../../vendor/dompurify/purify.es.js";
import hljs from "../../vendor/highlightjs/highlight.min.js";

function escapeHtml(text) {
  return String(text)
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

function highlight(code, lang) {
  const language = (lang || "").trim().split(/\s+/)[0].toLowerCase();
  try {
    if (language && hljs.getLanguage(language)) {
      return { html: hljs.highlight(code, { language, ignoreIllegals: true }).value, language };
    }
    if (code.length < 20000) {
      const auto = hljs.highlightAuto(code);
      return { html: auto.value, language: auto.language || "" };
    }
  } catch (error) {
    // Fall through to plain escaped text.
  }
  return { html: escapeHtml(code), language };
}

const marked = new Marked({
  gfm: true,
  breaks: false,
  renderer: {
    // Raw HTML from the model is text, never markup.
    html({ text }) {
      return escapeHtml(text);
    },
    // Images are never fetched: only their description is shown.
    image({ text, href }) {
      const label = text || "image";
      return `<span class="blocked-image" title="${escapeHtml(href || "")}">[image: ${escapeHtml(label)}]</span>`;
    },
    code({ text, lang }) {
      const { html, language } = highlight(text, lang);
      const cls = language ? `hljs language-${escapeHtml(language)}` : "hljs";
      return `<pre><code class="${cls}">${html}</code></pre>\n`;
    },
  },
});

const ALLOWED_TAGS = [
  "a", "b", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6",
  "hr", "i", "input", "li", "ol", "p", "pre", "s", "span", "strong", "sub", "sup", "table",
  "tbody", "td", "th", "thead", "tr", "ul",
];
const ALLOWED_ATTR = ["href", "title", "class", "align", "start", "type", "checked", "disabled"];

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
  if (node.tagName === "INPUT") {
    // GitHub task lists only: a disabled checkbox.
    if (node.getAttribute("type") !== "checkbox") node.remove();
    else node.setAttribute("disabled", "");
  }
});

export function sanitize(html) {
  const fragment = DOMPurify.sanitize(html, {
    ALLOWED_TAGS,
    ALLOWED_ATTR,
    ALLOWED_URI_REGEXP: /^(?:https?:|mailto:)/i,
    RETURN_DOM_FRAGMENT: true,
  });
  // A link whose address was refused (javascript:, data:, …) is its text only: no link
  // styling that leads nowhere.
  for (const link of fragment.querySelectorAll("a:not([href])")) link.replaceWith(...link.childNodes);
  return fragment;
}

function addCopyButtons(fragment) {
  for (const pre of fragment.querySelectorAll("pre")) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "code-copy";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy code");
    pre.append(button);
  }
}

// One delegated handler for every copy button on the page.
document.addEventListener("click", async (event) => {
  const button = event.target.closest(".code-copy");
  if (!button) return;
  const code = button.parentElement.querySelector("code");
  try {
    await navigator.clipboard.writeText(code ? code.textContent : "");
    button.textContent = "Copied";
  } catch (error) {
    button.textContent = "Copy failed";
  }
  setTimeout(() => { button.textContent = "Copy"; }, 1500);
});

// Markdown text → a sanitised DocumentFragment ready to insert.
export function renderMarkdown(text) {
  const fragment = sanitize(marked.parse(String(text || "")));
  addCopyButtons(fragment);
  return fragment;
}
