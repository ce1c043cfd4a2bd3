// Downloads: the JSON of a view, its figures as PNG, SVG and PDF.
// (Shared by both pages through ../api.js.)

import { exportFigure, saveImage } from "../plots/figure.js";

// Downloads. Download JSON (#download-json) saves `payload()` ({request, response}; null
// while there is nothing to save) as <prefix>.json; Download PNG, SVG and PDF
// (#download-png, #download-svg, #download-pdf) save the first figure of the open view,
// on an opaque paper in the page's theme (exportFigure: readable on paper and on slides).
// `currentView()` names the open view (its section is #view-<name>); image files are
// called <prefix>-<view>.<format>.
export function bindDownloads(prefix, currentView, payload) {
  document.getElementById("download-json").addEventListener("click", () => {
    const content = payload();
    if (!content) return;
    download(`${prefix}.json`, new Blob([JSON.stringify(content)], { type: "application/json" }));
  });
  for (const format of ["png", "svg", "pdf"]) {
    const button = document.getElementById(`download-${format}`);
    if (!button) continue;
    button.addEventListener("click", async () => {
      const view = currentView();
      const plot = document.querySelector(`#view-${view} .js-plotly-plot`);
      if (!plot) return;
      if (format !== "pdf") {
        saveImage(plot, format, `${prefix}-${view}`);
        return;
      }
      // Plotly.js exports no PDF: its JPEG (2 pixels a CSS px) on a page of the figure's size.
      const scale = 2;
      const { width, height, ...figure } = exportFigure(plot);
      const url = await Plotly.toImage(figure, { format: "jpeg", width, height, scale });
      const jpeg = Uint8Array.from(atob(url.split(",")[1]), (c) => c.charCodeAt(0));
      const blob = pdfOfJpeg(jpeg, width * scale, height * scale, width * 0.75, height * 0.75);
      download(`${prefix}-${view}.pdf`, blob);
    });
  }
}

// A one-page PDF 1.4 (ISO 32000-1, 7.5) showing a JPEG (DCTDecode) of `pixelsWide` x
// `pixelsHigh` over the whole page of `pointsWide` x `pointsHigh` (1/72 in).
export function pdfOfJpeg(jpeg, pixelsWide, pixelsHigh, pointsWide, pointsHigh) {
  const encoder = new TextEncoder();
  const parts = [];
  const offsets = [];
  let length = 0;
  const add = (part) => {
    const bytes = typeof part === "string" ? encoder.encode(part) : part;
    parts.push(bytes);
    length += bytes.length;
  };
  const object = (number, body) => {
    offsets[number] = length;
    add(`${number} 0 obj\n${body}\nendobj\n`);
  };
  const [w, h] = [pointsWide.toFixed(2), pointsHigh.toFixed(2)];
  const content = `q ${w} 0 0 ${h} 0 0 cm /Im0 Do Q`;
  add("%PDF-1.4\n%\u00e2\u00e3\u00cf\u00d3\n");
  object(1, "<< /Type /Catalog /Pages 2 0 R >>");
  object(2, "<< /Type /Pages /Kids [3 0 R] /Count 1 >>");
  object(3, `<< /Type /Page /Parent 2 0 R /MediaBox [0 0 ${w} ${h}] ` +
    "/Resources << /XObject << /Im0 4 0 R >> >> /Contents 5 0 R >>");
  offsets[4] = length;
  add(`4 0 obj\n<< /Type /XObject /Subtype /Image /Width ${Math.round(pixelsWide)} ` +
    `/Height ${Math.round(pixelsHigh)} /ColorSpace /DeviceRGB /BitsPerComponent 8 ` +
    `/Filter /DCTDecode /Length ${jpeg.length} >>\nstream\n`);
  add(jpeg);
  add("\nendstream\nendobj\n");
  object(5, `<< /Length ${content.length} >>\nstream\n${content}\nendstream`);
  const xref = length;
  const rows = offsets.slice(1).map((at) => `${String(at).padStart(10, "0")} 00000 n \n`);
  add(`xref\n0 6\n0000000000 65535 f \n${rows.join("")}`);
  add(`trailer\n<< /Size 6 /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`);
  return new Blob(parts, { type: "application/pdf" });
}

// Save `blob` as a file called `name` (the browser's download).
export function download(name, blob) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}
