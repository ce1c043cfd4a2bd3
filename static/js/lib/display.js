// One readable form of a token for every view (axes, strips, chips, hovers, tables), from
// the tokenizer's own string (the API's tokens are unchanged):
// - byte-level BPE (GPT-2, Llama 3, SmolLM2) writes each byte as a printable character
//   (GPT-2's bytes_to_unicode: a space is Ġ, a newline Ċ, é is Ã©): a token made only of
//   those characters is turned back into its bytes and, when they are whole UTF-8, into
//   its text ("Ġcapital" → "␣capital", "ĠcafÃ©" → "␣café");
// - SentencePiece writes a space as ▁ (and bytes as <0x0A>);
// - then a space shows as ␣, a newline as ↵, a tab as ⇥, other control characters as
//   their code (␀-style pictures would be unreadable at 10 px).
// Source: openai/gpt-2 encoder.py bytes_to_unicode; transformers' GPT2Tokenizer.

const BYTE_OF = (() => {
  // bytes_to_unicode: the printable bytes map to themselves, the other 68 bytes (0-32,
  // 127-160, 173) to U+0100 onwards, in order.
  const map = new Map();
  const printable = (b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  let shifted = 0;
  for (let b = 0; b < 256; b += 1) {
    if (printable(b)) map.set(String.fromCharCode(b), b);
    else {
      map.set(String.fromCharCode(256 + shifted), b);
      shifted += 1;
    }
  }
  return map;
})();
const SHIFTED = /[\u0100-\u0143]/u; // only byte-level BPE writes these (a space, a newline...)
const utf8 = new TextDecoder("utf-8", { fatal: true });
const SENTENCEPIECE_BYTE = /^<0x([0-9A-Fa-f]{2})>$/u;
const WHITESPACE = { " ": "␣", "\n": "↵", "\r": "↵", "\t": "⇥" };

// The token's bytes as text, when it is byte-level BPE and they are whole UTF-8; else null.
function byteLevelText(token) {
  if (!SHIFTED.test(token) && !/[\u00a1-\u00ff]{2}/u.test(token)) return null;
  const bytes = [];
  for (const ch of token) {
    const b = BYTE_OF.get(ch);
    if (b === undefined) return null;
    bytes.push(b);
  }
  try {
    return utf8.decode(new Uint8Array(bytes));
  } catch {
    return null; // a piece of a character (an emoji split over tokens): its markers only
  }
}

function visibleWhitespace(text) {
  return text.replace(/[ \n\r\t]/gu, (ch) => WHITESPACE[ch]).replace(
    // other control characters (C0 and C1, DEL): their code
    /[\u0000-\u001f\u007f-\u009f]/gu,
    (ch) => `\\x${ch.charCodeAt(0).toString(16).padStart(2, "0")}`,
  );
}

/** The readable form of one token string (see above); any other value as String(value). */
export function displayToken(token) {
  const text = String(token);
  const piece = SENTENCEPIECE_BYTE.exec(text);
  if (piece) {
    const b = Number.parseInt(piece[1], 16);
    return b < 128 ? visibleWhitespace(String.fromCharCode(b)) : text;
  }
  const decoded = byteLevelText(text);
  if (decoded !== null) return visibleWhitespace(decoded);
  return visibleWhitespace(text.replace(/[Ġ▁]/gu, " ").replace(/Ċ/gu, "\n").replace(/ĉ/gu, "\t"));
}

/** displayToken of each token of an array. */
export function displayTokens(tokens) {
  return Array.from(tokens, displayToken);
}
