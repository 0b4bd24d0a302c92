// kvserve's OpenAI-compatible HTTP API as the official `openai` client for
// Node sees it: a client nobody on this project wrote, so the checks below
// are about the wire shapes real applications depend on, not about ours.
//
//   node openai_checks.mjs http://127.0.0.1:PORT
//
// Prints one line per check, "PASS name detail" or "FAIL name detail", then
// "N passed, N failed"; exits 1 when any check failed (2 on bad usage).
// Greedy (temperature 0) throughout, so equal requests give equal text.
import OpenAI from 'openai';
import { VERSION } from 'openai/version';

const root = process.argv[2];
if (!root || !/^http:\/\/[^/]+$/.test(root)) {
  console.error('usage: node openai_checks.mjs http://HOST:PORT');
  process.exit(2);
}
const baseURL = `${root}/v1`;
// No retries: a retried 5xx would hide the first answer. A generous timeout
// per request: one core may be shared with another test's server.
const clientOptions = { baseURL, apiKey: 'x', maxRetries: 0, timeout: 120000 };
const client = new OpenAI(clientOptions);
const kMaxTokens = 8;
const kHello = [{ role: 'user', content: 'Say hello.' }];

let passed = 0;
let failed = 0;

function report(ok, name, detail) {
  if (ok) ++passed;
  else ++failed;
  console.log(`${ok ? 'PASS' : 'FAIL'} ${name} ${detail}`);
}

// Runs one check: `body` returns the detail of a pass or throws; a thrown
// APIError shows the server's status and body.
async function check(name, body) {
  try {
    report(true, name, (await body()) ?? '');
  } catch (e) {
    report(false, name, describe(e));
  }
}

function describe(e) {
  if (e instanceof OpenAI.APIError) {
    return `${e.constructor.name} status=${e.status} error=${JSON.stringify(e.error)}`;
  }
  return e instanceof Error ? e.message : String(e);
}

function expect(condition, what) {
  if (!condition) throw new Error(what);
}

function show(value) {
  return JSON.stringify(value);
}

// prompt + completion = total, completion within the budget.
function expectUsage(usage, maxTokens) {
  expect(usage && typeof usage === 'object', `no usage: ${show(usage)}`);
  const { prompt_tokens: p, completion_tokens: c, total_tokens: t } = usage;
  expect(Number.isInteger(p) && p > 0, `prompt_tokens ${p}`);
  expect(Number.isInteger(c) && c > 0 && c <= maxTokens,
         `completion_tokens ${c} (max_tokens ${maxTokens})`);
  expect(t === p + c, `total_tokens ${t} != ${p} + ${c}`);
}

// The single choice of a non-streaming chat completion.
function onlyMessage(completion) {
  expect(completion.object === 'chat.completion',
         `object ${show(completion.object)}`);
  expect(Array.isArray(completion.choices) && completion.choices.length === 1,
         `choices ${show(completion.choices)}`);
  const choice = completion.choices[0];
  expect(choice.index === 0, `index ${choice.index}`);
  expect(choice.message?.role === 'assistant',
         `role ${show(choice.message?.role)}`);
  expect(typeof choice.message.content === 'string',
         `content ${show(choice.message.content)}`);
  return choice;
}

async function greedyChat(messages, extra = {}, requestOptions = undefined) {
  return client.chat.completions.create(
      { model, messages, max_tokens: kMaxTokens, temperature: 0, ...extra },
      requestOptions);
}

// The APIError a request must fail with.
async function expectApiError(status, request) {
  let result;
  try {
    result = await request();
  } catch (e) {
    expect(e instanceof OpenAI.APIError, `not an APIError: ${describe(e)}`);
    expect(e.status === status, `status ${e.status}, want ${status}: ${describe(e)}`);
    expect(typeof e.error?.message === 'string' && e.error.message.length > 0,
           `no error.message: ${show(e.error)}`);
    return `${e.constructor.name} ${status} ${show(e.error.message)}`;
  }
  throw new Error(`succeeded, want ${status}: ${show(result)}`);
}

// --- the served model ---------------------------------------------------

let model;
await check('models.list', async () => {
  const ids = [];
  for await (const m of client.models.list()) {
    expect(m.object === 'model', `object ${show(m.object)}`);
    ids.push(m.id);
  }
  expect(ids.length > 0 && typeof ids[0] === 'string', `ids ${show(ids)}`);
  model = ids[0];
  return `openai@${VERSION} models ${show(ids)}`;
});
if (model === undefined) {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(1);
}

// --- 1. non-streaming chat ---------------------------------------------

