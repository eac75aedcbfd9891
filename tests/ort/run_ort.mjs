// run_ort.mjs — runs an exported package once with ONNX Runtime (onnxruntime-node 1.30.0, CPU EP).
//
//   PH_ORT_DIR=build/ort node run_ort.mjs MODEL_DIR inputs.safetensors outputs.safetensors [cpu]
//   node run_ort.mjs MODEL_DIR --load-only      (create the session, print "loaded", exit 0)
//
// Feeds every tensor of inputs.safetensors to MODEL_DIR/model.onnx by name, runs, and writes
// every graph output to outputs.safetensors (in the session's output order). Exit 0 on success;
// any error (a load, a missing input, a kernel failure) is printed and exits 1. tests/test_ort.c
// drives this; docs/ort-check.md says how to run it by hand.
//
// Graph optimizations are 'disabled': ORT runs the nodes we emitted as we emitted them, so the
// check is of our graph, not of ORT's rewrite of it (fusions such as MatMul+Add or the
// SkipLayerNorm/Gelu rewrites would change which kernels run and their summation order, and a
// constant-folded subgraph would never be checked). ORT still applies the transforms it cannot
// run without (Cast insertion around float-only kernels, EP assignment); those are part of what
// "ORT can run this" means. PH_ORT_OPT=basic|extended|all overrides, for experiments by hand.
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

// onnxruntime-node lives where scripts/install-ort.sh put it (PH_ORT_DIR, default build/ort), not
// beside this script: nothing is installed into the source tree.
const ORT_DIR = process.env.PH_ORT_DIR ||
    path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'build', 'ort');
const ort = createRequire(path.join(path.resolve(ORT_DIR), 'package.json'))('onnxruntime-node');

// safetensors dtype <-> ORT tensor type and typed array. F16 travels as its raw bits
// (Uint16Array), which ORT accepts for 'float16' tensors.
const DTYPES = {
  F32: { ort: 'float32', array: Float32Array },
  F16: { ort: 'float16', array: Uint16Array },
  I64: { ort: 'int64', array: BigInt64Array },
  I32: { ort: 'int32', array: Int32Array },
};
const BY_ORT = Object.fromEntries(Object.entries(DTYPES).map(([k, v]) => [v.ort, k]));

// safetensors: u64 little-endian header length n, n bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}}, then the data (offsets relative to 8 + n).
function readSafetensors(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 8) throw new Error(`${file}: shorter than 8 bytes`);
  const n = Number(buf.readBigUInt64LE(0));
  if (n <= 0 || 8 + n > buf.length) throw new Error(`${file}: header length ${n} out of range`);
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const feeds = {};
  for (const [name, e] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const dt = DTYPES[e.dtype];
    if (!dt) throw new Error(`${file}: tensor ${name}: unsupported dtype ${e.dtype}`);
    const [b, end] = e.data_offsets;
    const numel = e.shape.reduce((a, x) => a * x, 1);
    if (end - b !== numel * dt.array.BYTES_PER_ELEMENT || 8 + n + end > buf.length)
      throw new Error(`${file}: tensor ${name}: data_offsets [${b}, ${end}] do not fit ${e.dtype}[${e.shape}]`);
    // copy out: the typed array needs an aligned buffer of its own
    const bytes = new Uint8Array(buf.subarray(8 + n + b, 8 + n + end));
    feeds[name] = new ort.Tensor(dt.ort, new dt.array(bytes.buffer, 0, numel), e.shape);
  }
  return feeds;
}

// Writes tensors (name -> ort.Tensor) in the given order, data packed, header padded with spaces
// to a multiple of 8 (as our writer does, so the data section stays aligned).
function writeSafetensors(file, names, tensors) {
  const header = {};
  const chunks = [];
  let at = 0;
  for (const name of names) {
    const t = tensors[name];
    const dtype = BY_ORT[t.type];
    if (!dtype) throw new Error(`output ${name}: type ${t.type} cannot be written`);
    const bytes = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    header[name] = { dtype, shape: t.dims.map(Number), data_offsets: [at, at + bytes.length] };
    chunks.push(bytes);
    at += bytes.length;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
  fs.writeFileSync(file, Buffer.concat([len, Buffer.from(json, 'utf8'), ...chunks]));
}

async function main() {
  const [modelDir, inFile, outFile, ep = 'cpu'] = process.argv.slice(2);
  if (inFile === '--load-only') {
    const s = await ort.InferenceSession.create(path.join(modelDir, 'model.onnx'), {
      graphOptimizationLevel: 'disabled',
    });
    console.log('loaded');
    await s.release();
    return;
  }
  if (!outFile) throw new Error('usage: node run_ort.mjs MODEL_DIR inputs.safetensors outputs.safetensors [cpu]');
  const feeds = readSafetensors(inFile);
  const session = await ort.InferenceSession.create(path.join(modelDir, 'model.onnx'), {
    executionProviders: [ep],
    graphOptimizationLevel: process.env.PH_ORT_OPT || 'disabled',
  });
  for (const name of session.inputNames)
    if (!(name in feeds)) throw new Error(`graph input ${name} is not in ${inFile}`);
  const results = await session.run(feeds);
  writeSafetensors(outFile, session.outputNames, results);
  await session.release();
}

main().catch((e) => {
  console.error(`run_ort: ${e && e.message ? e.message : e}`);
  process.exit(1);
});
