// The head atlas (atlas.js): the chosen model's heads scored over the shipped corpus, or
// over the form's texts, or an atlas file (attnviz atlas's atlas.json, this tab's JSON);
// a click on a head lists its best passages (views/examples.js), each opening that head
// on that passage, or opens it in the layer view on the input.
import { writeUrlState } from "../../api.js";
import { clearPlots } from "../../heatmap.js";
import { drawAtlas, fetchAtlas, saveAtlas } from "../../atlas.js";
import { modelInfo } from "../catalog.js";
import {
  atlasOwn, blockSelect, clearError, displayNote, layerSelect, modelSelect, showError, summary,
} from "../elements.js";
import { reveal } from "../figures.js";
import { rememberHead } from "../heads.js";
import { page, state } from "../state.js";
import { drawProgress } from "../stream.js";
import { showExamples } from "./examples.js";

export async function renderAtlas(section, ticket) {
  const body = section.querySelector(".view-body");
  const file = state.atlasFile;
  section.querySelector(".atlas-file-close").hidden = !file;
  if (file && (file.atlas.model === state.request.model || !modelInfo(file.atlas.model))) {
    const served = modelInfo(file.atlas.model) ? "" : ` (${file.atlas.model} is not served here)`;
    summary.textContent = `Head atlas of ${file.atlas.model}, from ${file.name}${served}.`;
    displayNote.textContent = "";
    return showAtlas(section, file.atlas, { model: file.atlas.model, file: file.name });
  }
  const request = {
    model: state.request.model,
    device: state.request.device,
    ...(atlasOwn.checked ? { texts: state.request.texts } : {}),
  };
  const key = JSON.stringify(request);
  const where = atlasOwn.checked ? "the form's texts" : "the shipped corpus";
  summary.textContent = `Head atlas of ${request.model}, scored on ${where}.`;
  displayNote.textContent = "";
  // One computation per atlas: a second view of it (the tab again) waits for the first;
  // another atlas asked for meanwhile (another model, the own-texts box) stops the first.
  if (state.atlasFetch && state.atlasFetch.key !== key) {
    state.atlasFetch.controller.abort();
    state.atlasFetch = null;
  }
  let atlas = state.atlases.get(key);
  if (!atlas) {
    const box = section.querySelector(".atlas-progress");
    const parts = {
      label: box.querySelector(".atlas-progress-label"),
      bar: box.querySelector(".layer-progress-bar"),
      fill: box.querySelector(".layer-progress-fill"),
    };
    const current = () => ticket === state.ticket;
    drawProgress(parts, "Scoring the heads… (the first atlas of a model takes up to a minute)",
      null, null);
    box.hidden = false;
    if (!state.atlasFetch) {
      const controller = new AbortController();
      const job = { key, controller, progress: null, promise: null };
      job.promise = fetchAtlas(request, (done, total) => {
        if (job.progress) job.progress(done, total);
      }, controller.signal).finally(() => {
        if (state.atlasFetch === job) state.atlasFetch = null;
      });
      state.atlasFetch = job;
    }
    // Only the drawing that waits now moves the bar (an older one's ticket is past).
    state.atlasFetch.progress = (done, total) => {
      if (current()) drawProgress(parts, `Scoring the heads: pass ${done} of ${total}…`, done, total);
    };
    try {
      atlas = await state.atlasFetch.promise;
    } catch (error) {
      if (current() && error.name !== "AbortError") {
        clearPlots(body);
        showError(error.message);
      }
      return false;
    } finally {
      if (current()) box.hidden = true;
    }
    state.atlases.set(key, atlas);
  }
  if (ticket !== state.ticket) return false;
  return showAtlas(section, atlas, request);
}