let greedy;  // the greedy content for kHello
await check('chat.nonstreaming', async () => {
  const completion = await greedyChat(kHello);
  const choice = onlyMessage(completion);
  expect(choice.finish_reason === 'length',
         `finish_reason ${show(choice.finish_reason)}`);
  expectUsage(completion.usage, kMaxTokens);
  expect(completion.usage.completion_tokens === kMaxTokens,
         `completion_tokens ${completion.usage.completion_tokens} at "length"`);
  expect(completion.model === model, `model ${show(completion.model)}`);
  expect(typeof completion.id === 'string' && completion.id.length > 0,
         `id ${show(completion.id)}`);
  greedy = choice.message.content;
  return `content=${show(greedy)} usage=${show(completion.usage)}`;
});

// Greedy is deterministic: the same request gives the same content again.
await check('chat.greedy_repeatable', async () => {
  const again = onlyMessage(await greedyChat(kHello)).message.content;
  expect(again === greedy, `${show(again)} != ${show(greedy)}`);
  return show(again);
});

// --- 2. streaming chat -------------------------------------------------

await check('chat.streaming', async () => {
  const stream = await greedyChat(
      kHello, { stream: true, stream_options: { include_usage: true } });
  let content = '';
  let chunks = 0;
  let lastWithChoices;
  let usageChunk;
  let role;
  for await (const chunk of stream) {
    ++chunks;
    expect(chunk.object === 'chat.completion.chunk',
           `chunk object ${show(chunk.object)}`);
    expect(usageChunk === undefined, `a chunk after the usage chunk: ${show(chunk)}`);
    if (chunk.choices.length > 0) {
      const delta = chunk.choices[0].delta ?? {};
      if (delta.role !== undefined) role = role ?? delta.role;
      if (typeof delta.content === 'string') content += delta.content;
      lastWithChoices = chunk;
    }
    if (chunk.usage) usageChunk = chunk;
  }
  expect(role === 'assistant', `delta role ${show(role)}`);
  expect(content === greedy,
         `streamed ${show(content)} != non-streaming ${show(greedy)}`);
  const finish = lastWithChoices?.choices[0].finish_reason;
  expect(finish === 'length', `last choice finish_reason ${show(finish)}`);
  expect(usageChunk !== undefined, 'no usage chunk');
  expect(usageChunk.choices.length === 0,
         `usage chunk has choices ${show(usageChunk.choices)}`);
  expectUsage(usageChunk.usage, kMaxTokens);
  return `${chunks} chunks content=${show(content)} usage=${show(usageChunk.usage)}`;
});

// --- 3. stop -----------------------------------------------------------

await check('chat.stop', async () => {
  expect(typeof greedy === 'string' && greedy.length >= 4,
         `greedy content too short for a stop string: ${show(greedy)}`);
  // Two printable ASCII characters from the 3rd on (the random model's
  // bytes may not all be text), else the 3rd..4th as they are.
  let at = 2;
  while (at + 2 <= greedy.length && !/^[\x20-\x7e]{2}$/.test(greedy.slice(at, at + 2))) {
    ++at;
  }
  if (at + 2 > greedy.length) at = 2;
  const stop = greedy.slice(at, at + 2);
  const want = greedy.slice(0, greedy.indexOf(stop));
  const choice = onlyMessage(await greedyChat(kHello, { stop: [stop] }));
  expect(choice.finish_reason === 'stop',
         `finish_reason ${show(choice.finish_reason)} (stop ${show(stop)})`);
  expect(choice.message.content === want,
         `content ${show(choice.message.content)}, want ${show(want)} (stop ${show(stop)})`);
  return `stop=${show(stop)} content=${show(want)}`;
});

// --- 4. errors ---------------------------------------------------------

await check('error.unknown_model', async () =>
  expectApiError(404, () => client.chat.completions.create(
      { model: 'no-such-model', messages: kHello, max_tokens: kMaxTokens })));

// A stream that cannot start fails as a plain HTTP error, before any event.
await check('error.unknown_model_streaming', async () =>
  expectApiError(404, () => client.chat.completions.create(
      { model: 'no-such-model', messages: kHello, max_tokens: kMaxTokens,
        stream: true })));

await check('error.bad_temperature', async () =>
  expectApiError(400, () => greedyChat(kHello, { temperature: 'hot' })));

await check('error.no_messages', async () =>
  expectApiError(400, () => client.chat.completions.create(
      { model, max_tokens: kMaxTokens })));

// --- 5. sessions -------------------------------------------------------

