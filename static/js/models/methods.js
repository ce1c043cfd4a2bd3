// How the page draws each whole-model method's own map, keyed by the API's method names.
// What each method is (its label, note, what one number is, the views that draw it) is the
// server's method registry (attnviz.pretrained.methods, through models-config, read in
// form.js and notes.js); this module says how its map is drawn, so that no view asks a
// method by its name.

// Gradients' scale follows the target's (1e-7 in a tiny random model, 1 in SmolLM2):
// three significant digits, not two decimals.
export const GRADIENT_FORMAT = { valueName: "relevance", textFormat: "%{z:.3g}", hoverFormat: ".4g" };

// R − I: the identity (each token's own residual) would outshine what attention adds.
const withoutIdentity = (row, i) => row.map((v, j) => (i === j ? v - 1 : v));

// Each method's map in the Averages view: the figure's name (its data-map, which the
// picker scrolls to), its map of a response at layer l (null: none), whether its rows
// are the averages' (pooled like them) or the tokens', its title and format. A method
// with a row of its map beside the generation view's query rows has `row`.
const METHOD_MAPS = {
  flow: {
    figure: "flow",
    map: (res) => res.method_map[0],
    averaged: false,
    title: () => "Attention flow (Abnar & Zuidema 2020)",
    format: {},
    // Over flow's bound the map is of the last tokens that fit (method_window).
    windowed: true,
  },
  value_zeroing: {
    figure: "value-zeroing",
    map: (res, l) => res.method_map[l] ?? null,
    averaged: false,
    title: (l) => `Value zeroing, layer ${l} (Mohebbi et al. 2023)`,
    format: { valueName: "context mixing" },
  },
  grad_rollout: {
    figure: "grad-rollout",
    map: (res) => res.method_map[0].map(withoutIdentity),
    averaged: true,
    title: () => "Gradient-weighted rollout R − I (Chefer et al. 2021)",
    format: GRADIENT_FORMAT,
    row: {
      figure: "grad-rollout-row",
      values: (res, q, cols) => withoutIdentity(res.method_map[0][q].slice(0, cols), q),
      title: (q) => `Gradient-weighted rollout, row of token ${q} (R − I)`,
      hint: (q) => `Below: token ${q}'s row of gradient-weighted rollout (Chefer et al. ` +
        "2021), R − I: how much each key token matters to the target through this token.",
      format: GRADIENT_FORMAT,
    },
  },
};

// The figure a response's own method map makes in the Averages view at layer l, or null:
// {name, z, averaged, title, format, first} (first: the position of its first row, 0 but
// for a map of a window of the input, method_window).
export function methodFigure(res, l) {
  const drawn = METHOD_MAPS[res.method];
  if (!drawn || !res.method_map) return null;
  const z = drawn.map(res, l);
  if (!z) return null;
  const window = drawn.windowed && res.method_window;
  const title = window
    ? `${drawn.title(l)}, tokens ${window[0]}–${window[1] - 1}: the last ${window[1] - window[0]} ` +
      "that fit its bound"
    : drawn.title(l);
  return { name: drawn.figure, z, averaged: drawn.averaged, title, format: drawn.format,
    first: window ? window[0] : 0 };
}

// How the generation view draws a row of the response's method map, or null.
export function methodRow(res) {
  const drawn = METHOD_MAPS[res.method];
  return drawn && drawn.row && res.method_map ? drawn.row : null;
}

// The data-map name of a method's own figure (head importance: its grid in the model
// view), to bring into sight.
export function methodFigureName(method) {
  return METHOD_MAPS[method]?.figure ?? method.replace("_", "-");
}
