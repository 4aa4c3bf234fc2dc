// Runs Hugging Face's tokenizers library (the Rust library, through its Node binding,
// npm package "tokenizers") on the jobs a Go test wrote, and prints what it makes of
// them as one JSON document. hf_test.go compares that with this package's results.
//
// Usage: NODE_PATH=DIR/node_modules node hf_reference.cjs JOBS.json > RESULTS.json
//
// JOBS.json: [{"file": tokenizer.json path, "texts": [...], "pairs": [[a, b]...],
//              "decodes": [[ids]...]}]
// RESULTS.json: per job {"texts": [{"ids", "special", "decoded"}], "pairs": [{"ids",
//              "special"}], "decodes": [[kept, skipped]]}: ids without and with special
//              tokens, decode(ids) keeping special tokens, decode of the given ids
//              keeping and skipping special tokens.
const fs = require("fs");
const { Tokenizer } = require("tokenizers");

async function run(job) {
  const tok = Tokenizer.fromFile(job.file);
  const ids = (e) => Array.from(e.getIds());
  const plain = await tok.encodeBatch(job.texts, { addSpecialTokens: false });
  const special = await tok.encodeBatch(job.texts, { addSpecialTokens: true });
  const decoded = await tok.decodeBatch(plain.map(ids), false);
  const texts = job.texts.map((_, i) => ({ ids: ids(plain[i]), special: ids(special[i]), decoded: decoded[i] }));
  const pairs = [];
  for (const [a, b] of job.pairs || []) {
    const p = await tok.encode(a, b, { addSpecialTokens: false });
    const s = await tok.encode(a, b, { addSpecialTokens: true });
    pairs.push({ ids: ids(p), special: ids(s) });
  }
  const decodes = [];
  for (const d of job.decodes || []) {
    decodes.push([await tok.decode(d, false), await tok.decode(d, true)]);
  }
  return { texts, pairs, decodes };
}

(async () => {
  const jobs = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const out = [];
  for (const job of jobs) {
    const t0 = Date.now();
    out.push(await run(job));
    if (process.env.HF_REFERENCE_TIMES) console.error(`${Date.now() - t0} ms ${job.file}`);
  }
  process.stdout.write(JSON.stringify(out));
})().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
