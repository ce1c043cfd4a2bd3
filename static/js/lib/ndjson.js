// An NDJSON answer (one JSON value per line, as the streamed grid and the head atlas send
// them), read as it arrives. Each non-empty line is parsed and handed to `onLine`; the first
// value other than undefined that onLine returns ends the reading and is what this resolves
// to (an "end" line: the server closes the answer after it, and it is not cancelled here,
// which would count as a failed request). Resolves to undefined when the answer ends first.
// The last line may lack its newline. What onLine throws (an "error" line) rejects.
export async function readLines(response, onLine) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    text += done ? decoder.decode() : decoder.decode(value, { stream: true });
    let newline = text.indexOf("\n");
    while (newline >= 0 || (done && text.trim() !== "")) {
      const line = newline >= 0 ? text.slice(0, newline) : text;
      text = newline >= 0 ? text.slice(newline + 1) : "";
      if (line.trim() !== "") {
        const result = onLine(JSON.parse(line));
        if (result !== undefined) return result;
      }
      newline = text.indexOf("\n");
    }
    if (done) return undefined;
  }
}
