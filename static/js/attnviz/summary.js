// The text above the heads of / : the summary line, and the badge of the check against
// PyTorch.

export function describe(data) {
  const [B, H, Lq, Lk] = data.full_shape;
  const [, , shownQ, shownK] = data.shape;
  const fullyMasked = data.fully_masked.flat().filter(Boolean).length;
  const parts = [
    `${data.attention === "cross" ? "Cross" : "Self"}-attention`,
    `weights (B, H, L_q, L_k) = (${B}, ${H}, ${Lq}, ${Lk})`,
    `d_model ${data.d_model}, d_k ${data.d_k}`,
    `mask ${data.mask} (fill ${data.mask_fill})`,
    data.scale ? "scaled by 1/√d_k" : "NOT scaled by 1/√d_k",
    `${data.num_parameters.toLocaleString()} attention parameters`,
    `${data.device} ${data.dtype}, ${data.compute_ms.toFixed(2)} ms`,
  ];
  if (fullyMasked > 0) {
    const rule = data.mask_fill === "-inf" ? "weights set to 0" : "uniform weights (finite fill)";
    parts.push(`${fullyMasked} fully-masked query row(s): ${rule}`);
  }
  if (data.downsample) {
    const d = data.downsample;
    parts.push(`drawn as ${shownQ} × ${shownK} blocks of ${d.factor_q} × ${d.factor_k} (block ` +
      `${d.method}) of the full ${d.full_shape[2]} × ${d.full_shape[3]}: click a head for full resolution`);
  }
  return parts.join(" · ");
}

function formatDiff(x) {
  return x === 0 ? "0" : x.toExponential(1);
}

export function renderBadge(data) {
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
