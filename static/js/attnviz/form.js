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

const PAD_LABEL = "<pad>"; // the pad token's word (app/attention/tokens.py)
const MAX_VOCAB_SIZE = 32768; // the API's bound (app/server/limits.py)

// The note under vocab_size (made on first use), saying when it grew.
function vocabNote(form) {
  let note = document.getElementById("vocab-note");
  if (!note) {
    note = document.createElement("p");
    note.id = "vocab-note";
    note.className = "hint";
    note.setAttribute("role", "status");
    note.hidden = true;
    form.vocab_size.parentElement.append(note);
  }
  return note;
}

// Words need one id each besides the pad token's (the API numbers them in order): when
// vocab_size is too small for the words typed, it grows to fit before Compute sends the
// request, and the note under it says so (300 typed words met a vocab_size error first).
// Token ids, a vocab_size that is not a whole number, or more words than the API's bound
// are left as they are: the API's message names the field. Returns the new size, or null.
export function fitVocabulary(form) {
  const lines = nonEmptyLines(form.sequences.value).concat(nonEmptyLines(form.targets.value));
  const tokens = lines.flatMap((line) => line.split(/\s+/));
  const asIds = tokens.length > 0 && tokens.every((token) => INT_TOKEN.test(token));
  const size = parseNumber(form.vocab_size.value);
  const note = vocabNote(form);
  const words = new Set(tokens.filter((token) => token !== PAD_LABEL));
  const needed = words.size + 1;
  if (asIds || !Number.isInteger(size) || needed <= size || needed > MAX_VOCAB_SIZE) {
    note.hidden = true;
    return null;
  }
  form.vocab_size.value = String(needed);
  note.textContent = `vocab_size grew from ${size} to ${needed} to fit the text: ` +
    `${words.size} distinct words, one id each, and the pad token.`;
  note.hidden = false;
  return needed;
}
