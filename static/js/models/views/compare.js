// The compare view: one layer of two inputs (or of two models) side by side, and A − B.
import { fillIndexSelect, option, paragraph, selectedIndex } from "../../api.js";
import { addPlot, clearPlots, heatmapFigure } from "../../heatmap.js";
import { fillHeadChoice } from "../../tokens.js";
import { mediaModality } from "../../media.js";
import { displayTokens } from "../../lib/display.js";
import { modelInfo } from "../catalog.js";
import {
  compareHead, compareModel, compareSentence, oneTextBox, sequenceSelect, textsBox, textsLabel,
} from "../elements.js";
import { addMap } from "../figures.js";
import { describeInputs, updateStale, valueName, viewRequest } from "../form.js";
import { blockLabels, keyTokens, poolFactors, queryTokens } from "../response.js";
import { state } from "../state.js";
import { MAP_SIDES, layerMaps, requestLayer } from "../stream.js";

// Compare: layer l's head mean (or one head, #compare-head) of the selected sentence (A)
// and of another (#compare-sentence, B, fetched alone with the same display options), and
// A − B when the two have as many tokens.
export async function renderCompare(section, res, l) {
  const body = section.querySelector(".view-body");
  const texts = state.request.texts;
  if (compareSentence.options.length !== texts.length) {
    fillIndexSelect(compareSentence, texts.map((text, b) => `${b}: ${text.slice(0, 40)}`));
    if (texts.length > 1) compareSentence.value = "1";
  }
  const other = fillCompareModels(res);
  compareSentence.disabled = other !== null;
  // With another model, the heads both have.
  const heads = other ? Math.min(res.num_heads, other.num_heads) : res.num_heads;
  if (compareHead.options.length !== heads + 1) {
    fillHeadChoice(compareHead, heads, "mean of the heads");
  }
  const a = selectedIndex(sequenceSelect);
  let b = other ? a : selectedIndex(compareSentence);
  if (!other && b === a && texts.length > 1) { // B is another input than A
    b = (a + 1) % texts.length;
    compareSentence.value = String(b);
  }
  if (!other && texts.length < 2) {
    // One input and no other model: A would be compared with itself (A − B all 0).
    clearPlots(body);
    const ask = paragraph(body, "hint compare-note compare-ask", "Compare needs a second " +
      `input: add a second line to the ${textsLabel.textContent} box and press Compute, or ` +
      "choose another model of the same kind under “against”.");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "secondary";
    button.textContent = "Add a second line";
    button.addEventListener("click", () => {
      if (!textsBox.value.endsWith("\n")) textsBox.value += "\n";
      oneTextBox.checked = false; // a second line is a second input
      describeInputs();
      textsBox.focus();
      textsBox.setSelectionRange(textsBox.value.length, textsBox.value.length);
      updateStale();
    });
    ask.append(" ", button);
    return;
  }
  // Another model's layer l, or its last layer when it has fewer.
  const lB = other ? Math.min(l, other.num_layers - 1) : l;
  // Both at most MAP_SIDES.compare per side: longer inputs come block-max pooled.
  const side = MAP_SIDES.compare;
  const mapsA = await layerMaps(res, l, side);
  const answerB = await requestLayer(viewRequest({
    // Another model has its own heads: the heads switched off are this model's.
    sequence_index: b, layer_index: lB, display_size: side,
    ...(other ? { model: other.name, ablate: undefined } : {}),
  }));
  if (mapsA === null || answerB === null) return;
  const [factorB, keyFactorB] = poolFactors(answerB.downsample);
  const pick = (maps, headMean) => (
    compareHead.value === "mean" ? headMean : maps[Number(compareHead.value)]);
  const mapA = { z: pick(mapsA.attentions, mapsA.headMean), factor: mapsA.factor, keyFactor: mapsA.keyFactor };
  const mapB = { z: pick(answerB.attentions, answerB.headMean), factor: factorB, keyFactor: keyFactorB };
  const [zA, zB] = [mapA.z, mapB.z];
  const what = compareHead.value === "mean" ? "mean of the heads" : `head ${compareHead.value}`;
  const nameA = other ? res.model : `sentence ${a}`;
  const nameB = other ? other.name : `sentence ${b}`;
  const pooled = (map) => (map.factor > 1 || map.keyFactor > 1
    ? `, block max of ${map.factor} × ${map.keyFactor} tokens` : "");
  clearPlots(body);
  const plots = [
    addMap(body, res, mapA, `A: ${nameA}, layer ${l}, ${what}${pooled(mapA)}`, "head-plot"),
    addMap(body, answerB, mapB, `B: ${nameB}, layer ${lB}, ${what}${pooled(mapB)}`, "head-plot"),
  ];
  const same = JSON.stringify([queryTokens(res), keyTokens(res)]) ===
    JSON.stringify([queryTokens(answerB), keyTokens(answerB)]);
  const aligned = zA.length === zB.length && zA[0].length === zB[0].length
    && mapA.factor === mapB.factor && mapA.keyFactor === mapB.keyFactor;
  if (aligned && (same || !other)) {
    const diff = zA.map((row, i) => row.map((v, j) => v - zB[i][j]));
    const positions = (n, f) => Array.from({ length: n }, (_, i) => (
      f > 1 ? `${i * f}–${(i + 1) * f - 1}` : String(i)));
    const blocks = (tokens, f) => blockLabels(displayTokens(tokens), f);
    const div = addPlot(body, heatmapFigure({
      z: diff,
      rowLabels: same ? blocks(queryTokens(res), mapA.factor) : positions(diff.length, mapA.factor),
      colLabels: same ? blocks(keyTokens(res), mapA.keyFactor) : positions(diff[0].length, mapA.keyFactor),
      signed: true, valueName: "A − B", colorTitle: `${valueName()} A − B`,
      title: `A − B${pooled(mapA)}`,
      yTitle: same ? "Query" : "Query position", xTitle: same ? "Key" : "Key position",
    }), "head-plot");
    div.dataset.map = "difference";
    plots.push(div);
  } else if (other) {
    paragraph(body, "hint compare-note", `No difference map: ${res.model} and ${other.name} ` +
      `split this sentence into different tokens (${queryTokens(res).length} and ` +
      `${queryTokens(answerB).length}).`);
  } else {
    paragraph(body, "hint compare-note", `No difference map: sentence ${a} has ` +
      `${queryTokens(res).length} tokens and sentence ${b} ${queryTokens(answerB).length}; ` +
      "positions would not match.");
  }
  if (other && lB !== l) {
    paragraph(body, "hint compare-note", `${other.name} has ${other.num_layers} layers: ` +
      `B is its last.`);
  }
  await Promise.all(plots.map((div) => div.drawn));
}

// #compare-model: "this model" and every other loaded model of the same family (their
// requests take the same fields); returns the chosen other model's listing, or null.
function fillCompareModels(res) {
  const others = state.models.filter((m) => (
    m.name !== res.model && m.family === res.family && m.state === "ready"
    && !mediaModality(m)));
  const previous = compareModel.value;
  compareModel.replaceChildren(option("", "this model, another sentence"),
    ...others.map((m) => option(m.name, `${m.name}, the same sentence`)));
  compareModel.value = others.some((m) => m.name === previous) ? previous : "";
  return modelInfo(compareModel.value);
}
