// serve_structured.mjs - structured output through the official clients' own helpers, on the
// filler-weight test model at temperature 1, over many seeds: openai's chat.completions.parse
// with zodResponseFormat and responses.parse with zodTextFormat (the parsed object is what zod
// accepts), strict function tools with a forced call on chat completions (zodFunction: the
// client parses the arguments) and on responses (zodResponsesFunction), and @anthropic-ai/sdk
// with a forced tool (the tool_use input is what zod accepts). The weights know nothing of JSON,
// so every valid reply is the grammar's doing; the schemas bound every string, array and number
// so that a reply ends by itself. One call per forced reply (parallel calls off): filler weights
// would write call after call up to the block's bound.
// Usage: node tests/serve_structured.mjs BASE_URL EXPECTED_FILE MAX_TOKENS (see client_lib.mjs).
// Prints "N passed, N failed".
import { base, check, finish, load, maxTokens, step } from "./client_lib.mjs";

const OpenAI = load("openai");
const Anthropic = load("@anthropic-ai/sdk");
const z = load("zod"); // its default export is z
const { zodResponseFormat, zodTextFormat, zodFunction, zodResponsesFunction } = load("openai/helpers/zod");
const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0, timeout: 120000 });
const anthropic = new Anthropic({ baseURL: base, apiKey: "unused", maxRetries: 0, timeout: 120000 });
const SEEDS = Number(process.env.DSV41_TEST_SEEDS || 6); // fewer under make sanitize

const Answer = z.object({
    name: z.enum(["alpha", "beta", "gamma"]),
    count: z.number().int().min(0).max(99),
    ok: z.boolean(),
    tags: z.array(z.enum(["x", "y"])).max(3),
    note: z.string().max(8),
    size: z.union([z.literal("S"), z.literal("M")]),
    extra: z.number().int().min(-5).max(5).nullable(),
});
const messages = [{ role: "user", content: "Describe a thing as JSON." }];
const common = { model: "m", temperature: 1, max_tokens: maxTokens };

/* One check per seed that the object a client gave back is one zod accepts. */
function valid(what, seed, value) {
    const r = Answer.safeParse(value);
    check(r.success, `${what}, seed ${seed}: ${JSON.stringify(value)} ${r.success ? "" : r.error.message}`);
}

for (let seed = 0; seed < SEEDS; seed++) {
    await step(`chat.completions.parse, seed ${seed}`, async () => {
        const r = await openai.chat.completions.parse({ ...common, seed, messages, response_format: zodResponseFormat(Answer, "answer") });
        check(r.choices[0].finish_reason === "stop", `finish_reason ${r.choices[0].finish_reason}`);
        valid("chat.completions.parse", seed, r.choices[0].message.parsed);
    });
    await step(`responses.parse, seed ${seed}`, async () => {
        const r = await openai.responses.parse({ model: "m", temperature: 1, max_output_tokens: maxTokens, seed, input: messages,
                                                 text: { format: zodTextFormat(Answer, "answer") } });
        check(r.status === "completed", `status ${r.status}`);
        valid("responses.parse", seed, r.output_parsed);
    });
    await step(`strict function, forced (chat), seed ${seed}`, async () => {
        const r = await openai.chat.completions.parse({ ...common, seed, messages, tools: [zodFunction({ name: "describe", parameters: Answer })],
                                                        tool_choice: "required", parallel_tool_calls: false });
        const calls = r.choices[0].message.tool_calls ?? [];
        check(r.choices[0].finish_reason === "tool_calls" && calls.length === 1, `finish ${r.choices[0].finish_reason}, ${calls.length} calls`);
        for (const c of calls) valid("strict function (chat)", seed, c.function.parsed_arguments);
    });
    await step(`strict function, forced (responses), seed ${seed}`, async () => {
        const r = await openai.responses.parse({ model: "m", temperature: 1, max_output_tokens: maxTokens, seed, input: messages,
                                                 tools: [zodResponsesFunction({ name: "describe", parameters: Answer })],
                                                 tool_choice: { type: "function", name: "describe" }, parallel_tool_calls: false });
        const calls = r.output.filter((i) => i.type === "function_call");
        check(r.status === "completed" && calls.length === 1, `status ${r.status}, ${calls.length} calls (parallel_tool_calls false)`);
        for (const c of calls) valid("strict function (responses)", seed, c.parsed_arguments);
    });
    await step(`anthropic forced tool, seed ${seed}`, async () => {
        const r = await anthropic.messages.create({
            ...common, seed, messages,
            tools: [{ name: "describe", description: "Describe a thing", input_schema: zodResponseFormat(Answer, "a").json_schema.schema }],
            tool_choice: { type: "tool", name: "describe", disable_parallel_tool_use: true },
        });
        const uses = r.content.filter((b) => b.type === "tool_use");
        check(r.stop_reason === "tool_use" && uses.length === 1 && uses.every((u) => u.name === "describe"),
              `stop_reason ${r.stop_reason}, ${JSON.stringify(r.content)}`);
        for (const u of uses) valid("anthropic forced tool", seed, u.input);
    });
}

finish();
