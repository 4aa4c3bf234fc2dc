// Writes the Parquet files engine/data's tests read, with two writers independent of
// parquet-go: hyparquet-writer (pyarrow's 3-level LIST layout, as verl's and the Hub's files
// have it) and @dsnp/parquetjs (2-level repeated groups, page indexes). Beside each file it
// writes the same rows as JSONL, which the tests read as the expected values.
//
// usage: node write.mjs OUT_DIR MODULES_DIR   (MODULES_DIR holds node_modules: .ci/run's npm ci)
import { createRequire } from 'node:module'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const [out, modules] = process.argv.slice(2)
const require = createRequire(join(modules, 'package.json'))
const { parquetWriteFile } = await import(pathToFileURL(require.resolve('hyparquet-writer')).href)
const parquetjs = require('@dsnp/parquetjs')

const json = rows => rows.map(r => JSON.stringify(r, (k, v) => typeof v === 'bigint' ? Number(v) : v)).join('\n') + '\n'
const str = (name, repetition_type = 'OPTIONAL') => ({ name, type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type })
const messageList = name => [
  { name, repetition_type: 'OPTIONAL', converted_type: 'LIST', num_children: 1 },
  { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
  { name: 'element', repetition_type: 'OPTIONAL', num_children: 2 },
  str('content'),
  str('role'),
]

// hyparquet-writer: rows → columns under an explicit schema (root's children listed in order).
function write(file, rows, fields, opts = {}) {
  const names = fields.map(f => f[0].name)
  const schema = [{ name: 'root', num_children: fields.length }, ...fields.flat()]
  mkdirSync(join(out, file, '..'), { recursive: true })
  parquetWriteFile({
    filename: join(out, file), schema,
    columnData: names.map(name => ({ name, data: rows.map(r => r[name] ?? null), columnIndex: true })),
    ...opts,
  })
}

// verl's layout (examples/data_preprocess/gsm8k.py): chat prompt, nested ground truth, two row groups.
const verlRows = [
  { data_source: 'openai/gsm8k', prompt: [{ content: 'Think step by step.', role: 'system' }, { content: 'Natalia sold 48 clips. How many?', role: 'user' }], ability: 'math', reward_model: { ground_truth: '72', style: 'rule' }, extra_info: { index: 0n, split: 'train', answer: '48+24=72' } },
  { data_source: 'openai/gsm8k', prompt: [{ content: 'Ünïcödé: 7×6 = ?', role: 'user' }], ability: 'math', reward_model: { ground_truth: '42', style: 'rule' }, extra_info: { index: 1n, split: 'train', answer: '7*6=42' } },
  { data_source: 'openai/gsm8k', prompt: [{ content: 'What is 1,000 + 1?', role: 'user' }], ability: 'math', reward_model: { ground_truth: '1001', style: 'rule' }, extra_info: { index: 2n, split: 'train', answer: '' } },
  { data_source: 'openai/gsm8k', prompt: [{ content: '', role: 'system' }, { content: 'Say "yes"\nthen stop.', role: 'user' }], ability: 'math', reward_model: { ground_truth: '1', style: 'rule' }, extra_info: { index: 3n, split: 'train', answer: 'x' } },
  { data_source: 'openai/gsm8k', prompt: [{ content: 'Last one?', role: 'user' }], ability: 'math', reward_model: { ground_truth: '0', style: 'rule' }, extra_info: { index: 4n, split: 'train', answer: 'y' } },
]
const verlFields = [
  [str('data_source')], messageList('prompt'), [str('ability')],
  [{ name: 'reward_model', repetition_type: 'OPTIONAL', num_children: 2 }, str('ground_truth'), str('style')],
  [{ name: 'extra_info', repetition_type: 'OPTIONAL', num_children: 3 }, { name: 'index', type: 'INT64', repetition_type: 'OPTIONAL' }, str('split'), str('answer')],
]
write('verl.parquet', verlRows, verlFields, { rowGroupSize: 2 })
writeFileSync(join(out, 'verl.jsonl'), json(verlRows))
write('verl-split/train.parquet', verlRows.slice(0, 3), verlFields)
write('verl-split/test.parquet', verlRows.slice(3), verlFields)

// A flat Hub table (MATH-style): problem/solution, an INT32 and a null answer.
const mathRows = [
  { problem: 'Compute $2^{10}$.', solution: 'It is $\\boxed{1024}$.', level: 2, type: 'Algebra' },
  { problem: 'Find $x$ if $x+1=3$.', solution: null, level: 1, type: 'Algebra' },
  { problem: 'Zero?', solution: '0', level: 5, type: 'Counting' },
]
write('math.parquet', mathRows, [[str('problem')], [str('solution')], [{ name: 'level', type: 'INT32', repetition_type: 'OPTIONAL' }], [str('type')]])
writeFileSync(join(out, 'math.jsonl'), json(mathRows))

// A Hub folder of GSM8K shards, with a test split beside the train one.
const gsm = i => ({ question: `Tom has ${i} apples and buys ${i}. How many?`, answer: `${i}+${i}=<<${i}+${i}=${2 * i}>>${2 * i}\n#### ${(2000 * i).toLocaleString('en-US')}` })
const gsmTrain = [1, 2, 3, 4, 5].map(gsm)
const gsmFields = [[str('question', 'REQUIRED')], [str('answer', 'REQUIRED')]]
write('gsm8k/train-00000-of-00002.parquet', gsmTrain.slice(0, 3), gsmFields)
write('gsm8k/train-00001-of-00002.parquet', gsmTrain.slice(3), gsmFields)
write('gsm8k/test-00000-of-00001.parquet', [gsm(9)], gsmFields)
writeFileSync(join(out, 'gsm8k-train.jsonl'), json(gsmTrain))

// SFT-style conversations: the final assistant turn is the reference completion.
const msgRows = [
  { messages: [{ role: 'user', content: 'Sum 2 and 2.' }, { role: 'assistant', content: '2+2=4\n#### 4' }], source: 'a' },
  { messages: [{ role: 'system', content: 'Be terse.' }, { role: 'user', content: 'Hi' }], source: 'b' },
]
write('messages.parquet', msgRows, [messageList('messages'), [str('source')]])
writeFileSync(join(out, 'messages.jsonl'), json(msgRows))

// Bad rows, each refused naming file and row.
write('bad-role.parquet', [
  { prompt: [{ role: 'user', content: 'a' }] }, { prompt: [{ role: 'user', content: 'b' }] },
  { prompt: [{ role: 'user', content: 'c' }, { role: 'bot', content: 'd' }] },
], [messageList('prompt')])
write('int-prompt.parquet', [{ prompt: 5 }], [[{ name: 'prompt', type: 'INT32', repetition_type: 'OPTIONAL' }]])
write('binary-prompt.parquet', [{ prompt: new TextEncoder().encode('fine') }, { prompt: new Uint8Array([0x63, 0x61, 0x66, 0xe9]) }],
  [[{ name: 'prompt', type: 'BYTE_ARRAY', repetition_type: 'OPTIONAL' }]])
write('null-prompt.parquet', [{ prompt: 'a' }, { prompt: null }], [[str('prompt')]])

// @dsnp/parquetjs: a flat table (its page index upsets parquet-go's ReadPageIndex) and verl's
// columns as 2-level repeated groups.
const dsnpFlat = [0, 1, 2, 3].map(i => ({ question: `What is ${i}+${i}?`, answer: `${i}+${i}=${2 * i}\n#### ${2 * i}`, id: BigInt(i) }))
let w = await parquetjs.ParquetWriter.openFile(new parquetjs.ParquetSchema({
  question: { type: 'UTF8' }, answer: { type: 'UTF8' }, id: { type: 'INT64' },
}), join(out, 'dsnp-flat.parquet'))
for (const r of dsnpFlat) await w.appendRow(r)
await w.close()
writeFileSync(join(out, 'dsnp-flat.jsonl'), json(dsnpFlat))

const dsnpNested = [
  { data_source: 'x', prompt: [{ role: 'system', content: 'S' }, { role: 'user', content: 'Q1' }], reward_model: { ground_truth: '3' } },
  { data_source: 'y', prompt: [{ role: 'user', content: 'Q2 ✓' }], reward_model: { ground_truth: '-1.5' } },
]
w = await parquetjs.ParquetWriter.openFile(new parquetjs.ParquetSchema({
  data_source: { type: 'UTF8' },
  prompt: { repeated: true, fields: { role: { type: 'UTF8' }, content: { type: 'UTF8' } } },
  reward_model: { fields: { ground_truth: { type: 'UTF8' } } },
}), join(out, 'dsnp-nested.parquet'))
for (const r of dsnpNested) await w.appendRow(r)
await w.close()
writeFileSync(join(out, 'dsnp-nested.jsonl'), json(dsnpNested))
