// test_serve_sdk.mjs — the official OpenAI Node SDK (npm `openai`, pinned in tests/ort) against
// `pagedhybrid serve`: completions and chat, streaming and non-streaming, usage, stop strings,
// the SDK's typed errors for a 400 and a 401. tests/test_serve_node.c starts the server (with
// --api-key) and runs this:
//
//   PH_NODE_DIR=build/ort node tests/test_serve_sdk.mjs URL API_KEY
//
// Prints one line per check and exits 1 when any failed.
import { createRequire } from 'node:module';
import * as path from 'node:path';

const [url, apiKey] = process.argv.slice(2);
const nodeDir = path.resolve(process.env.PH_NODE_DIR || 'build/ort');
const OpenAI = createRequire(path.join(nodeDir, 'package.json'))('openai').default;

let failed = 0;
function check(ok, what, detail) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}${ok || detail === undefined ? '' : ': ' + detail}`);
  if (!ok) failed++;
}

const client = new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 60000 });
const greedy = { temperature: 0, max_tokens: 24, ignore_eos: true };

async function completions() {
  const r = await client.completions.create({ model: 'tiny', prompt: 'Hello, world', ...greedy });
  check(r.object === 'text_completion', 'completion object', r.object);
  check(r.choices.length === 1 && typeof r.choices[0].text === 'string', 'completion text');
  check(r.choices[0].finish_reason === 'length', 'completion finish_reason', r.choices[0].finish_reason);
  check(r.usage.completion_tokens === 24 && r.usage.prompt_tokens > 0 &&
            r.usage.total_tokens === r.usage.prompt_tokens + 24,
        'completion usage', JSON.stringify(r.usage));

  const stream = await client.completions.create({
    model: 'tiny', prompt: 'Hello, world', ...greedy, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text += ch.text;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  check(text === r.choices[0].text, 'completion stream text equals non-streaming',
        JSON.stringify([text, r.choices[0].text]));
  check(finish === 'length', 'completion stream finish_reason', finish);
  check(usage && usage.completion_tokens === 24, 'completion stream usage', JSON.stringify(usage));
  check(chunks >= 2, 'completion stream has chunks', chunks);

  // a stop string taken from the middle of the greedy text cuts the output before it
  // (the random model's text is random bytes: two printable ASCII characters, from the middle on)
  const full = r.choices[0].text;
  let from = -1;
  for (let i = 0; i + 1 < full.length && from < 0; i++) {
    const k = (Math.floor(full.length / 2) + i) % (full.length - 1);
    if (/^[\x20-\x7e]{2}$/.test(full.slice(k, k + 2))) from = k;
  }
  check(from >= 0, 'the text has two printable characters for a stop string', JSON.stringify(full));
  if (from >= 0) {
    const stop = full.slice(from, from + 2);
    const s = await client.completions.create({ model: 'tiny', prompt: 'Hello, world', ...greedy, stop });
    check(s.choices[0].text === full.slice(0, full.indexOf(stop)) && s.choices[0].finish_reason === 'stop',
          'stop string', JSON.stringify([s.choices[0].text, stop, full]));
  }
}

async function chat() {
  const messages = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Say hi.' },
  ];
  const r = await client.chat.completions.create({ model: 'tiny', messages, ...greedy });
  check(r.object === 'chat.completion', 'chat object', r.object);
  const m = r.choices[0].message;
  check(m.role === 'assistant' && typeof m.content === 'string', 'chat message', JSON.stringify(m));
  check(r.choices[0].finish_reason === 'length', 'chat finish_reason', r.choices[0].finish_reason);
  check(r.usage.completion_tokens === 24, 'chat usage', JSON.stringify(r.usage));

  const stream = await client.chat.completions.create({
    model: 'tiny', messages, ...greedy, stream: true, stream_options: { include_usage: true },
  });
  let text = '', role = null, finish = null, usage = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta.role) role = ch.delta.role;
      if (ch.delta.content) text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  check(role === 'assistant', 'chat stream role', role);
  check(text === m.content, 'chat stream text equals non-streaming', JSON.stringify([text, m.content]));
  check(finish === 'length', 'chat stream finish_reason', finish);
  check(usage && usage.completion_tokens === 24, 'chat stream usage', JSON.stringify(usage));

  // the SDK's stream helper, which assembles the message itself
  const runner = client.chat.completions.stream({ model: 'tiny', messages, ...greedy });
  const final = await runner.finalChatCompletion();
  check(final.choices[0].message.content === m.content, 'chat .stream() helper', final.choices[0].message.content);
}

async function errors() {
  try {
    await client.completions.create({ model: 'tiny', prompt: 'x', n: 2 });
    check(false, 'n = 2 is refused');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.status === 400, 'n = 2: BadRequestError 400', `${e.constructor.name} ${e.status}`);
    check(e.error && e.error.param === 'n', 'n = 2: error.param', JSON.stringify(e.error));
  }
  const wrong = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'not-the-key', maxRetries: 0 });
  try {
    await wrong.models.list();
    check(false, 'a wrong API key is refused');
  } catch (e) {
    check(e instanceof OpenAI.AuthenticationError && e.status === 401, 'wrong key: AuthenticationError 401', `${e.constructor.name} ${e.status}`);
  }
  const models = await client.models.list();
  const ids = [];
  for await (const m of models) ids.push(m.id);
  check(ids.length === 1 && ids[0] === 'tiny', 'models.list', JSON.stringify(ids));
}

try {
  await completions();
  await chat();
  await errors();
} catch (e) {
  check(false, 'no exception', e && e.stack ? e.stack : String(e));
}
console.log(failed ? `test_serve_sdk: ${failed} failed` : 'test_serve_sdk: all passed');
process.exit(failed ? 1 : 0);
