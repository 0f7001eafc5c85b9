// serve_anthropic.mjs - `dsv41 serve`'s /v1/messages driven by the official `@anthropic-ai/sdk`
// npm package, as Anthropic-API clients use it: a greedy reply, the same reply streamed (its
// event sequence checked), token counting, a tool-use round trip whose prompt is the one the
// chat completions route renders for the same conversation, and a bad request.
// Usage: node tests/serve_anthropic.mjs BASE_URL EXPECTED_FILE MAX_TOKENS (see client_lib.mjs).
// Prints "N passed, N failed".
import { base, check, expected, finish, load, maxTokens, step } from "./client_lib.mjs";

const Anthropic = load("@anthropic-ai/sdk");
const client = new Anthropic({ baseURL: base, apiKey: "unused", maxRetries: 0 });
const question = [{ role: "user", content: "Hello there" }];

await step("greedy message", async () => {
    const r = await client.messages.create({ model: "m", max_tokens: maxTokens, messages: question, temperature: 0 });
    const text = r.content.filter((b) => b.type === "text").map((b) => b.text).join("");
    check(text === expected, `greedy reply ${JSON.stringify(text)} != run -p ${JSON.stringify(expected)}`);
    check(r.type === "message" && r.role === "assistant" && r.stop_reason === "max_tokens" && r.id.startsWith("msg_"),
          `type, role, stop_reason, id: ${JSON.stringify(r)}`);
    const u = r.usage;
    check(u.output_tokens === maxTokens && u.input_tokens + u.cache_read_input_tokens > 0, `usage ${JSON.stringify(u)}`);
});

await step("streamed message", async () => {
    const stream = client.messages.stream({ model: "m", max_tokens: maxTokens, messages: question, temperature: 0 });
    const types = [];
    let text = "";
    for await (const e of stream) {
        types.push(e.type);
        if (e.type === "content_block_delta" && e.delta.type === "text_delta") text += e.delta.text;
    }
    const final = await stream.finalMessage();
    check(text === expected && final.content[0].text === expected, `streamed text ${JSON.stringify(text)} != ${JSON.stringify(expected)}`);
    const order = types.filter((t) => t !== "ping" && t !== "content_block_delta");
    check(JSON.stringify(order) === JSON.stringify(["message_start", "content_block_start", "content_block_stop", "message_delta", "message_stop"]),
          `event order ${JSON.stringify(types)}`);
    check(types.filter((t) => t === "content_block_delta").length >= 2, "a delta per token");
    check(final.stop_reason === "max_tokens" && final.usage.output_tokens === maxTokens, `final ${JSON.stringify(final)}`);
    // the same request again: the prompt comes from a slot's cache, and usage says so
    check(final.usage.cache_read_input_tokens > 0, `cached input tokens ${JSON.stringify(final.usage)}`);
});

await step("stop sequence", async () => {
    const cut = expected.slice(4, 8);
    const r = await client.messages.create({ model: "m", max_tokens: maxTokens, messages: question, temperature: 0, stop_sequences: [cut] });
    check(r.stop_reason === "stop_sequence" && r.stop_sequence === cut && r.content[0].text === expected.slice(0, expected.indexOf(cut)),
          `stop_sequence ${JSON.stringify(cut)}: ${JSON.stringify(r)}`);
});

const tools = [{
    name: "get_weather", description: "Get the weather for a city",
    input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
}];

await step("tool-use round trip", async () => {
    const messages = [{ role: "user", content: "What's the weather in Paris?" }];
    const first = await client.messages.create({ model: "m", max_tokens: 8, messages, tools, tool_choice: { type: "auto" }, temperature: 0 });
    check(["end_turn", "max_tokens", "tool_use"].includes(first.stop_reason), `a reply to a request with tools: ${JSON.stringify(first)}`);
    messages.push({ role: "assistant", content: [{ type: "text", text: "Let me look." },
        { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] });
    messages.push({ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: JSON.stringify({ temperature: 21 }) }] });
    const second = await client.messages.create({ model: "m", max_tokens: 8, messages, tools, temperature: 0 });
    const input = (u) => u.input_tokens + u.cache_read_input_tokens;
    check(second.content.length > 0 && input(second.usage) > input(first.usage), "the tool result goes back and gets an answer");
    // the prompt is the one chat completions renders for the same conversation
    const counted = await client.messages.countTokens({ model: "m", messages, tools });
    const openai = await (await fetch(base + "/v1/chat/completions", { method: "POST", body: JSON.stringify({
        max_tokens: 1, temperature: 0,
        messages: [messages[0], { role: "assistant", content: "Let me look.", tool_calls: [{ id: "toolu_1", type: "function",
            function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) } }] },
            { role: "tool", tool_call_id: "toolu_1", content: JSON.stringify({ temperature: 21 }) }],
        tools: tools.map((t) => ({ type: "function", function: { name: t.name, description: t.description, parameters: t.input_schema } })),
    }) })).json();
    check(counted.input_tokens === input(second.usage) && counted.input_tokens === openai.usage.prompt_tokens,
          `count_tokens ${counted.input_tokens}, the reply's input ${input(second.usage)}, chat completions' ${openai.usage?.prompt_tokens}`);
});

await step("a bad request", async () => {
    try {
        await client.messages.create({ model: "m", max_tokens: 8, messages: [{ role: "narrator", content: "x" }] });
        check(false, "a bad role was accepted");
    } catch (e) {
        check(e.status === 400 && e.error?.type === "error" && e.error?.error?.type === "invalid_request_error" &&
              /role/.test(e.error?.error?.message), `error ${e} ${JSON.stringify(e.error)}`);
    }
});

finish();
