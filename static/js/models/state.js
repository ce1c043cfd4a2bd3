// The page state of /models, declared here only: every other module imports what it reads
// and changes. The text views' (`state`), the streamed grid's progress, the line view's
// heads, the functions of models.js that the modules under it call back (`page`), and the
// speech and image views' (media.js).
import { ALIGNMENT, MEAN } from "../media/common.js";

export const state = {
  listing: null, models: [], request: null, view: "model", overview: null, overviewKey: null,
  overviewRequest: null, layers: new Map(), heads: new Map(), ticket: 0,
  // The overview's stream in flight (streamOverview), when the last one's answer ended
  // (performance.now()), and when the model view drew its first layer and its whole grid.
  stream: null, responseAt: null, firstLayerAt: null, gridAt: null, computes: 0,
  computing: null, // the JSON of the request a Compute is drawing, until it is drawn
  answeredAt: null, // when the latest attention request was answered (viewTimings)
  shownAt: null, // when the open view's maps on screen were drawn, if before the others
  selected: new Set(), // the selected query positions among the shown tokens (tokens.js)
  selectionTokens: null, // the tokens the selection counts in (a new input clears it)
  // The token explorer: the chosen query position, its responses by request, a ticket.
  queryIndex: null, queries: new Map(), queryBase: null, queryTicket: 0,
  pending: null, // the model whose loading a computation waits for
  pollTimer: null, specials: new Map(),
  // The shared link's request, and the model whose family's defaults the form has.
  link: null, adaptedFor: null,
  linked: {}, // the link's view settings (api.js), applied to the first response
  // The request (JSON) whose results are on screen, null when none: the form differing
  // from it marks them out of date (updateStale).
  shown: null,
  excludeSink: false, // the averages and rollout without the first token (attentionSink)
  layerHead: 0, // the head the layer view enlarges
  enlargedHead: null, // [layer, head] enlarged last (the link's &head=), null: none yet
  jumpTo: null, // [layer, head] the jump box asked for, until a view enlarges it
  // The head atlas: atlases by request (JSON), the one shown and its request.
  atlases: new Map(), atlas: null, atlasRequest: null,
  atlasFetch: null, // the atlas being computed: {key, controller, progress, promise}
  atlasFile: null, // an opened atlas file, {name, atlas}: shown while its model is the page's
};

// A vision-language model's image (models/prompt_image.js): its data: URL, drawn under
// the overlay and sent with the prompt (form.js readRequest), and its file's name.
export const promptImage = { dataUrl: null, name: null };

// The owner of the streamed overview's progress box (stream.js layerProgress): the stream
// it shows, and the timer that shows it once the stream has lasted PROGRESS_DELAY_MS.
export const progress = { owner: null, timer: null };

// The line view's heads shown (views/lines.js), kept across redraws.
export const lineHeads = { count: 0, visible: new Set() };

// What models.js does for the modules it imports, set there before the page starts (an
// import of models.js from them would be a cycle): renderView() draws the open view,
// compute() computes the form's request, views is the VIEWS table (models/views.js).
export const page = { renderView: null, compute: null, views: null };

// ---------------------------------------------------------------------------
// Speech and images (media.js).

// The speech and image views' elements, handed in by models.js (media.js bindMedia).
export const mediaDom = {};

// The clip's playback (media/playback.js).
export const player = {
  context: null, // the AudioContext, made on the first play (a click: the autoplay policy)
  blob: null, // the clip heard
  buffer: null, // a promise of its decoded samples (AudioBuffer), made on the first play
  duration: 0, // s, the server's length of the clip (the maps' time axes)
  spans: [], // [start, end] (s) of each transcribed token, tokenSpans
  source: null, // the AudioBufferSourceNode playing, or null
  offset: 0, // s: where the source started; the position while paused
  startedAt: 0, // context.currentTime when the source started
  stopAt: 0, // s: where the source stops (the clip's end, or a token span's)
  spanToken: null, // the token whose span is playing or was just played, or null
  frame: 0, // requestAnimationFrame id while playing
  bar: null, // the controls (playerBar)
  get playing() { return this.source !== null; },
  // The position in the clip (s).
  get currentTime() {
    if (!this.source) return this.offset;
    return Math.min(this.stopAt, this.offset + this.context.currentTime - this.startedAt);
  },
};

export const media = {
  audio: null, // {blob, name} of the clip to transcribe
  image: null, // {blob, name} of the image
  query: 0, // the image token whose attention is shown
  speech: null, // the last speech response
  vision: null, // the last vision response
  token: null, // the selected transcribed token (row of the cross block), or null
  recorder: null,
  submit: null, // starts a computation (the page's Compute)
  player, // the clip's playback (media/playback.js)
};

// The speech view's choices (media/speech.js) and the image view's (media/vision.js).
export const speechView = { block: "cross", layer: ALIGNMENT, head: MEAN };
export const visionView = { layer: null, show: MEAN };
