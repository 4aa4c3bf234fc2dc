// Cross-check of the hand-written pre-tokenizer scanners against a real
// backtracking regex engine (V8), on random strings. Writes one JSON line per case:
// {"name": pattern name, "text": ..., "pieces": [...]}.
// Usage: node testdata/regex_crosscheck.js > /tmp/cases.jsonl
//        TOKENIZER_CROSSCHECK=/tmp/cases.jsonl go test ./engine/tokenizer -run CrossCheck
// V8's \s differs from Oniguruma's White_Space (it has U+FEFF, lacks U+0085) and
// Node 20 has no (?i:...), so both are spelled out.
const S = "\\t\\n\\v\\f\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const ci = "'[sSſ]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]";
const patterns = {
  gpt2: `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^${S}\\p{L}\\p{N}]+|[${S}]+(?![^${S}])|[${S}]+`,
  llama3: `${ci}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^${S}\\p{L}\\p{N}]+[\\r\\n]*|[${S}]*[\\r\\n]+|[${S}]+(?![^${S}])|[${S}]+`,
  qwen2: `${ci}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^${S}\\p{L}\\p{N}]+[\\r\\n]*|[${S}]*[\\r\\n]+|[${S}]+(?![^${S}])|[${S}]+`,
};
const alphabet = ["a", "B", "é", "ж", "1", "2", "٣", "½", " ", " ", " ", "\t", "\n", "\r", "\u3000",
  "\u00a0", "\u0085", ".", "!", "'", "'", "s", "S", "t", "r", "e", "E", "v", "m", "l", "L", "d", "ſ",
  "\u0301", "🦙", "_", "-", "\u200b", "\ufeff"];
let seed = 12345;
function rand(n) { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; }
for (const [name, src] of Object.entries(patterns)) {
  const re = new RegExp(src, "gu");
  for (let k = 0; k < 20000; k++) {
    let text = "";
    const len = 1 + rand(16);
    for (let i = 0; i < len; i++) text += alphabet[rand(alphabet.length)];
    const pieces = text.match(re) || [];
    console.log(JSON.stringify({ name, text, pieces }));
  }
}
