// jinja_ref — the reference side of test_chat_ref: @huggingface/jinja 0.5.11 (what transformers.js
// renders chat templates with) renders every case the C test wrote.
//
//   node jinja_ref.mjs CASES OUT
//
// CASES: {"templates": [source, ...], "cases": [{"t": index into templates, "context": {...}}]}.
// OUT: a JSON array with one entry per case: {"text": the rendered string} or {"error": message}
// (a template that does not parse is an error of every case using it). The package lives under
// PH_NODE_DIR (default build/ort), never in the source tree.
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

const NODE_DIR = process.env.PH_NODE_DIR ||
    path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'build', 'ort');
const req = createRequire(path.join(path.resolve(NODE_DIR), 'package.json'));
const { Template } = req('@huggingface/jinja');

const [casesFile, outFile] = process.argv.slice(2);
const input = JSON.parse(fs.readFileSync(casesFile, 'utf8'));
const compiled = input.templates.map((src) => {
  try {
    return { template: new Template(src) };
  } catch (e) {
    return { error: `parse: ${e && e.message ? e.message : e}` };
  }
});
const out = input.cases.map((c) => {
  const t = compiled[c.t];
  if (t.error) return { error: t.error };
  try {
    return { text: t.template.render(c.context) };
  } catch (e) {
    return { error: String(e && e.message ? e.message : e) };
  }
});
fs.writeFileSync(outFile, JSON.stringify(out));
