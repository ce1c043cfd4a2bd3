// thumbnailPreview: a stand-in painted row by row while a streamed grid arrives.
// (Shared by both pages through ../heatmap.js.)

import { escapeForPlotly, titledTop } from "./figure.js";
import { gridFrame, plotlyGridDomains } from "./thumbnails.js";
import { matrixImage } from "./tiles.js";

function previewLabel(parent, className, text, box) {
  const label = document.createElement("span");
  label.className = className;
  label.textContent = text;
  for (const [key, value] of Object.entries(box)) label.style[key] = `${value}px`;
  parent.append(label);
  return label;
}

// A stand-in for thumbnailGrid's figure while its cells arrive (a streamed grid): the
// same size, title, labels and cell boxes (options as thumbnailGrid's; the cells are not
// read), the cells painted on one canvas, each blank until fillRow(r, matrices) paints
// row r (one matrix per column; a few ms a row, where Plotly draws the whole figure again
// for any change). One canvas, not one per cell: 270 canvases were 270 layers for the
// browser to composite at every change, in software on a machine without a GPU.
// Once every row is in, thumbnailGrid draws the figure into the same container and the
// stand-in lies over it until it is drawn: cover() before thumbnailGrid, then remove().
// Returns {element, fillRow, filled (rows painted), cover, remove}; element holds the
// canvas (.grid-preview-canvas) and the labels.
export function thumbnailPreview(container, options) {
  const { rows, cols } = options;
  const frame = gridFrame(options);
  const element = document.createElement("div");
  element.className = "plot grid-plot grid-preview";
  element.setAttribute("role", "img");
  element.setAttribute("aria-label", `${options.title || "Grid"}: being drawn`);
  element.style.height = `${frame.height}px`;
  container.append(element);
  // The figure's plot area (Plotly's: the div's width, its margins), and each cell's box.
  const width = element.clientWidth;
  const { l, r, b } = frame.margin;
  const t = options.title ? Math.max(titledTop(escapeForPlotly(options.title)), frame.margin.t) : frame.margin.t;
  const plotWidth = width - l - r;
  const plotHeight = frame.height - t - b;
  const xDomains = frame.xDomains || plotlyGridDomains(cols, frame.xgap);
  const yDomains = frame.yDomains || plotlyGridDomains(rows, frame.ygap, true);
  const boxOf = (row, col) => ({
    left: l + xDomains[col][0] * plotWidth,
    top: t + (1 - yDomains[row][1]) * plotHeight,
    width: (xDomains[col][1] - xDomains[col][0]) * plotWidth,
    height: (yDomains[row][1] - yDomains[row][0]) * plotHeight,
  });
  if (options.title) {
    previewLabel(element, "grid-preview-title", options.title, { left: l, bottom: frame.height - t + 6 });
  }
  const canvas = document.createElement("canvas");
  canvas.className = "grid-preview-canvas";
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.max(1, Math.round(width * ratio));
  canvas.height = Math.max(1, Math.round(frame.height * ratio));
  canvas.style.left = "0px";
  canvas.style.top = "0px";
  canvas.style.width = `${width}px`;
  canvas.style.height = `${frame.height}px`;
  element.append(canvas);
  const context = canvas.getContext("2d");
  context.imageSmoothingEnabled = false;
  const scratch = document.createElement("canvas");
  const scratchContext = scratch.getContext("2d");
  const background = getComputedStyle(document.documentElement).getPropertyValue("--bg").trim() || "#ffffff";
  const pixelsOf = (box) => [box.left, box.top, box.width, box.height].map((v) => Math.round(v * ratio));
  const boxes = [];
  for (let row = 0; row < rows; row += 1) {
    const line = [];
    for (let col = 0; col < cols; col += 1) {
      const box = boxOf(row, col);
      line.push(box);
      const [x, y, w, h] = pixelsOf(box);
      context.fillStyle = background;
      context.fillRect(x, y, w, h);
      context.strokeStyle = "rgba(128, 128, 128, 0.35)";
      context.strokeRect(x + 0.5, y + 0.5, w - 1, h - 1);
      if (col === 0 && options.rowName) {
        previewLabel(element, "grid-preview-row", `${options.rowName}${row}`,
          { right: width - box.left + 2, top: box.top, height: box.height });
      }
      let title = null;
      if (options.cellTitle) title = options.cellTitle(row, col);
      else if (row === rows - 1) title = `${options.colName}${col}`;
      if (title !== null) {
        previewLabel(element, "grid-preview-col", title,
          { left: box.left, top: box.top + box.height + 2, width: box.width });
      }
    }
    boxes.push(line);
  }
  if (frame.group) {
    const groups = Math.ceil(cols / frame.group);
    for (let g = 0; g < groups; g += 1) {
      const first = xDomains[g * frame.group];
      const last = xDomains[Math.min(cols, (g + 1) * frame.group) - 1];
      if (g > 0) {
        const x = (xDomains[g * frame.group - 1][1] + first[0]) / 2;
        previewLabel(element, "grid-preview-line", "", { left: l + x * plotWidth, top: t, height: plotHeight });
      }
      const text = options.groupLabel ? options.groupLabel(g) : `group ${g}`;
      previewLabel(element, "grid-preview-group", text, {
        left: l + first[0] * plotWidth, width: (last[1] - first[0]) * plotWidth,
        top: t + plotHeight + 32,
      });
    }
  }
  const preview = {
    element,
    filled: 0,
    fillRow(row, matrices) {
      matrices.forEach((z, col) => {
        const image = matrixImage(z, options.scale || "head");
        if (image === null) return;
        scratch.width = image.width;
        scratch.height = image.height;
        scratchContext.putImageData(image, 0, 0);
        const [x, y, w, h] = pixelsOf(boxes[row][col]);
        context.drawImage(scratch, x + 1, y + 1, w - 2, h - 2);
      });
      preview.filled += 1;
    },
    // The container keeps the stand-in's height meanwhile: Plotly lays out the figure's
    // div while it is still empty, and a page that shrinks under a reader scrolls.
    cover() {
      const margin = parseFloat(getComputedStyle(element).marginBottom) || 0;
      container.style.minHeight = `${element.offsetHeight + margin}px`;
      element.classList.add("covering");
    },
    remove() {
      element.remove();
      container.style.minHeight = "";
    },
  };
  return preview;
}