// Long enough that the first turn fills whole KV blocks of the prefix cache.
const kUser1 = 'Tell me a story about a lighthouse keeper who finds a ' +
    'message in a bottle, and what the message says, and what the keeper ' +
    'does next, in the voice of an old sailor.';
const kUser2 = 'And then?';

await check('sessions', async () => {
  const created = await fetch(`${root}/sessions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  const createdText = await created.text();
  expect(created.ok, `POST /sessions: ${created.status} ${createdText}`);
  const id = JSON.parse(createdText).id;
  expect(typeof id === 'string' && id.length > 0, `POST /sessions: ${createdText}`);
  const notes = [];
  try {
    // Turn 1 through a client whose every request names the session ...
    const sessionClient = new OpenAI({
      ...clientOptions, defaultHeaders: { 'x-session-id': id },
    });
    const turn1 = await sessionClient.chat.completions.create({
      model, messages: [{ role: 'user', content: kUser1 }],
      max_tokens: kMaxTokens, temperature: 0,
    });
    const reply1 = onlyMessage(turn1).message.content;
    expectUsage(turn1.usage, kMaxTokens);
    // ... turn 2 with a per-request header and only the new message.
    const turn2 = await greedyChat([{ role: 'user', content: kUser2 }], {},
                                   { headers: { 'x-session-id': id } });
    const reply2 = onlyMessage(turn2).message.content;
    expectUsage(turn2.usage, kMaxTokens);
    notes.push(`reply1=${show(reply1)} session_turn2=${show(reply2)}`,
               `session_turn2_usage=${show(turn2.usage)}`);

    // The stateless client sends the whole conversation.
    const stateless1 = onlyMessage(
        await greedyChat([{ role: 'user', content: kUser1 }])).message.content;
    expect(stateless1 === reply1,
           `stateless turn 1 ${show(stateless1)} != session ${show(reply1)}`);
    const stateless2 = await greedyChat([
      { role: 'user', content: kUser1 },
      { role: 'assistant', content: reply1 },
      { role: 'user', content: kUser2 },
    ]);
    const statelessReply2 = onlyMessage(stateless2).message.content;
    expect(statelessReply2 === reply2,
           `stateless turn 2 ${show(statelessReply2)} != session ${show(reply2)}`);
    const cached = stateless2.usage?.prompt_tokens_details?.cached_tokens;
    expect(Number.isInteger(cached) && cached > 0,
           `stateless turn 2 cached_tokens ${show(cached)}: ${show(stateless2.usage)}`);
    notes.push(`stateless_turn2_usage=${show(stateless2.usage)}`);
  } finally {
    const deleted = await fetch(`${root}/sessions/${encodeURIComponent(id)}`,
                                { method: 'DELETE' });
    const deletedText = await deleted.text();
    expect(deleted.ok, `DELETE /sessions/${id}: ${deleted.status} ${deletedText}`);
  }
  // A deleted session is gone: naming it again is an error, not a fresh one.
  const afterDelete = await expectApiError(404, () => greedyChat(
      [{ role: 'user', content: kUser2 }], {}, { headers: { 'x-session-id': id } }));
  notes.push(`after_delete=${afterDelete}`);
  return notes.join(' ');
});

// --- 6. completions ----------------------------------------------------

await check('completions', async () => {
  const completion = await client.completions.create(
      { model, prompt: 'Once upon a time', max_tokens: kMaxTokens, temperature: 0 });
  expect(completion.object === 'text_completion', `object ${show(completion.object)}`);
  expect(completion.choices?.length === 1, `choices ${show(completion.choices)}`);
  const choice = completion.choices[0];
  expect(typeof choice.text === 'string', `text ${show(choice.text)}`);
  expect(choice.finish_reason === 'length', `finish_reason ${show(choice.finish_reason)}`);
  expectUsage(completion.usage, kMaxTokens);
  return `text=${show(choice.text)} usage=${show(completion.usage)}`;
});

await check('completions.streaming', async () => {
  const want = (await client.completions.create(
      { model, prompt: 'Once upon a time', max_tokens: kMaxTokens, temperature: 0 }))
      .choices[0].text;
  const stream = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: kMaxTokens, temperature: 0,
    stream: true,
  });
  let text = '';
  let finish;
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      text += choice.text ?? '';
      finish = choice.finish_reason ?? finish;
    }
  }
  expect(text === want, `streamed ${show(text)} != ${show(want)}`);
  expect(finish === 'length', `finish_reason ${show(finish)}`);
  return `text=${show(text)}`;
});

// --- 6. several choices (n) and several prompts ------------------------

// n choices at a seed: one per index, reproducible, the streamed texts the
// same; usage counts the prompt once and every choice's tokens.
await check('chat.n_choices', async () => {
  const body = { model, messages: kHello, max_tokens: kMaxTokens,
                 temperature: 1.0, seed: 11, n: 3 };
  const completion = await client.chat.completions.create(body);
  expect(completion.choices.length === 3, `choices ${show(completion.choices)}`);
  const texts = completion.choices.map((c, i) => {
    expect(c.index === i, `choice ${i} has index ${c.index}`);
    expect(typeof c.message?.content === 'string', `content ${show(c.message)}`);
    return c.message.content;
  });
  const single = await client.chat.completions.create({ ...body, n: 1 });
  expect(completion.usage.prompt_tokens === single.usage.prompt_tokens,
         `prompt_tokens ${completion.usage.prompt_tokens} != n=1's ${single.usage.prompt_tokens}`);
  expect(completion.usage.completion_tokens === 3 * kMaxTokens,
         `completion_tokens ${completion.usage.completion_tokens}`);
  expect(single.choices[0].message.content === texts[0],
         `choice 0 ${show(texts[0])} != n=1 ${show(single.choices[0].message.content)}`);
  const streamed = ['', '', ''];
  const stream = await client.chat.completions.create({ ...body, stream: true });
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      streamed[c.index] += c.delta?.content ?? '';
    }
  }
  expect(show(streamed) === show(texts),
         `streamed ${show(streamed)} != ${show(texts)}`);
  return show(texts);
});

