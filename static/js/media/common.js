// What the speech and image views share: the choices' values, the thumbnails' margins,
// the views' <select>s.
import { option } from "../api.js";

export const ALIGNMENT = "alignment";
export const MEAN = "mean";
export const ROLLOUT = "rollout";
export const SMALL = { l: 4, r: 4, t: 22, b: 4 };

export function select(controls, id, label, choices, value, onChange) {
  const wrap = document.createElement("span");
  const tag = document.createElement("label");
  tag.htmlFor = id;
  tag.textContent = label;
  const element = document.createElement("select");
  element.id = id;
  for (const [v, text] of choices) element.append(option(v, text));
  element.value = String(value);
  element.addEventListener("change", () => onChange(element.value));
  wrap.append(tag, " ", element);
  controls.append(wrap);
  return element;
}

export const range = (n) => Array.from({ length: n }, (_, i) => i);
