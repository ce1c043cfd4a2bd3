// The examples behind a head's scores (the atlas's `examples`: attnviz.pretrained.atlas.shards):
// a click on a head in the atlas lists, for each score measured on the corpus, the
// passages where that head scores highest, best first, with the token where it peaks;
// each opens in the layer view with that head enlarged on that passage and the peak token
// selected. The random-token scores' examples are random sequences: counted, not listed.
import { displayToken } from "../../lib/display.js";
import { SCORE_TITLES, shownAtlas } from "../../atlas.js";
import { chatBox, textsBox } from "../elements.js";
import { selectToken } from "../selection.js";
import { page, state } from "../state.js";

const SHOWN_CHARS = 240; // a passage's text is cut here in the list (the whole opens)

// The list of head (l, h)'s best passages of `atlas` in `panel`; `onInput()` opens the head
// on the form's own input instead (the atlas's earlier click).
export function showExamples(panel, atlas, l, h, onInput) {
  panel.replaceChildren();
  panel.hidden = false;
  panel.dataset.layer = String(l);
  panel.dataset.head = String(h);
  const heading = document.createElement("h3");
  heading.textContent = `L${l}.H${h}: the passages where it scores highest`;
  panel.append(heading);
  // An atlas file of a model this server does not serve: its passages are listed only.
  const openable = atlas.model === state.request.model;
  if (openable) {
    const own = document.createElement("button");
    own.type = "button";
    own.className = "secondary atlas-open-input";
    own.textContent = `Open L${l}.H${h} on your input`;
    own.addEventListener("click", onInput);
    panel.append(own);
  } else {
    const note = document.createElement("p");
    note.className = "hint atlas-not-served";
    note.textContent = `${atlas.model} is not served here: its passages are listed, not ` +
      `opened (attnviz serve --model ${atlas.model} serves it).`;
    panel.append(note);
  }
  const rows = (atlas.examples || []).filter((r) => r.layer === l && r.head === h);
  if (!rows.length) {
    const note = document.createElement("p");
    note.className = "hint";
    note.textContent = "This atlas keeps no examples (computed before they were kept).";
    panel.append(note);
    return;
  }
  const { titles, definitions } = shownAtlas(atlas);
  const perBit = (name) => (definitions[name]?.unit === "bits" ? Math.LN2 : 1);
  for (const name of Object.keys(SCORE_TITLES)) {
    const mine = rows.filter((r) => r.score === name);
    if (!mine.length) continue;
    // A score a fold, the first one open: 6 scores x 8 passages would be a long page.
    const fold = document.createElement("details");
    fold.dataset.score = name;
    fold.open = !panel.querySelector("details");
    const title = document.createElement("summary");
    title.textContent = titles[name] || name;
    fold.append(title);
    panel.append(fold);
    if (mine[0].kind !== "corpus") {
      const note = document.createElement("p");
      note.className = "hint";
      note.textContent = `Measured on repeated random tokens: its best ${mine.length} ` +
        `sequences peak at ${mine.map((r) => `“${displayToken(r.token)}”`).join(", ")}.`;
      fold.append(note);
      continue;
    }
    const list = document.createElement("ol");
    list.className = "atlas-examples-list";
    for (const row of mine) {
      const text = atlas.passages[String(row.passage)] ?? "";
      const item = document.createElement("li");
      item.dataset.score = name;
      item.dataset.passage = String(row.passage);
      const value = document.createElement("b");
      value.textContent = (row.value / perBit(name)).toFixed(3);
      const where = document.createElement("span");
      where.className = "hint";
      where.textContent = ` at token ${row.position} “${displayToken(row.token)}”: `;
      const quote = document.createElement("q");
      quote.textContent = text.length > SHOWN_CHARS ? `${text.slice(0, SHOWN_CHARS)}…` : text;
      const open = document.createElement("button");
      open.type = "button";
      open.className = "secondary atlas-open-passage";
      open.textContent = "Open";
      open.title = `Layer ${l}'s head ${h} on this passage, token ${row.position} selected`;
      open.addEventListener("click", () => openPassage(text, l, h, row));
      item.append(value, where, quote);
      if (openable) item.append(" ", open);
      list.append(item);
    }
    fold.append(list);
  }
}

// The passage as the form's input (as the atlas read it: one text, no chat template; its
// line breaks as spaces, since each line of the form is an input of its own), computed,
// then layer l's view with head h enlarged and the peak token selected (the link's way).
// Where the spaces tokenise otherwise (a BPE model's newline tokens), no token is selected.
async function openPassage(text, l, h, row) {
  textsBox.value = text.replace(/\s*\n\s*/gu, " ").trim();
  if (!chatBox.disabled) chatBox.checked = false;
  state.linked = {
    ...state.linked, layer: String(l), head: `${l}.${h}`, tokens: String(row.position),
  };
  state.view = "layer";
  state.layerHead = h;
  await page.compute();
  const tokens = state.overview?.tokens?.[0] ?? [];
  if (tokens[row.position] !== row.token && state.selected.size) await selectToken(null);
}
