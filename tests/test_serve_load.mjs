// test_serve_load.mjs — a load test of `pagedhybrid serve` on 127.0.0.1: CONCURRENCY streaming
// clients (default 64) send REQUESTS requests (default 128) twice over (a warm-up round, then the
// measured round), reading the raw server-sent events with fetch. Checked:
//   - zero failed requests, every stream well-formed (each event "data: {chunk}\n\n" with one id,
//     the right object, token ids, one finish_reason, a usage chunk, "data: [DONE]" last);
//   - every request's tokens identical in both rounds and to the same request sent alone
//     afterwards (greedy and seeded sampling; text and token-id prompts);
//   - clients that abort mid-stream (every 16th) cancel their requests: the server counts them
//     "aborted", and at the end no request runs or waits and no page or slot is held (/metrics);
//   - the server's resident memory (/proc/PID/status VmRSS) after the measured round is within
//     RSS_SLACK_MIB of what it was after the warm-up round.
// Reports requests/s, generated tokens/s, p50/p99 time to first token and inter-token latency (a
// request's mean gap between tokens after its first, as the client receives them) of the
// measured round. Writes OUT (JSON): the summary and a few requests with their tokens, which
// tests/test_serve_node.c compares with `pagedhybrid run` (a reference the server did not make).
//
//   node tests/test_serve_load.mjs URL SERVER_PID OUT.json
//   env: PH_LOAD_REQUESTS (128), PH_LOAD_CONCURRENCY (64), PH_LOAD_VOCAB (256),
//        PH_LOAD_RSS_SLACK_MIB (16)
import * as fs from 'node:fs';

const [url, pidArg, outPath] = process.argv.slice(2);
const N = Number(process.env.PH_LOAD_REQUESTS || 128);
const C = Number(process.env.PH_LOAD_CONCURRENCY || 64);
const VOCAB = Number(process.env.PH_LOAD_VOCAB || 256);
const RSS_SLACK_MIB = Number(process.env.PH_LOAD_RSS_SLACK_MIB || 16);
const ABORT_EVERY = 16;

let failures = 0;
function fail(what) {
  failures++;
  if (failures <= 20) console.log(`FAIL ${what}`);
}

// ---- the requests: deterministic ----------------------------------------------------------------
function rng(seed) {
  let s = BigInt(seed) | 1n;
  return () => {
    s ^= s << 13n; s &= (1n << 64n) - 1n;
    s ^= s >> 7n;
    s ^= s << 17n; s &= (1n << 64n) - 1n;
    return Number(s % 1000003n) / 1000003;
  };
}
const rand = rng(20261201);
const requests = [];
for (let i = 0; i < N; i++) {
  const aborter = i % ABORT_EVERY === ABORT_EVERY - 1;
  const body = {
    model: 'tiny',
    max_tokens: aborter ? 4000 : 8 + Math.floor(rand() * 40),
    ignore_eos: true,
    return_token_ids: true,
    stream: true,
    stream_options: { include_usage: true },
  };
  if (i % 4 === 3) {
    body.prompt = `request ${i}: ${'lorem ipsum '.repeat(1 + (i % 7))}`;
  } else {
    const len = 4 + Math.floor(rand() * 60);
    body.prompt = Array.from({ length: len }, () => Math.floor(rand() * (VOCAB - 1)));
  }
  if (i % 2 === 0) body.temperature = 0;
  else Object.assign(body, { temperature: 0.8, top_p: 0.95, top_k: 50, seed: 1000 + i });
  requests.push({ i, aborter, body });
}

