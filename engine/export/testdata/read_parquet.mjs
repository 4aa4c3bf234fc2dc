// Reads a Parquet file with the two npm readers the project's tests use, independent of
// parquet-go: hyparquet (the reader hyparquet-writer is built on) and @dsnp/parquetjs. Prints
// {"hyparquet": rows, "parquetjs": rows} with LIST columns as plain arrays.
//
// usage: node read_parquet.mjs FILE MODULES_DIR   (MODULES_DIR holds node_modules: .ci/run's npm ci)
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const [file, modules] = process.argv.slice(2)
const require = createRequire(join(modules, 'package.json'))
const hyparquet = await import(pathToFileURL(require.resolve('hyparquet')).href)
const parquetjs = require('@dsnp/parquetjs')

// parquetjs gives a 3-level LIST as {list: [{element: x}]}.
const plain = v => {
  if (typeof v === 'bigint') return Number(v)
  if (Array.isArray(v)) return v.map(plain)
  if (v && typeof v === 'object') {
    if (Array.isArray(v.list)) return v.list.map(e => plain(e.element))
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]))
  }
  return v
}

const buffer = await hyparquet.asyncBufferFromFile(file)
const hyRows = (await hyparquet.parquetReadObjects({ file: buffer })).map(plain)

const reader = await parquetjs.ParquetReader.openFile(file)
const cursor = reader.getCursor()
const pjRows = []
for (let r = await cursor.next(); r; r = await cursor.next()) pjRows.push(plain(r))
await reader.close()

process.stdout.write(JSON.stringify({ hyparquet: hyRows, parquetjs: pjRows }))
