// Writes Arrow IPC files (.arrow) and streams (.arrows) into the directory
// given as the first argument, with writers that are not weir's: Arrow JS
// (apache-arrow) and Flechette (@uwdata/flechette, an Arrow implementation
// of its own, in JavaScript). Every
// file holds rows of one schema — id int64, name utf8, score float64
// (null every third row) — with ids in a range of its own, in several
// record batches. manifest.json lists each file's ids.
//
// Usage: node write.mjs OUT_DIR [ROWS_PER_FILE] [ROWS_PER_BATCH]
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Float64, Int64, Table, Utf8, tableToIPC, vectorFromArray } from 'apache-arrow';
import * as fl from '@uwdata/flechette';

const [out, perFileArg, perBatchArg] = process.argv.slice(2);
if (!out) {
  console.error('usage: node write.mjs OUT_DIR [ROWS_PER_FILE] [ROWS_PER_BATCH]');
  process.exit(2);
}
const perFile = Number(perFileArg ?? 20000);
const perBatch = Number(perBatchArg ?? 4096);

const name = (i) => `row-${i}`;
const score = (i) => (i % 3 === 0 ? null : i / 4);
const ids = (from, n) => Array.from({ length: n }, (_, k) => from + k);

// Arrow JS: one Table per batch, concatenated (tableToIPC writes each
// batch as its own record batch message).
function arrowJS(from) {
  let table = null;
  for (let b = 0; b < perFile; b += perBatch) {
    const is = ids(from + b, Math.min(perBatch, perFile - b));
    const t = new Table({
      id: vectorFromArray(is.map(BigInt), new Int64()),
      name: vectorFromArray(is.map(name), new Utf8()),
      score: vectorFromArray(is.map(score), new Float64()),
    });
    table = table ? table.concat(t) : t;
  }
  return table;
}

// Flechette: one table, cut into record batches of perBatch rows.
function flechette(from) {
  const is = ids(from, perFile);
  return fl.tableFromArrays(
    { id: is.map(BigInt), name: is.map(name), score: is.map(score) },
    { types: { id: fl.int64(), name: fl.utf8(), score: fl.float64() }, maxBatchRows: perBatch },
  );
}

const manifest = [];
let from = 0;
const add = (file, write) => {
  write(join(out, file), from);
  manifest.push({ file, from, count: perFile });
  from += perFile;
};
add('a-arrowjs.arrow', (p, f) => writeFileSync(p, tableToIPC(arrowJS(f), 'file')));
add('b-arrowjs.arrows', (p, f) => writeFileSync(p, tableToIPC(arrowJS(f), 'stream')));
add('c-flechette.arrow', (p, f) => writeFileSync(p, fl.tableToIPC(flechette(f), { format: 'file' })));
add('d-flechette.arrows', (p, f) => writeFileSync(p, fl.tableToIPC(flechette(f), { format: 'stream' })));
writeFileSync(join(out, 'manifest.json'), JSON.stringify(manifest, null, 1));