// ---- one streaming request, parsed strictly ------------------------------------------------------
async function runStream(req) {
  const ctl = new AbortController();
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(req.body), signal: ctl.signal,
  });
  const out = { ok: false, ids: [], ttft: null, tpot: null, aborted: false, error: null, usage: null };
  if (res.status !== 200) {
    out.error = `status ${res.status}: ${await res.text()}`;
    return out;
  }
  const decoder = new TextDecoder();
  let buf = '', id = null, finish = null, done = false, last = t0, chunks = 0, first = 0;
  try {
    for await (const bytes of res.body) {
      buf += decoder.decode(bytes, { stream: true });
      let k;
      while ((k = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, k);
        buf = buf.slice(k + 2);
        if (done) throw new Error(`event after [DONE]: ${ev}`);
        if (!ev.startsWith('data: ')) throw new Error(`not a data event: ${JSON.stringify(ev)}`);
        const data = ev.slice(6);
        if (data === '[DONE]') { done = true; continue; }
        const c = JSON.parse(data);
        if (c.error) throw new Error(`error event: ${data}`);
        if (c.object !== 'text_completion' || typeof c.id !== 'string' || (id && c.id !== id))
          throw new Error(`bad envelope: ${data}`);
        id = c.id;
        if (c.usage) {
          if (c.choices.length !== 0) throw new Error(`usage chunk with choices: ${data}`);
          out.usage = c.usage;
          continue;
        }
        if (!('usage' in c) || c.usage !== null) throw new Error(`chunk without "usage": null: ${data}`);
        if (c.choices.length !== 1) throw new Error(`choices: ${data}`);
        const ch = c.choices[0];
        if (finish) throw new Error(`chunk after the finish: ${data}`);
        if (typeof ch.text !== 'string' || !Array.isArray(ch.token_ids)) throw new Error(`choice: ${data}`);
        const now = performance.now();
        if (ch.token_ids.length > 0) {
          if (out.ttft === null) { out.ttft = now - t0; first = out.ids.length + ch.token_ids.length; }
          last = now;
        }
        out.ids.push(...ch.token_ids);
        // inter-token latency: the mean gap after the first token (what vLLM calls TPOT)
        if (out.ids.length > first) out.tpot = (last - t0 - out.ttft) / (out.ids.length - first);
        if (ch.finish_reason) finish = ch.finish_reason;
        chunks++;
        if (req.aborter && chunks >= 3) { out.aborted = true; ctl.abort(); return out; }
      }
    }
    if (!done) throw new Error('no data: [DONE]');
    if (buf.length) throw new Error(`bytes after the last event: ${JSON.stringify(buf)}`);
    if (finish !== 'length') throw new Error(`finish_reason ${finish}`);
    if (!out.usage || out.usage.completion_tokens !== out.ids.length) throw new Error(`usage ${JSON.stringify(out.usage)} for ${out.ids.length} tokens`);
    if (out.ids.length !== req.body.max_tokens) throw new Error(`${out.ids.length} tokens, asked ${req.body.max_tokens}`);
    out.ok = true;
  } catch (e) {
    if (out.aborted) return out;
    out.error = String(e && e.message ? e.message : e);
  }
  return out;
}

async function alone(req) {
  const body = { ...req.body, stream: false };
  delete body.stream_options;
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  const j = await res.json();
  if (res.status !== 200) throw new Error(`alone: status ${res.status}: ${JSON.stringify(j)}`);
  return { ids: j.choices[0].token_ids, prompt_ids: j.choices[0].prompt_token_ids };
}

function rssKiB() {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pidArg}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch { return null; }
}

async function metrics() {
  const text = await (await fetch(`${url}/metrics`)).text();
  const get = (name) => {
    for (const line of text.split('\n')) {
      if (line.startsWith('#')) continue;
      const sp = line.lastIndexOf(' ');
      if (line.slice(0, sp) === name) return Number(line.slice(sp + 1));
    }
    return NaN;
  };
  return get;
}

async function round(label) {
  const results = new Array(N);
  let next = 0;
  const rss = [];
  const sampler = setInterval(() => { const r = rssKiB(); if (r) rss.push(r); }, 100);
  const t0 = performance.now();
  await Promise.all(Array.from({ length: Math.min(C, N) }, async () => {
    while (next < N) {
      const req = requests[next++];
      try {
        results[req.i] = await runStream(req);
      } catch (e) {
        results[req.i] = { ok: false, error: String(e), ids: [] };
      }
    }
  }));
  const seconds = (performance.now() - t0) / 1000;
  clearInterval(sampler);
  let bad = 0;
  for (const req of requests) {
    const r = results[req.i];
    if (req.aborter) {
      if (!r.aborted && !r.ok) { bad++; fail(`${label} request ${req.i} (aborter): ${r.error}`); }
    } else if (!r.ok) {
      bad++;
      fail(`${label} request ${req.i}: ${r.error}`);
    }
  }
  return { results, seconds, rss, bad };
}