await check('completions.prompt_list', async () => {
  const prompts = ['Once upon a time', 'The cat'];
  const both = await client.completions.create(
      { model, prompt: prompts, max_tokens: 4, temperature: 0, n: 2 });
  expect(both.choices.length === 4, `choices ${show(both.choices)}`);
  for (let p = 0; p < prompts.length; ++p) {
    const alone = await client.completions.create(
        { model, prompt: prompts[p], max_tokens: 4, temperature: 0 });
    for (let j = 0; j < 2; ++j) {
      const c = both.choices[p * 2 + j];
      expect(c.index === p * 2 + j, `index ${c.index}`);
      expect(c.text === alone.choices[0].text,
             `choice ${c.index} ${show(c.text)} != ${show(alone.choices[0].text)}`);
    }
  }
  return show(both.choices.map((c) => c.text));
});

// --- 7. structured output ------------------------------------------------

// response_format json_object: the content parses as a JSON object unless
// max_tokens cut it ("length").
await check('chat.json_object', async () => {
  const results = [];
  for (const seed of [1, 2, 3]) {
    const completion = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'A cat, as JSON.' }],
      max_tokens: 300, temperature: 1.0, seed,
      response_format: { type: 'json_object' } });
    const choice = completion.choices[0];
    if (choice.finish_reason === 'length') continue;
    expect(choice.finish_reason === 'stop', `finish_reason ${show(choice.finish_reason)}`);
    const value = JSON.parse(choice.message.content);
    expect(value !== null && typeof value === 'object' && !Array.isArray(value),
           `not an object: ${show(choice.message.content)}`);
    results.push(choice.message.content);
  }
  expect(results.length > 0, 'every answer was cut by max_tokens');
  return show(results);
});

// response_format json_schema (strict): the content parses and has the
// schema's required fields with their types.
await check('chat.json_schema', async () => {
  const schema = {
    type: 'object',
    properties: {
      city: { type: 'string', maxLength: 16 },
      population: { type: 'integer', minimum: 0 },
      coastal: { type: 'boolean' },
    },
    required: ['city', 'population', 'coastal'],
    additionalProperties: false,
  };
  const results = [];
  for (const seed of [1, 2, 3]) {
    const completion = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'A city, as JSON.' }],
      max_tokens: 200, temperature: 1.0, seed,
      response_format: { type: 'json_schema',
                         json_schema: { name: 'city', strict: true, schema } } });
    const choice = completion.choices[0];
    if (choice.finish_reason === 'length') continue;
    const value = JSON.parse(choice.message.content);
    // maxLength counts code points, as JSON Schema does (not UTF-16 units).
    expect(typeof value.city === 'string' && [...value.city].length <= 16,
           `city ${show(value.city)}`);
    expect(Number.isInteger(value.population) && value.population >= 0,
           `population ${show(value.population)}`);
    expect(typeof value.coastal === 'boolean', `coastal ${show(value.coastal)}`);
    expect(Object.keys(value).length === 3, `keys ${show(Object.keys(value))}`);
    results.push(choice.message.content);
  }
  expect(results.length > 0, 'every answer was cut by max_tokens');
  return show(results);
});

