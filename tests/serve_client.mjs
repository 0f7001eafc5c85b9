// serve_client.mjs - `dsv41 serve` driven by the official `openai` npm package, as applications
// use it: a greedy chat, the same chat streamed with usage, a tool-call round trip, and an error.
// Usage: node tests/serve_client.mjs BASE_URL EXPECTED_FILE MAX_TOKENS, where EXPECTED_FILE
// holds the greedy reply `dsv41 run -p` gives to the user message below.
// Prints "N passed, N failed".
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(new URL("./node/", import.meta.url));
const OpenAI = require("openai").default ?? require("openai");

const [base, expectedFile, maxTokensArg] = process.argv.slice(2);
const expected = readFileSync(expectedFile, "utf8");
const maxTokens = Number(maxTokensArg);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0 });
const question = [{ role: "user", content: "Hello there" }];
let passed = 0, failed = 0;

function check(ok, what) {
    if (ok) passed++;
    else { failed++; console.log("FAIL: " + what); }
}

async function step(what, fn) {
    try { await fn(); } catch (e) { check(false, `${what}: ${e}`); }
}

await step("greedy chat", async () => {
    const r = await client.chat.completions.create({ model: "m", messages: question, temperature: 0, max_tokens: maxTokens });
    const u = r.usage;
    check(r.choices[0].message.content === expected, `greedy reply ${JSON.stringify(r.choices[0].message.content)} != run -p ${JSON.stringify(expected)}`);
    check(r.object === "chat.completion" && r.choices[0].finish_reason === "length", "object and finish_reason");
    check(u.completion_tokens === maxTokens && u.prompt_tokens > 0 && u.total_tokens === u.prompt_tokens + u.completion_tokens &&
          u.prompt_tokens_details.cached_tokens === 0, `usage ${JSON.stringify(u)}`);
});

await step("streamed chat", async () => {
    const stream = await client.chat.completions.create({
        model: "m", messages: question, temperature: 0, max_tokens: maxTokens, stream: true, stream_options: { include_usage: true },
    });
    let text = "", finish = null, usage = null, chunks = 0;
    for await (const c of stream) {
        chunks++;
        if (c.usage) usage = c.usage;
        for (const ch of c.choices) {
            text += ch.delta?.content ?? "";
            if (ch.finish_reason) finish = ch.finish_reason;
        }
    }
    check(text === expected, `streamed deltas ${JSON.stringify(text)} != ${JSON.stringify(expected)}`);
    check(finish === "length" && chunks > 2, `finish ${finish} after ${chunks} chunks`);
    check(usage && usage.completion_tokens === maxTokens, `streamed usage ${JSON.stringify(usage)}`);
});

await step("tool-call round trip", async () => {
    const tools = [{
        type: "function",
        function: {
            name: "get_weather", description: "Get the weather for a city",
            parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        },
    }];
    const messages = [{ role: "user", content: "What's the weather in Paris?" }];
    const first = await client.chat.completions.create({ model: "m", messages, tools, tool_choice: "auto", max_tokens: 8, seed: 1 });
    check(["stop", "length", "tool_calls"].includes(first.choices[0].finish_reason), "a reply to a request with tools");
    messages.push({
        role: "assistant", content: null,
        tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) } }],
    });
    messages.push({ role: "tool", tool_call_id: "call_1", content: JSON.stringify({ temperature: 21, sky: "clear" }) });
    const second = await client.chat.completions.create({ model: "m", messages, tools, max_tokens: 8, seed: 1 });
    check(typeof second.choices[0].message.content === "string" && second.usage.prompt_tokens > first.usage.prompt_tokens,
          "the tool result goes back and gets an answer");
});

await step("an error", async () => {
    try {
        await client.chat.completions.create({ model: "m", messages: question, temperature: "hot" });
        check(false, "a bad temperature was accepted");
    } catch (e) {
        check(e.status === 400 && e.error?.type === "invalid_request_error" && e.error?.param === "temperature", `error ${e}`);
    }
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
