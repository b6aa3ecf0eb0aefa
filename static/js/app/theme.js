// Colour theme: follows the system unless the user picked light or dark (kept in
// localStorage; it is a preference, not a secret). Every [data-theme-toggle] cycles it.
const KEY = "openmates.theme";
const ORDER = ["auto", "light", "dark"];

function current() {
  const stored = localStorage.getItem(KEY);
  return ORDER.includes(stored) ? stored : "auto";
}

function apply(theme) {
  if (theme === "auto") document.documentElement.removeAttribute("data-theme");
  else document.documentElement.setAttribute("data-theme", theme);
  for (const button of document.querySelectorAll("[data-theme-toggle]")) {
    button.textContent = `Theme: ${theme}`;
    button.setAttribute("aria-label", `Colour theme: ${theme}. Switch theme`);
  }
}

export function setTheme(theme) {
  localStorage.setItem(KEY, theme);
  apply(theme);
}

apply(current());
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-theme-toggle]");
  if (!button) return;
  const next = ORDER[(ORDER.indexOf(current()) + 1) % ORDER.length];
  setTheme(next);
});
