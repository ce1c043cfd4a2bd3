// The neuron view: how one head computes a query's weights (queries, keys, products).
import { fillIndexSelect, selectedIndex } from "../../api.js";
import { tokenStrip } from "../../tokens.js";
import { neuronView } from "../../tokenviews.js";
import { displayTokens } from "../../lib/display.js";
import { hideSpecial, mergeWords, neuronHead } from "../elements.js";
import { causalMaps, viewRequest } from "../form.js";
import { requestAttention } from "../listing.js";
import { keyTokens, queryTokens } from "../response.js";
import { selectToken } from "../selection.js";
import { page, state } from "../state.js";

// The neuron view of one head (#neuron-head) of layer l, for the first selected query
// (else 0): the API's `neuron` (every token counted, special ones included).
export async function renderNeuronView(section, res, l) {
  const body = section.querySelector(".view-body");
  if (neuronHead.options.length !== res.num_heads) {
    fillIndexSelect(neuronHead, Array.from({ length: res.num_heads }, (_, h) => `Head ${h}`));
  }
  const h = selectedIndex(neuronHead);
  const plain = !hideSpecial.checked && !mergeWords.checked;
  const chosen = plain ? [...state.selected] : [];
  // Nothing selected: a decoder's last token (its row predicts what comes next), else 0.
  const last = plain && causalMaps() ? queryTokens(res).length - 1 : 0;
  const q = chosen.length ? Math.min(...chosen) : last;
  const answer = await requestAttention(viewRequest({
    hide_special_tokens: false, merge_words: false, layer_index: l, head_index: h,
    query_index: q, neuron: true, display_size: 8, method: "attention",
  }));
  if (answer === null) return;
  const step = answer.neuron;
  const tokens = displayTokens(queryTokens(answer));
  body.replaceChildren();
  const strip = document.createElement("div");
  strip.className = "strip-box";
  body.append(strip);
  tokenStrip(strip, tokens, {
    selected: new Set([q]), label: "Query token",
    onSelect: async (p) => {
      if (hideSpecial.checked || mergeWords.checked) return; // other positions there
      await selectToken(p, false);
      page.renderView();
    },
  });
  const box = document.createElement("div");
  body.append(box);
  const kv = answer.num_key_value_heads < answer.num_heads
    ? `, key/value head ${step.key_value_head} (grouped-query attention)` : "";
  neuronView(box, {
    title: `Layer ${l}, head ${h}${kv}, query ${q} (${tokens[q]}): d_k = ${step.d_k}, ` +
      `scaling ${step.scaling.toPrecision(4)} (1/√${step.d_k} = ` +
      `${(1 / Math.sqrt(step.d_k)).toPrecision(4)}).`,
    queryLabel: tokens[q],
    keyLabels: displayTokens(keyTokens(answer)),
    query: step.query,
    keys: step.keys,
    scaling: step.scaling,
    masked: step.masked,
    weights: step.weights,
  });
  box.dataset.query = String(q);
  box.dataset.head = String(h);
}
