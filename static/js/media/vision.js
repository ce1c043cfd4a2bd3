// The image view: a vision transformer's attention of one token (the [CLS] token, or a
// clicked patch) as an overlay on the image, per layer and head, with rollout.
import { addPlot, clearPlots, escapeForPlotly } from "../heatmap.js";
import { MEAN, ROLLOUT, SMALL, range, select } from "./common.js";
import { media, mediaDom, player, visionView } from "../models/state.js";

// Transparent at 0, so the image shows through where a patch gets no attention.
// At most 60% opaque: the picture stays visible under the most attended patches.
const OVERLAY_COLORSCALE = [
  [0, "rgba(255,255,255,0)"], [0.25, "rgba(254,217,118,0.3)"], [0.5, "rgba(253,141,60,0.42)"],
  [0.75, "rgba(227,26,28,0.52)"], [1, "rgba(128,0,38,0.6)"],
];

function patchValues(res, row) {
  const [rows, cols] = res.grid;
  const prefix = res.prefix.length;
  return range(rows).map((r) => range(cols).map((c) => row[prefix + r * cols + c]));
}

function visionRow(res, layer, show) {
  if (show === ROLLOUT) return res.rollout[layer];
  const heads = res.weights[layer];
  if (show === MEAN) return heads[0].map((_, k) => heads.reduce((s, h) => s + h[k], 0) / heads.length);
  return heads[Number(show)];
}

export function drawVision() {
  const { head, controls, note, body, grid } = mediaDom;
  const res = media.vision;
  if (visionView.layer === null || visionView.layer >= res.num_layers) visionView.layer = res.num_layers - 1;
  if (![MEAN, ROLLOUT].includes(visionView.show) && Number(visionView.show) >= res.num_heads) {
    visionView.show = MEAN;
  }
  controls.replaceChildren();
  select(controls, "vision-layer", "Layer", range(res.num_layers).map((l) => [String(l), `layer ${l}`]),
    visionView.layer, (v) => { visionView.layer = Number(v); drawVision(); });
  select(controls, "vision-show", "Show", [[MEAN, "mean of heads"], ...range(res.num_heads).map((h) => [String(h), `head ${h}`]),
    [ROLLOUT, "rollout (layers 0 to this one)"]], visionView.show, (v) => { visionView.show = v; drawVision(); });
  if (res.query !== 0) {
    const back = document.createElement("button");
    back.type = "button";
    back.className = "secondary";
    back.id = "vision-cls";
    back.textContent = `Back to ${res.prefix[0]}`;
    back.addEventListener("click", () => { media.query = 0; media.submit(); });
    controls.append(back);
  }
  head.replaceChildren();
  if (player.bar) player.bar.hidden = true;
  const row = visionRow(res, visionView.layer, visionView.show);
  const prefixText = res.prefix.map((name, i) => `${name} ${row[i].toFixed(3)}`).join(" · ");
  const info = document.createElement("p");
  info.className = "media-labels";
  info.textContent = `Attention of ${res.query_name}; to the tokens that are not patches: ${prefixText}.`;
  const picture = document.createElement("img");
  picture.className = "media-picture";
  picture.src = res.image;
  picture.alt = "The image as the model saw it";
  picture.title = `The image as the model saw it (${res.width} × ${res.height} px), without the overlay`;
  head.append(picture, info);
  if (res.labels.length) {
    const labels = document.createElement("p");
    labels.className = "media-labels";
    labels.textContent = `Predicted: ${res.labels.map((l) => `${l.label} ${(100 * l.probability).toFixed(1)}%`).join(" · ")}`;
    head.append(labels);
  }
  note.textContent = "The image as the model saw it (its processor's resize and crop), under the " +
    `chosen token's attention over the ${res.grid[0]} × ${res.grid[1]} patches (transparent: ` +
    "the least, dark red: the most, scaled from the smallest patch's weight to the largest). Click a patch to see where it looks; " +
    "the thumbnails are the layer's heads, click one to draw it. Rollout multiplies the layers' " +
    "head means with the residual (Abnar & Zuidema 2020).";
  clearPlots(body);
  clearPlots(grid);
  const which = visionView.show === ROLLOUT ? `rollout through layer ${visionView.layer}`
    : `layer ${visionView.layer}, ${visionView.show === MEAN ? "mean of heads" : `head ${visionView.show}`}`;
  const main = addPlot(body, overlayFigure(res, row, `${res.query_name}: ${which}`, true), "plot overlay");
  main.drawn.then(() => {
    main.on("plotly_click", (event) => {
      const point = event.points && event.points.find((p) => p.data.type === "heatmap");
      if (!point) return;
      const [r, c] = point.pointIndex;
      media.query = res.prefix.length + r * res.grid[1] + c;
      media.submit();
    });
  });
  const shows = [...range(res.num_heads).map(String), MEAN, ROLLOUT];
  for (const show of shows) {
    const label = show === MEAN ? "mean" : (show === ROLLOUT ? "rollout" : `H${show}`);
    const div = addPlot(grid, overlayFigure(res, visionRow(res, visionView.layer, show), label, false), "plot vision-thumb");
    div.dataset.show = show;
    if (show === visionView.show) div.classList.add("chosen");
    div.addEventListener("click", () => { visionView.show = show; drawVision(); });
  }
}

function overlayFigure(res, row, title, large) {
  const [rows, cols] = res.grid;
  const values = patchValues(res, row);
  const flat = values.flat();
  const top = Math.max(...flat);
  const bottom = Math.min(...flat);
  const shapes = [];
  if (res.query >= res.prefix.length) {
    const [r, c] = [Math.floor((res.query - res.prefix.length) / cols), (res.query - res.prefix.length) % cols];
    shapes.push({ type: "rect", x0: c - 0.5, x1: c + 0.5, y0: r - 0.5, y1: r + 0.5, line: { color: "#2563eb", width: large ? 3 : 1.5 } });
  }
  return {
    traces: [{
      type: "heatmap", z: values, x: range(cols), y: range(rows), zmin: bottom,
      zmax: top > bottom ? top : bottom + 1e-9,
      colorscale: OVERLAY_COLORSCALE, showscale: large, xgap: 0, ygap: 0,
      colorbar: large ? { title: { text: "weight" } } : undefined,
      hovertemplate: large ? "patch (row %{y}, column %{x})<br>weight %{z:.4f}<extra></extra>" : undefined,
      hoverinfo: large ? undefined : "skip",
    }],
    layout: {
      title: { text: escapeForPlotly(title), font: { size: large ? 14 : 11 } },
      images: [{
        source: res.image, xref: "x", yref: "y", x: -0.5, y: -0.5, sizex: cols, sizey: rows,
        sizing: "stretch", layer: "below", xanchor: "left", yanchor: "top",
      }],
      xaxis: { range: [-0.5, cols - 0.5], visible: large, dtick: cols > 16 ? 2 : 1, showgrid: false, zeroline: false, title: large ? { text: "patch column" } : undefined },
      yaxis: { range: [rows - 0.5, -0.5], visible: large, dtick: rows > 16 ? 2 : 1, showgrid: false, zeroline: false, scaleanchor: "x", title: large ? { text: "patch row" } : undefined },
      margin: large ? { l: 60, r: 20, t: 50, b: 50 } : SMALL,
      shapes,
    },
  };
}
