// Small line icons drawn as inline SVG (stroke: the text colour), for controls that would
// otherwise show an emoji, which renders as an empty box where no emoji font is installed.
// Each icon is decorative (aria-hidden): the control it sits in carries the label.

const SVG = "http://www.w3.org/2000/svg";

// name -> the path data of a 24x24 drawing.
const PATHS = {
  pencil: ["M4 20h4L19 9l-4-4L4 16z", "M14 6l4 4"],
  pin: ["M9 4h6l-1 6 4 4H6l4-4z", "M12 14v6"],
  unpin: ["M9 4h6l-1 6 4 4H6l4-4z", "M12 14v6", "M4 4l16 16"],
  trash: ["M4 7h16", "M9 7V4h6v3", "M6 7l1 13h10l1-13", "M10 11v6", "M14 11v6"],
  chat: ["M4 5h16v11H9l-5 4z"],
};

// icon("trash") -> an <svg class="icon icon-trash"> element; throws on an unknown name.
export function icon(name) {
  const paths = PATHS[name];
  if (!paths) throw new Error(`no icon ${name}`);
  const svg = document.createElementNS(SVG, "svg");
  for (const [key, value] of Object.entries({
    class: `icon icon-${name}`, viewBox: "0 0 24 24", width: "16", height: "16", fill: "none",
    stroke: "currentColor", "stroke-width": "2", "stroke-linecap": "round",
    "stroke-linejoin": "round", "aria-hidden": "true", focusable: "false",
  })) svg.setAttribute(key, value);
  for (const d of paths) {
    const path = document.createElementNS(SVG, "path");
    path.setAttribute("d", d);
    svg.append(path);
  }
  return svg;
}

// Whether this browser draws emoji: "💬" rendered on a canvas differs from a code point no
// font has (drawn as the same empty box a missing emoji would be). Measured once.
let emojiDrawn;
export function emojiSupported() {
  if (emojiDrawn !== undefined) return emojiDrawn;
  try {
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = 20;
    const context = canvas.getContext("2d", { willReadFrequently: true });
    const pixels = (text) => {
      context.clearRect(0, 0, 20, 20);
      context.font = "16px sans-serif";
      context.textBaseline = "top";
      context.fillText(text, 0, 0);
      return context.getImageData(0, 0, 20, 20).data.join(",");
    };
    emojiDrawn = pixels("\u{1F4AC}") !== pixels("\u{10FFFD}");
  } catch {
    emojiDrawn = false;
  }
  return emojiDrawn;
}
