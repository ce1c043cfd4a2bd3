// The line view: the selected layer's heads as lines from each query token to the keys.
import { lineView } from "../../tokenviews.js";
import { displayTokens } from "../../lib/display.js";
import { keyTokens, queryTokens } from "../response.js";
import { selectToken } from "../selection.js";
import { lineHeads, page, state } from "../state.js";
import { layerMaps } from "../stream.js";

// The line view of layer l (tokenviews.js lineView) at full resolution.
export async function renderLineView(section, res, l) {
  const body = section.querySelector(".view-body");
  const maps = await layerMaps(res, l);
  if (maps === null) return;
  if (lineHeads.count !== res.num_heads) {
    lineHeads.count = res.num_heads;
    lineHeads.visible = new Set(Array.from({ length: res.num_heads }, (_, h) => h));
  }
  lineView(body, {
    queries: displayTokens(queryTokens(res)),
    keys: displayTokens(keyTokens(res)),
    maps: maps.attentions,
    selected: state.selected,
    visible: lineHeads.visible,
    onSelect: async (q, add) => {
      await selectToken(q, add);
      page.renderView();
    },
  });
}
