// The API tokens page (templates/accounts/api_tokens.html): the Copy button of a new
// token and the confirmation before a token is revoked. A plain script (no module, no
// inline code) so the page's CSP (script-src 'self') allows it.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("button[data-copy]")) {
    button.addEventListener("click", () => copyToken(button));
  }
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) {
        event.preventDefault();
      }
    });
  }
});

async function copyToken(button) {
  const source = document.getElementById(button.dataset.copy);
  const status = button.parentElement.querySelector("[data-copy-status]");
  if (!source) {
    return;
  }
  const text = source.textContent.trim();
  try {
    await navigator.clipboard.writeText(text);
    if (status) status.textContent = "Copied.";
  } catch {
    // No clipboard permission (or not a secure context): select the token for Ctrl+C.
    const range = document.createRange();
    range.selectNodeContents(source);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    if (status) status.textContent = "Selected: press Ctrl+C (⌘C) to copy.";
  }
}