function pct(xs, p) {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

const m0 = await metrics();
const aborted0 = m0('pagedhybrid_requests_total{reason="aborted"}');
const warm = await round('warm-up');
const rssWarm = rssKiB();
const meas = await round('measured');
const rssEnd = rssKiB();

// tokens: the same in both rounds, and the same as the request sent alone
let mismatches = 0;
const reference = [];
for (const req of requests) {
  if (req.aborter) continue;
  const a = warm.results[req.i], b = meas.results[req.i];
  if (!a.ok || !b.ok) continue;
  const solo = await alone(req);
  const same = (x, y) => x.length === y.length && x.every((v, k) => v === y[k]);
  if (!same(a.ids, b.ids) || !same(b.ids, solo.ids)) {
    mismatches++;
    fail(`request ${req.i}: tokens differ: warm-up ${a.ids.slice(0, 8)} measured ${b.ids.slice(0, 8)} alone ${solo.ids.slice(0, 8)}`);
  }
  if (reference.length < 8 && req.i % 4 !== 3) {
    const { stream, stream_options, return_token_ids, model, ...rest } = req.body;
    reference.push({ ...rest, prompt_ids: solo.prompt_ids, tokens: b.ids });
  }
}

// the aborted streams were cancelled, and nothing is held at the end
let idle = false, get = null;
for (let k = 0; k < 300 && !idle; k++) {
  get = await metrics();
  idle = get('pagedhybrid_requests_running') === 0 && get('pagedhybrid_requests_waiting') === 0 &&
      get('pagedhybrid_kv_pages_used') === 0 && get('pagedhybrid_state_slots_used') === 0;
  if (!idle) await new Promise((r) => setTimeout(r, 100));
}
if (!idle) fail(`the server still holds requests, pages or slots at the end: running ${get('pagedhybrid_requests_running')} waiting ${get('pagedhybrid_requests_waiting')} pages ${get('pagedhybrid_kv_pages_used')} slots ${get('pagedhybrid_state_slots_used')}`);
const nAborters = requests.filter((r) => r.aborter).length;
const abortedNow = get('pagedhybrid_requests_total{reason="aborted"}') - aborted0;
if (abortedNow !== 2 * nAborters) fail(`aborted requests counted ${abortedNow}, expected ${2 * nAborters}`);
const growthMiB = (rssEnd - rssWarm) / 1024;
if (!(growthMiB <= RSS_SLACK_MIB)) fail(`RSS grew ${growthMiB.toFixed(1)} MiB across the measured round (allowed ${RSS_SLACK_MIB})`);

const done = meas.results.filter((r, i) => r.ok && !requests[i].aborter);
const tokens = meas.results.reduce((s, r) => s + (r.ids ? r.ids.length : 0), 0);
const ttft = done.map((r) => r.ttft);
const tpot = done.filter((r) => r.tpot !== null).map((r) => r.tpot);
const summary = {
  requests: N, concurrency: C, completed: done.length, aborted_by_client: nAborters,
  failed: warm.bad + meas.bad, token_mismatches: mismatches,
  seconds: +meas.seconds.toFixed(3),
  requests_per_s: +(done.length / meas.seconds).toFixed(1),
  tokens_per_s: +(tokens / meas.seconds).toFixed(1),
  ttft_ms_p50: +pct(ttft, 50).toFixed(2), ttft_ms_p99: +pct(ttft, 99).toFixed(2),
  itl_ms_p50: +pct(tpot, 50).toFixed(3), itl_ms_p99: +pct(tpot, 99).toFixed(3),
  rss_mib_after_warmup: +(rssWarm / 1024).toFixed(1), rss_mib_end: +(rssEnd / 1024).toFixed(1),
  rss_mib_max: +(Math.max(...meas.rss, rssEnd) / 1024).toFixed(1),
};
console.log(`load: ${JSON.stringify(summary)}`);
fs.writeFileSync(outPath, JSON.stringify({ summary, reference }));
console.log(failures ? `test_serve_load: ${failures} failed` : 'test_serve_load: all passed');
process.exit(failures ? 1 : 0);
