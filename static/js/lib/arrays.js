// Typed arrays: the API's base64 Plotly.js typed-array specs decoded to nested arrays.
// (Shared by both pages through ../api.js.)

// Typed arrays. The API sends arrays as Plotly.js's typed-array spec
// {dtype, bdata (base64), shape} when asked to (COMPACT); fetchJson turns them back into
// nested arrays.

export function base64Bytes(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function halfToFloat(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

// {dtype, bdata, shape} -> nested arrays; NaN -> null (a masked entry), u1 -> booleans.
function decodeTypedArray(spec) {
  const bytes = base64Bytes(spec.bdata);
  let flat;
  if (spec.dtype === "f4") {
    flat = new Float32Array(bytes.buffer);
  } else if (spec.dtype === "f8") {
    flat = new Float64Array(bytes.buffer);
  } else if (spec.dtype === "f2") {
    const halves = new Uint16Array(bytes.buffer);
    flat = new Float32Array(halves.length);
    for (let i = 0; i < halves.length; i += 1) flat[i] = halfToFloat(halves[i]);
  } else {
    flat = bytes;
  }
  const boolean = spec.dtype === "u1";
  const shape = spec.shape;
  function build(offset, axis) {
    const size = shape[axis];
    if (axis === shape.length - 1) {
      const row = new Array(size);
      for (let i = 0; i < size; i += 1) {
        const v = flat[offset + i];
        row[i] = boolean ? v !== 0 : (Number.isNaN(v) ? null : v);
      }
      return row;
    }
    const stride = shape.slice(axis + 1).reduce((a, b) => a * b, 1);
    return Array.from({ length: size }, (_, i) => build(offset + i * stride, axis + 1));
  }
  return shape.length === 0 ? [] : build(0, 0);
}

// Replace every typed-array spec in an API response by nested arrays, in place.
export function decodeArrays(value) {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return value;
  if (typeof value.bdata === "string" && Array.isArray(value.shape)) return decodeTypedArray(value);
  for (const key of Object.keys(value)) value[key] = decodeArrays(value[key]);
  return value;
}

// The one entry of an answer's axis of length 1: a request for one index (sequence_index,
// head_index) keeps that axis, as the API's shapes do. Throws when it has another length.
function single(array, axis) {
  if (array.length !== 1) throw new Error(`an answer for one ${axis} has ${array.length}`);
  return array[0];
}

// A POST /api/v1/attention answer to a request of one sequence and one head (sequence_index
// and head_index), without those axes: {weights (L_q, L_k), mask (L_q, L_k), queries and
// keys (their labels), stages: {name: (L, d_k)} for those asked for in `include`}.
export function oneHeadAnswer(res) {
  const head = (array) => single(single(array, "sequence"), "head");
  return {
    weights: head(res.weights),
    mask: single(res.attn_mask, "sequence"),
    queries: single(res.query_labels, "sequence"),
    keys: single(res.key_labels, "sequence"),
    stages: Object.fromEntries(Object.entries(res.stages || {}).map(([n, s]) => [n, head(s)])),
  };
}

// The shape of a nested array, read down its first entries: (N, H, L) -> [N, H, L]
// (an empty axis ends it).
export function shapeOf(nested) {
  const shape = [];
  for (let a = nested; Array.isArray(a) || ArrayBuffer.isView(a); a = a[0]) {
    shape.push(a.length);
    if (a.length === 0) break;
  }
  return shape;
}
