// serve_client.mjs - `dsv41 serve` driven by the official `openai` npm package, as applications
// use it: a greedy chat, the same chat streamed with usage, a tool-call round trip, and an error;
// then the same through its `responses` methods (whole, streamed with the typed events, a
// function-call round trip, and the stored-response features refused).
// Usage: node tests/serve_client.mjs BASE_URL EXPECTED_FILE MAX_TOKENS (see client_lib.mjs).
// Prints "N passed, N failed".
import { base, check, expected, finish, load, maxTokens, step } from "./client_lib.mjs";

const OpenAI = load("openai");
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0 });
const question = [{ role: "user", content: "Hello there" }];

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

// the Responses API through the client's `responses` methods
await step("response", async () => {
    const r = await client.responses.create({ model: "m", input: "Hello there", temperature: 0, max_output_tokens: maxTokens });
    check(r.output_text === expected, `response text ${JSON.stringify(r.output_text)} != run -p ${JSON.stringify(expected)}`);
    check(r.object === "response" && r.status === "incomplete" && r.incomplete_details?.reason === "max_output_tokens" &&
          r.usage.output_tokens === maxTokens && r.usage.total_tokens === r.usage.input_tokens + maxTokens, `response ${JSON.stringify(r)}`);
});

await step("streamed response", async () => {
    const stream = client.responses.stream({ model: "m", input: [{ role: "user", content: "Hello there" }], temperature: 0,
                                             max_output_tokens: maxTokens });
    const types = [];
    let text = "";
    for await (const e of stream) {
        types.push(e.type);
        if (e.type === "response.output_text.delta") text += e.delta;
    }
    const final = await stream.finalResponse();
    check(text === expected && final.output_text === expected, `streamed response ${JSON.stringify(text)} != ${JSON.stringify(expected)}`);
    const order = types.filter((t) => t !== "response.output_text.delta");
    check(JSON.stringify(order) === JSON.stringify(["response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.incomplete"]), `event order ${JSON.stringify(types)}`);
    check(types.filter((t) => t === "response.output_text.delta").length >= 2, "a delta per token");
});

await step("response tool round trip", async () => {
    const tools = [{ type: "function", name: "get_weather", description: "Get the weather for a city",
                     parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
    const input = [{ role: "user", content: "What's the weather in Paris?" }];
    const first = await client.responses.create({ model: "m", input, tools, max_output_tokens: 8, temperature: 0 });
    check(first.output.length > 0, "a response to a request with tools");
    input.push({ type: "function_call", call_id: "call_1", name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) });
    input.push({ type: "function_call_output", call_id: "call_1", output: JSON.stringify({ temperature: 21, sky: "clear" }) });
    const second = await client.responses.create({ model: "m", input, tools, max_output_tokens: 8, temperature: 0 });
    // the prompt is the one chat completions renders for the same conversation
    const chat = await client.chat.completions.create({ model: "m", max_tokens: 1, temperature: 0, messages: [input[0],
        { role: "assistant", content: "", tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: input[1].arguments } }] },
        { role: "tool", tool_call_id: "call_1", content: input[2].output }],
        tools: tools.map((t) => ({ type: "function", function: { name: t.name, description: t.description, parameters: t.parameters } })) });
    check(second.usage.input_tokens === chat.usage.prompt_tokens && second.usage.input_tokens > first.usage.input_tokens,
          `tool round trip input ${second.usage.input_tokens}, chat completions' ${chat.usage.prompt_tokens}, first ${first.usage.input_tokens}`);
});

await step("stored responses are refused", async () => {
    for (const [what, call, status] of [
        ["previous_response_id", () => client.responses.create({ model: "m", input: "x", previous_response_id: "resp_1" }), 400],
        ["background", () => client.responses.create({ model: "m", input: "x", background: true }), 400],
        ["retrieve", () => client.responses.retrieve("resp_1"), 404],
    ]) {
        try {
            await call();
            check(false, `${what} was accepted`);
        } catch (e) {
            check(e.status === status && /stored/.test(e.error?.message ?? e.message), `${what}: ${e}`);
        }
    }
});

finish();
