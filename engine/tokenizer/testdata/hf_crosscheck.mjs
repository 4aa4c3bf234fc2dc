// Checks encodings written by TestExportCrossCheck against Hugging Face's
// tokenizers.js (npm @huggingface/tokenizers), an implementation independent of ours.
// Usage: TOKENIZER_EXPORT=/tmp/xc go test ./engine/tokenizer -run ExportCrossCheck
//        node testdata/hf_crosscheck.mjs /tmp/xc   (with @huggingface/tokenizers installed)
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const dir = process.argv[2];
let bad = 0, n = 0;
for (const name of readdirSync(dir).filter((f) => f.endsWith(".json"))) {
  const tok = new Tokenizer(JSON.parse(readFileSync(join(dir, name), "utf8")), {});
  const lines = readFileSync(join(dir, name.replace(/\.json$/, ".jsonl")), "utf8").trim().split("\n");
  for (const line of lines) {
    const c = JSON.parse(line);
    const got = tok.encode(c.text, { add_special_tokens: false }).ids;
    n++;
    if (JSON.stringify(got) !== JSON.stringify(c.ids)) {
      if (++bad <= 10) console.log(`${name} ${JSON.stringify(c.text)}\n  js: ${got}\n  go: ${c.ids}`);
    }
    if (c.ids.length === 0) continue;
    const text = tok.decode(c.ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
    if (text !== c.text) {
      if (++bad <= 10) console.log(`${name} decode ${JSON.stringify(c.text)} -> ${JSON.stringify(text)}`);
    }
  }
}
console.log(`${n} cases, ${bad} differ`);
process.exit(bad ? 1 : 0);
