"""serve_agents.py PORT TMP - what Claude Code and Codex send, against `dsv41 serve` on PORT.

TMP holds the prompts `dsv41 render` wrote for chat cases (serve_agents.sh): mid.txt (a system
message after the user's), sys.txt (system and user, chat mode), effort.txt (the same in thinking
mode with effort max). A request's prompt is checked by its token count against /tokenize of
the rendered text, an independent rendering of the same conversation. Exits non-zero on the
first mismatch, naming it."""
import json, sys, urllib.error, urllib.request

port, tmp = sys.argv[1], sys.argv[2]
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy


def post(path, body, headers=None):
    """(status, parsed reply) of a POST; a 4xx comes back too."""
    rq = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                {"Content-Type": "application/json", **(headers or {})})
    try:
        with direct.open(rq, timeout=120) as r:
            raw = r.read().decode("utf-8")
            status = r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read().decode("utf-8"), e.code
    return status, (json.loads(raw) if raw.startswith("{") else raw)


def tokens(name):
    text = open(f"{tmp}/{name}.txt", encoding="utf-8").read()
    return len(post("/tokenize", {"content": text})[1]["tokens"])


def expect(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


SYS = "You are a coding agent."
USER = {"role": "user", "content": "List the files."}
MID = {"role": "system", "content": [{"type": "text", "text": "<system-reminder>Be brief.</system-reminder>"}]}
base = dict(max_tokens=4, temperature=0)

# ---- Claude Code on /v1/messages
# a system message among the messages is rendered where it stands
st, r = post("/v1/messages/count_tokens", dict(system=SYS, messages=[USER, MID]))
expect(st == 200 and r["input_tokens"] == tokens("mid"), f"system inside messages: {st} {r}, want {tokens('mid')} tokens")
st, r = post("/v1/messages", dict(base, system=SYS, messages=[USER, MID]))
expect(st == 200 and r["type"] == "message", f"system inside messages: {st} {r}")

# the billing header is left out: the prompt is the one without it, and a second request whose
# header differs reads its whole prompt from the cache
def billed(cch):
    return [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.185.a1f; cch={cch};"},
            {"type": "text", "text": SYS, "cache_control": {"type": "ephemeral"}}]


st, r = post("/v1/messages/count_tokens", dict(system=billed("11111"), messages=[USER]))
expect(st == 200 and r["input_tokens"] == tokens("sys"), f"billing header: {st} {r}, want {tokens('sys')} tokens")
hdr = {"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
                         "mid-conversation-system-2026-04-07,made-up-beta-2099-01-01", "anthropic-version": "2023-06-01"}
first = post("/v1/messages", dict(base, system=billed("22222"), messages=[USER]), hdr)[1]
second = post("/v1/messages", dict(base, system=billed("33333"), messages=[USER]), hdr)[1]
n = tokens("sys")
expect(second["usage"]["cache_read_input_tokens"] == n and second["usage"]["input_tokens"] == 0,
       f"a second request differing in the billing header only: usage {second['usage']}, want all {n} tokens cached")
expect(second["content"] == first["content"], f"the same prompt gives the same greedy reply: {first} {second}")
# the next turn of the conversation reuses the first turn's prompt
turn2 = [USER, {"role": "assistant", "content": first["content"]}, {"role": "user", "content": "And the tests?"}]
r = post("/v1/messages", dict(base, system=billed("44444"), messages=turn2), hdr)[1]
expect(r["usage"]["cache_read_input_tokens"] >= n, f"a second turn with a new billing header: usage {r['usage']}, want >= {n} cached")
# OpenAI's cached_tokens says the same for a chat completions request of the same prompt
r = post("/v1/chat/completions", dict(base, messages=[{"role": "system", "content": SYS}, USER]))[1]
expect(r["usage"]["prompt_tokens_details"]["cached_tokens"] == n, f"cached_tokens {r['usage']}")

# adaptive thinking with an effort: thinking mode, the effort in the prompt; context_management
# and unknown betas are accepted
body = dict(base, system=SYS, messages=[USER], thinking={"type": "adaptive"}, output_config={"effort": "max"},
            context_management={"edits": [{"type": "clear_tool_uses_20250919"}]}, metadata={"user_id": "u"})
st, r = post("/v1/messages/count_tokens", body)
expect(st == 200 and r["input_tokens"] == tokens("effort"), f"adaptive thinking, effort max: {st} {r}, want {tokens('effort')}")
st, r = post("/v1/messages", body, hdr)
expect(st == 200 and r["content"][0]["type"] == "thinking", f"adaptive thinking: {st} {r}")
st, r = post("/v1/messages", dict(body, output_config={"effort": "xhigh"}))
expect(st == 200, f"effort xhigh: {st} {r}")
st, r = post("/v1/messages", dict(body, thinking={"type": "sometimes"}))
expect(st == 400 and "thinking" in r["error"]["message"], f"a bad thinking type: {st} {r}")

# ---- Codex on /v1/responses
codex = dict(model="m", instructions=SYS, input=[{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
             tools=[{"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}],
             tool_choice="auto", parallel_tool_calls=False, reasoning={"effort": "high", "summary": "auto"}, store=False,
             include=["reasoning.encrypted_content"], prompt_cache_key="conv-1", max_output_tokens=4, temperature=0)
st, r = post("/v1/responses", codex)
expect(st == 200, f"Codex's request: {st} {r}")
expect(r["parallel_tool_calls"] is False and r["tool_choice"] == "auto" and r["store"] is False and r["prompt_cache_key"] == "conv-1"
       and r["reasoning"]["effort"] == "high" and r["tools"][0]["name"] == "shell" and r["instructions"] == SYS,
       f"the request's settings echoed: {r}")
# the test model never closes its reasoning: every output token is a reasoning token, and the
# message it never began is as incomplete as the response
u = r["usage"]
expect(u["output_tokens"] == 4 and u["output_tokens_details"]["reasoning_tokens"] == 4, f"reasoning tokens: {u}")
expect(r["status"] == "incomplete" and all(i["status"] == "incomplete" for i in r["output"] if i["type"] == "message"),
       f"an incomplete response's message: {r}")
st, raw = post("/v1/responses", dict(codex, stream=True))
events = [json.loads(l[6:]) for l in raw.split("\n") if l.startswith("data: ")]
done = [e["item"] for e in events if e["type"] == "response.output_item.done" and e["item"]["type"] == "message"]
expect(events[-1]["type"] == "response.incomplete" and done and all(i["status"] == "incomplete" for i in done),
       f"streamed: the incomplete message's item: {[e['type'] for e in events]} {done}")
# without thinking, no reasoning tokens, and the request's defaults echoed
st, r = post("/v1/responses", dict(input="hi", max_output_tokens=3, temperature=0))
expect(st == 200 and r["usage"]["output_tokens_details"]["reasoning_tokens"] == 0 and r["parallel_tool_calls"] is True
       and r["text"] == {"format": {"type": "text"}}, f"defaults: {r}")
# Codex's custom apply_patch tool, its call and its output: the prompt is the one chat completions
# renders for a function of one string parameter, input, called with that input
patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
custom = dict(codex, reasoning=None, tools=[{"type": "custom", "name": "apply_patch", "description": "Edit files",
                                             "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}],
              input=codex["input"] + [{"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": patch},
                                      {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"}])
st, r = post("/v1/responses", custom)
expect(st == 200, f"a custom tool: {st} {r}")
fn = {"name": "apply_patch", "description": "Edit files", "parameters": {"type": "object", "properties": {"input": {"type": "string"}},
                                                                         "required": ["input"], "additionalProperties": False}}
st, c = post("/v1/chat/completions", dict(max_tokens=1, temperature=0, tools=[{"type": "function", "function": fn}], messages=[
    {"role": "system", "content": SYS}, {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "apply_patch", "arguments": json.dumps({"input": patch})}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "Done"}]))
expect(r["usage"]["input_tokens"] == c["usage"]["prompt_tokens"], f"a custom tool's prompt: {r['usage']} vs chat completions' {c['usage']}")
# stored responses do not exist here: a clear 400 naming the field
st, r = post("/v1/responses", dict(codex, previous_response_id="resp_1"))
expect(st == 400 and r["error"]["param"] == "previous_response_id", f"previous_response_id: {st} {r}")
