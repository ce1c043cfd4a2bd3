// AttnViz page: form -> POST /api/v1/attention -> one Plotly heatmap per head.
// JSON from the API is snake_case; it is turned into camelCase names only in
// this file's locals. Token labels are user text: they reach Plotly only with
// & < > escaped as entities, so Plotly shows them literally and never as markup.
"use strict";

(function () {
  const ANNOTATE_MAX_LEN = 16; // print the weight in each cell up to this L
  const MASKED_COLOR = "#c8c8c8";
  // ColorBrewer "Blues" (9 classes), white at 0: Plotly's own "Blues" ends in gray,
  // which would look like a masked cell.
  const WEIGHT_COLORSCALE = [
    [0.0, "#f7fbff"], [0.125, "#deebf7"], [0.25, "#c6dbef"], [0.375, "#9ecae1"],
    [0.5, "#6baed6"], [0.625, "#4292c6"], [0.75, "#2171b5"], [0.875, "#08519c"],
    [1.0, "#08306b"],
  ];
  const INT_TOKEN = /^-?\d+$/;

  const form = document.getElementById("attn-form");
  const presetSelect = document.getElementById("preset");
  const presetDescription = document.getElementById("preset-description");
  const errorBox = document.getElementById("error");
  const summary = document.getElementById("summary");
  const sequenceSelect = document.getElementById("sequence-index");
  const headsContainer = document.getElementById("heads");
  const computeButton = document.getElementById("compute");

  const presets = JSON.parse(document.getElementById("presets-data").textContent);
  const defaultPreset = JSON.parse(document.getElementById("default-preset").textContent);

  let lastResponse = null;

  function escapeForPlotly(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function sequenceToLine(seq) {
    return Array.isArray(seq) ? seq.join(" ") : seq;
  }

  function fillForm(request) {
    form.sequences.value = request.sequences.map(sequenceToLine).join("\n");
    form.targets.value = (request.targets || []).map(sequenceToLine).join("\n");
    for (const name of ["d_model", "num_heads", "seed", "pad_id", "vocab_size", "device"]) {
      form[name].value = request[name];
    }
    form.mask_padding.checked = request.mask === "padding" || request.mask === "padding_causal";
    form.mask_causal.checked = request.mask === "causal" || request.mask === "padding_causal";
    setMaskFill(request.mask_fill);
  }

  // The select offers -inf and the seeds' fills; another value from a preset is added.
  function setMaskFill(value) {
    const text = typeof value === "number" ? value.toExponential().replace("e+", "e") : String(value);
    const known = [...form.mask_fill.options].find(
      (o) => o.value === text || Number(o.value) === Number(text),
    );
    if (!known) {
      const option = document.createElement("option");
      option.value = text;
      option.textContent = text;
      form.mask_fill.append(option);
    }
    form.mask_fill.value = known ? known.value : text;
  }

  function nonEmptyLines(text) {
    return text.split("\n").map((line) => line.trim()).filter((line) => line.length > 0);
  }

  // All lines are token ids when every token of every line is an integer;
  // otherwise every line is sent as words.
  function readRequest() {
    const sources = nonEmptyLines(form.sequences.value);
    const targets = nonEmptyLines(form.targets.value);
    const allTokens = sources.concat(targets).flatMap((line) => line.split(/\s+/));
    const asIds = allTokens.length > 0 && allTokens.every((token) => INT_TOKEN.test(token));
    const encode = (line) => (asIds ? line.split(/\s+/).map(Number) : line);
    const padding = form.mask_padding.checked;
    const causal = form.mask_causal.checked;
    const mask = padding && causal ? "padding_causal" : padding ? "padding" : causal ? "causal" : "none";
    const fill = form.mask_fill.value;
    const request = {
      sequences: sources.map(encode),
      mask: mask,
      mask_fill: fill === "-inf" ? fill : Number(fill),
      device: form.device.value,
      verify: form.verify.checked,
    };
    for (const name of ["d_model", "num_heads", "seed", "pad_id", "vocab_size"]) {
      const raw = form[name].value.trim();
      // Sent as typed (a number when it parses), so that the API names the field on error.
      request[name] = raw === "" || Number.isNaN(Number(raw)) ? raw : Number(raw);
    }
    if (targets.length > 0) {
      request.targets = targets.map(encode);
    }
    return request;
  }

  function formatLoc(loc) {
    return loc
      .filter((part, i) => !(i === 0 && part === "body"))
      .map((part, i) => (typeof part === "number" ? `[${part}]` : (i === 0 ? part : `.${part}`)))
      .join("");
  }

  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = false;
  }

  function clearError() {
    errorBox.textContent = "";
    errorBox.hidden = true;
  }

  async function compute() {
    clearError();
    computeButton.disabled = true;
    try {
      const response = await fetch("/api/v1/attention", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(readRequest()),
      });
      const body = await response.json().catch(() => null);
      if (!response.ok) {
        const detail = body && body.detail;
        const message = Array.isArray(detail)
          ? detail.map((d) => `${formatLoc(d.loc || [])}: ${d.msg}`).join("\n")
          : String(detail || `HTTP ${response.status}`);
        showError(message);
        return;
      }
      lastResponse = body;
      window.attnviz.lastResponse = body;
      populateSequenceSelect(body);
      render();
    } catch (err) {
      showError(`Request failed: ${err}`);
    } finally {
      computeButton.disabled = false;
    }
  }

  function populateSequenceSelect(data) {
    sequenceSelect.replaceChildren();
    data.query_labels.forEach((labels, b) => {
      const option = document.createElement("option");
      option.value = String(b);
      const preview = data.key_labels[b].filter((t) => t !== "<pad>").slice(0, 6).join(" ");
      option.textContent = `${b}: ${preview}${data.key_labels[b].length > 6 ? " …" : ""}`;
      sequenceSelect.append(option);
    });
  }

  function describe(data) {
    const [B, H, Lq, Lk] = data.shape;
    const fullyMasked = data.fully_masked.flat().filter(Boolean).length;
    const parts = [
      `${data.attention === "cross" ? "Cross" : "Self"}-attention`,
      `weights (B, H, L_q, L_k) = (${B}, ${H}, ${Lq}, ${Lk})`,
      `d_model ${data.d_model}, d_k ${data.d_k}`,
      `mask ${data.mask} (fill ${data.mask_fill})`,
      `${data.num_parameters.toLocaleString()} attention parameters`,
      `${data.device} ${data.dtype}, ${data.compute_ms.toFixed(2)} ms`,
    ];
    if (fullyMasked > 0) {
      const rule = data.mask_fill === "-inf" ? "weights set to 0" : "uniform weights (finite fill)";
      parts.push(`${fullyMasked} fully-masked query row(s): ${rule}`);
    }
    return parts.join(" · ");
  }

  function formatDiff(x) {
    return x === 0 ? "0" : x.toExponential(1);
  }

  function renderBadge(data) {
    const badge = document.getElementById("verify-badge");
    const v = data.verification;
    if (!v) {
      badge.hidden = true;
      return;
    }
    const largest = Math.max(v.mha_weights_max_abs_diff, v.mha_output_max_abs_diff,
      v.sdpa_output_max_abs_diff);
    badge.textContent = v.matches
      ? `✓ matches PyTorch (max |Δ| = ${formatDiff(largest)})`
      : `✗ differs from PyTorch (max |Δ| = ${formatDiff(largest)} > ${formatDiff(v.tolerance)})`;
    badge.className = v.matches ? "badge ok" : "badge bad";
    badge.title = [
      `torch ${v.torch_version}, tolerance ${v.tolerance}`,
      `nn.MultiheadAttention weights: ${formatDiff(v.mha_weights_max_abs_diff)}`,
      `nn.MultiheadAttention output: ${formatDiff(v.mha_output_max_abs_diff)}`,
      `scaled_dot_product_attention output: ${formatDiff(v.sdpa_output_max_abs_diff)}`,
      `fully-masked rows compared under AttnViz's rule: ${v.fully_masked_rows}`,
    ].join("\n");
    badge.hidden = false;
  }

  function headTraces(data, b, h, zmax) {
    const weights = data.weights[b][h];
    const mask = data.attn_mask[b];
    const queryLabels = data.query_labels[b].map(escapeForPlotly);
    const keyLabels = data.key_labels[b].map(escapeForPlotly);
    const rows = queryLabels.map((_, i) => i);
    const cols = keyLabels.map((_, j) => j);
    const annotate = Math.max(rows.length, cols.length) <= ANNOTATE_MAX_LEN;
    // A masked cell is drawn gray when its weight is 0. Under a finite mask fill,
    // a fully-masked row is uniform (as in the seeds): its weights are drawn.
    const shown = weights.map((row, i) => row.map((w, j) => mask[i][j] || w !== 0));
    const visible = weights.map((row, i) => row.map((w, j) => (shown[i][j] ? w : null)));
    const masked = shown.map((row) => row.map((s) => (s ? null : 1)));
    const customdata = rows.map((i) => cols.map((j) => [
      queryLabels[i],
      keyLabels[j],
      mask[i][j] ? "" : "<br>masked key; the row is fully masked, so a finite fill spreads it uniformly",
    ]));
    const hoverHead = "query %{customdata[0]} (row %{y})<br>key %{customdata[1]} (col %{x})<br>";
    return [
      {
        type: "heatmap",
        x: cols,
        y: rows,
        z: visible,
        zmin: 0,
        zmax: zmax,
        colorscale: WEIGHT_COLORSCALE,
        showscale: h === data.shape[1] - 1,
        colorbar: { title: { text: "weight" }, thickness: 12 },
        customdata: customdata,
        hovertemplate: hoverHead + "weight %{z:.4f}%{customdata[2]}<extra></extra>",
        texttemplate: annotate ? "%{z:.2f}" : "",
        hoverongaps: false,
        xgap: 1,
        ygap: 1,
        name: "weights",
      },
      {
        type: "heatmap",
        x: cols,
        y: rows,
        z: masked,
        colorscale: [[0, MASKED_COLOR], [1, MASKED_COLOR]],
        showscale: false,
        customdata: customdata,
        hovertemplate: hoverHead + "masked: weight 0<extra></extra>",
        text: masked.map((row) => row.map((m) => (m ? "×" : ""))),
        texttemplate: annotate ? "%{text}" : "",
        textfont: { color: "#6b6b6b" },
        hoverongaps: false,
        xgap: 1,
        ygap: 1,
        name: "masked",
      },
    ];
  }

  function headLayout(data, b, h) {
    const queryLabels = data.query_labels[b].map(escapeForPlotly);
    const keyLabels = data.key_labels[b].map(escapeForPlotly);
    return {
      title: { text: `Head ${h}`, font: { size: 14 } },
      margin: { l: 70, r: 10, t: 36, b: 70 },
      xaxis: {
        title: { text: "Key" },
        tickvals: keyLabels.map((_, j) => j),
        ticktext: keyLabels,
        tickangle: -45,
        constrain: "domain",
      },
      yaxis: {
        title: { text: "Query" },
        tickvals: queryLabels.map((_, i) => i),
        ticktext: queryLabels,
        autorange: "reversed",
        scaleanchor: "x",
        constrain: "domain",
      },
      plot_bgcolor: "#ffffff",
      paper_bgcolor: "rgba(0,0,0,0)",
    };
  }

  function render() {
    const data = lastResponse;
    if (!data) return;
    const b = Number(sequenceSelect.value || 0);
    const numHeads = data.shape[1];
    summary.textContent = describe(data);
    renderBadge(data);
    let zmax = 0;
    data.weights[b].forEach((head) => head.forEach((row) => row.forEach((w) => { zmax = Math.max(zmax, w); })));
    zmax = zmax > 0 ? zmax : 1;
    for (const node of headsContainer.children) Plotly.purge(node);
    headsContainer.replaceChildren();
    for (let h = 0; h < numHeads; h += 1) {
      const div = document.createElement("div");
      div.className = "head-plot";
      div.dataset.head = String(h);
      headsContainer.append(div);
      Plotly.newPlot(div, headTraces(data, b, h, zmax), headLayout(data, b, h), {
        responsive: true,
        displaylogo: false,
      });
    }
    headsContainer.dataset.drawnSequence = String(b);
    headsContainer.dataset.drawnHeads = String(numHeads);
  }

  function selectPreset(name) {
    const preset = presets.find((p) => p.name === name) || presets[0];
    presetSelect.value = preset.name;
    presetDescription.textContent = preset.description;
    fillForm(preset.request);
  }

  for (const preset of presets) {
    const option = document.createElement("option");
    option.value = preset.name;
    option.textContent = preset.title;
    presetSelect.append(option);
  }

  presetSelect.addEventListener("change", () => {
    selectPreset(presetSelect.value);
    compute();
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    compute();
  });
  sequenceSelect.addEventListener("change", render);

  window.attnviz = { lastResponse: null, compute: compute };
  selectPreset(defaultPreset);
  compute();
})();
