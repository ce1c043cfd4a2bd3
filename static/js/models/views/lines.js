// The line view: the selected layer's heads as lines from each query token to the keys.
import { paragraph } from "../../api.js";
import { lineView } from "../../tokenviews.js";
import { displayTokens } from "../../lib/display.js";
import { blockLabels, keyTokens, queryTokens } from "../response.js";
import { selectToken } from "../selection.js";
import { describeGrid } from "../heads.js";
import { lineHeads, page, state } from "../state.js";
import { MAP_SIDES, layerMaps } from "../stream.js";

// The line view of layer l (tokenviews.js lineView): at full resolution up to
// MAP_SIDES.lines tokens; a longer input's rows are blocks of tokens (block-max pooled, as
// the thumbnails are), a selected token's block selected.
export async function renderLineView(section, res, l) {
  const body = section.querySelector(".view-body");
  const maps = await layerMaps(res, l, MAP_SIDES.lines);
  if (maps === null) return;
  if (lineHeads.count !== res.num_heads) {
    lineHeads.count = res.num_heads;
    lineHeads.visible = new Set(Array.from({ length: res.num_heads }, (_, h) => h));
  }
  const { factor, keyFactor } = maps;
  lineView(body, {
    queries: blockLabels(displayTokens(queryTokens(res)), factor),
    keys: blockLabels(displayTokens(keyTokens(res)), keyFactor),
    maps: maps.attentions,
    selected: new Set([...state.selected].map((q) => Math.floor(q / factor))),
    visible: lineHeads.visible,
    onSelect: async (q, add) => {
      await selectToken(q * factor, add);
      page.renderView();
    },
  });
  const svg = body.querySelector("svg.line-view");
  if (svg) {
    const heads = maps.attentions.map((z, h) => [`L${l}.H${h}`, z]);
    describeGrid(svg, res, heads, `Layer ${l}: the lines of its ${heads.length} heads`, { factor, keyFactor });
  }
  if (factor > 1 || keyFactor > 1) {
    const note = paragraph(body, "hint line-pooled", `${queryTokens(res).length} tokens: each ` +
      `row is a block of ${factor} tokens (keys ${keyFactor}), each line the largest weight ` +
      "between two blocks, as the model view's thumbnails are pooled. Selecting a block " +
      "selects its first token; an enlarged head (model and layer views) has more detail.");
    body.prepend(note);
  }
}
