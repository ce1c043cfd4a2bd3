// The form of / (#attn-form): a request filled in (a preset's, a link's) and read back.
import { LAYER_FIELDS, nonEmptyLines, option, parseNumber } from "../api.js";

const INT_TOKEN = /^-?\d+$/;

function sequenceToLine(seq) {
  return Array.isArray(seq) ? seq.join(" ") : seq;
}

export function fillForm(form, request) {
  form.sequences.value = request.sequences.map(sequenceToLine).join("\n");
  form.targets.value = (request.targets || []).map(sequenceToLine).join("\n");
  for (const name of LAYER_FIELDS) {
    form[name].value = request[name];
  }
  form.mask_padding.checked = request.mask === "padding" || request.mask === "padding_causal";
  form.mask_causal.checked = request.mask === "causal" || request.mask === "padding_causal";
  form.scale.checked = request.scale !== false;
  setMaskFill(form, request.mask_fill);
}

// The select offers -inf and the tutorials' fills; another value from a preset is added.
function setMaskFill(form, value) {
  const text = typeof value === "number" ? value.toExponential().replace("e+", "e") : String(value);
  const known = [...form.mask_fill.options].find(
    (o) => o.value === text || Number(o.value) === Number(text),
  );
  if (!known) form.mask_fill.append(option(text, text));
  form.mask_fill.value = known ? known.value : text;
}

// All lines are token ids when every token of every line is an integer;
// otherwise every line is sent as words.
export function readRequest(form) {
  const sources = nonEmptyLines(form.sequences.value);
  const targets = nonEmptyLines(form.targets.value);
  const allTokens = sources.concat(targets).flatMap((line) => line.split(/\s+/));
  const asIds = allTokens.length > 0 && allTokens.every((token) => INT_TOKEN.test(token));
  const encode = (line) => (asIds ? line.split(/\s+/).map(Number) : line);
  const padding = form.mask_padding.checked;
  const causal = form.mask_causal.checked;
  const mask = padding && causal ? "padding_causal" : padding ? "padding" : causal ? "causal" : "none";
  const request = {
    sequences: sources.map(encode),
    mask: mask,
    mask_fill: parseNumber(form.mask_fill.value), // a number, or "-inf"
    scale: form.scale.checked,
    device: form.device.value,
  };
  for (const name of LAYER_FIELDS.filter((field) => field !== "device")) {
    request[name] = parseNumber(form[name].value);
  }
  if (targets.length > 0) {
    request.targets = targets.map(encode);
  }
  return request;
}