// Draw `atlas` (the server's, computed for `request`, or a file's) with its examples.
async function showAtlas(section, atlas, request) {
  const body = section.querySelector(".view-body");
  clearError();
  state.atlas = atlas;
  state.atlasRequest = request;
  window.attnvizModels.lastAtlas = atlas;
  section.dataset.cached = String(Boolean(atlas.cached));
  const panel = section.querySelector(".atlas-examples");
  panel.hidden = true;
  await drawAtlas(body, atlas, (l, h) => {
    showExamples(panel, atlas, l, h, () => openHead(l, h));
    reveal(panel);
  });
  return true;
}

// Head h of layer l in the layer view, on the form's input, enlarged and in sight. An
// encoder-decoder's atlas scores its encoder: that block is opened first.
async function openHead(l, h) {
  state.layerHead = h;
  state.view = "layer";
  const block = state.atlas && state.atlas.block;
  if (state.request.block && block && state.request.block !== block) {
    blockSelect.value = block;
    await page.compute();
  }
  layerSelect.value = String(l);
  rememberHead(l, h); // the link and the downloads name it before its map is drawn
  writeUrlState(state.request, state.view);
  if (await page.renderView()) reveal(document.querySelector("#view-layer .enlarged"));
}

// The atlas's own controls: the own-texts box, the downloads.
export function bindAtlas() {
  atlasOwn.addEventListener("change", () => {
    if (state.view === "atlas") page.renderView();
  });
  document.getElementById("atlas-csv").addEventListener("click", () => {
    if (state.atlas) saveAtlas(state.atlas, "csv");
  });
  document.getElementById("atlas-json").addEventListener("click", () => {
    if (state.atlas) saveAtlas(state.atlas, "json");
  });
  const input = document.getElementById("atlas-file");
  input.addEventListener("change", async () => {
    const [file] = input.files;
    input.value = "";
    if (file) await openAtlasFile(file);
  });
  document.querySelector("#view-atlas .atlas-file-close").addEventListener("click", () => {
    state.atlasFile = null;
    if (state.view === "atlas") page.renderView();
  });
}

// An atlas file, checked, shown in place of the server's atlas while the page's model is
// the file's: the model is chosen first where this server has it (its passages then open
// on it); otherwise its maps and passages are shown with that said.
async function openAtlasFile(file) {
  let atlas;
  try {
    atlas = checkedAtlas(JSON.parse(await file.text()));
  } catch (error) {
    showError(`${file.name} is not a head atlas (attnviz atlas's atlas.json, or this tab's ` +
      `"Download atlas JSON"): ${error.message}`);
    return;
  }
  state.atlasFile = { name: file.name, atlas };
  state.atlases.clear(); // nothing of a file is cached under a request's key
  if (modelInfo(atlas.model) && modelSelect.value !== atlas.model) {
    modelSelect.value = atlas.model;
    modelSelect.dispatchEvent(new Event("change")); // computes, then draws this view
    return;
  }
  if (state.view === "atlas") await page.renderView();
}

// `data` if it has an atlas's fields (the API's stream end message or HeadScores.to_dict()),
// else an Error naming the first that is missing or of the wrong shape.
function checkedAtlas(data) {
  if (!data || typeof data !== "object") throw new Error("not a JSON object");
  for (const key of ["model", "block"]) {
    if (typeof data[key] !== "string") throw new Error(`no string "${key}"`);
  }
  for (const key of ["num_layers", "num_heads"]) {
    if (!Number.isInteger(data[key]) || data[key] < 1) throw new Error(`no "${key}"`);
  }
  for (const key of ["scores", "definitions", "corpus"]) {
    if (!data[key] || typeof data[key] !== "object") throw new Error(`no "${key}" object`);
  }
  for (const [name, rows] of Object.entries(data.scores)) {
    const fits = Array.isArray(rows) && rows.length === data.num_layers && rows.every(
      (row) => Array.isArray(row) && row.length === data.num_heads &&
        row.every((v) => typeof v === "number"));
    if (!fits) throw new Error(`"scores.${name}" is not ${data.num_layers} × ${data.num_heads} numbers`);
  }
  return data;
}