// --- tools ---------------------------------------------------------------

const weatherParameters = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 10 },
    days: { type: 'integer', minimum: 1, maximum: 7 },
  },
  required: ['city', 'days'],
  additionalProperties: false,
};
const weatherTool = {
  type: 'function',
  function: { name: 'get_weather', description: 'The weather in a city.',
              parameters: weatherParameters },
};
const kWeather = [{ role: 'user', content: 'Weather in Oslo for 3 days?' }];

// A call's arguments as get_weather's parameters have them.
function expectWeatherArguments(text) {
  const args = JSON.parse(text);
  expect(typeof args.city === 'string' && [...args.city].length <= 10,
         `city ${show(args.city)}`);
  expect(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7,
         `days ${show(args.days)}`);
  expect(Object.keys(args).length === 2, `keys ${show(Object.keys(args))}`);
  return args;
}

// tool_choice "required": even the random-weight model answers with a call
// whose arguments validate; content null, finish_reason "tool_calls".
await check('chat.tool_calls', async () => {
  const results = [];
  for (const seed of [1, 2, 3]) {
    const completion = await client.chat.completions.create({
      model, messages: kWeather, tools: [weatherTool], tool_choice: 'required',
      max_tokens: 300, temperature: 1.0, seed });
    const choice = completion.choices[0];
    if (choice.finish_reason === 'length') continue;
    expect(choice.finish_reason === 'tool_calls',
           `finish_reason ${show(choice.finish_reason)}`);
    expect(choice.message.content === null,
           `content ${show(choice.message.content)}`);
    const calls = choice.message.tool_calls ?? [];
    expect(calls.length >= 1, `no tool_calls: ${show(choice.message)}`);
    for (const call of calls) {
      expect(call.type === 'function' && /^call_/.test(call.id),
             `call ${show(call)}`);
      expect(call.function.name === 'get_weather',
             `name ${show(call.function.name)}`);
      expectWeatherArguments(call.function.arguments);
    }
    results.push(calls.map((c) => c.function.arguments));
  }
  expect(results.length > 0, 'every answer was cut by max_tokens');
  return show(results);
});

// Streamed with the client's own accumulator (ChatCompletionStream), which
// puts delta.tool_calls together by index as applications do.
await check('chat.tool_calls.streaming', async () => {
  const results = [];
  for (const seed of [1, 2, 3]) {
    const stream = client.chat.completions.stream({
      model, messages: kWeather, tools: [weatherTool],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      parallel_tool_calls: false, max_tokens: 300, temperature: 1.0, seed });
    const doneArguments = [];
    stream.on('tool_calls.function.arguments.done',
              (e) => doneArguments.push(e.arguments));
    const completion = await stream.finalChatCompletion();
    const choice = completion.choices[0];
    if (choice.finish_reason === 'length') continue;
    expect(choice.finish_reason === 'tool_calls',
           `finish_reason ${show(choice.finish_reason)}`);
    const calls = choice.message.tool_calls ?? [];
    expect(calls.length === 1, `tool_calls ${show(calls)}`);
    expect(calls[0].function.name === 'get_weather', `call ${show(calls[0])}`);
    expectWeatherArguments(calls[0].function.arguments);
    expect(doneArguments.length === 1 &&
           doneArguments[0] === calls[0].function.arguments,
           `arguments.done events ${show(doneArguments)}`);
    results.push(calls[0].function.arguments);
  }
  expect(results.length > 0, 'every answer was cut by max_tokens');
  return show(results);
});

// The client's agent loop (runTools): it calls our function with the
// parsed arguments and sends the result back in a tool message.
await check('chat.run_tools', async () => {
  const called = [];
  const runner = client.chat.completions.runTools({
    model, messages: kWeather, max_tokens: 1000, temperature: 1.0, seed: 4,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
    tools: [{
      type: 'function',
      function: {
        name: 'get_weather', parameters: weatherParameters,
        parse: JSON.parse,
        function: (args) => {
          called.push(args);
          return { forecast: 'sunny' };
        },
      },
    }],
  });
  await runner.done();
  expect(called.length === 1, `function called ${called.length} times`);
  expectWeatherArguments(JSON.stringify(called[0]));
  const tool = runner.messages.find((m) => m.role === 'tool');
  expect(tool !== undefined && tool.content.includes('sunny'),
         `messages ${show(runner.messages)}`);
  return show(called[0]);
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
