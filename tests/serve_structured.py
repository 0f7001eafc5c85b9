"""serve_structured.py PORT - constrained replies of `dsv41 serve` on PORT, checked by an
independent validator (python3-jsonschema) and by the JSON parser.

The test model has filler weights: left alone it writes no JSON at all, so a reply that
validates is the grammar's doing. Each schema of the table is asked for over several seeds at
temperature 1 through chat completions' response_format, /v1/completions' json_schema, the
Responses API's text.format and Anthropic's output_config.format; its invalid documents must
fail the validator (so the check can fail). Then strict and forced tool calls on all three
APIs, a raw grammar, json_object, thinking before a constrained answer, bad schemas and grammars
(a 400 naming the keyword or position), and a grammar that can reach no token (the reply ends
with finish_reason "grammar_dead_end"). Exits non-zero on the first mismatch, naming it."""
import json, os, sys, urllib.error, urllib.request

import jsonschema

port = sys.argv[1]
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy
# seeds per case: make sanitize asks for fewer (DSV41_TEST_SEEDS), its server being ~10x slower
SEEDS = int(os.environ.get("DSV41_TEST_SEEDS", "4"))


def post(path, body):
    rq = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with direct.open(rq, timeout=120) as r:
            return r.status, json.loads(r.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode("utf-8"))


def expect(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def validates(schema, doc):
    try:
        jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
        return True
    except jsonschema.ValidationError:
        return False


# (schema, documents that must NOT validate): bounded strings, arrays and numbers throughout
TABLE = [
    ({"type": "object", "properties": {"a": {"type": "integer", "minimum": -3, "maximum": 40}, "b": {"type": "boolean"}},
      "required": ["a", "b"], "additionalProperties": False},
     [{"a": 41, "b": True}, {"a": 1}, {"a": 1, "b": True, "c": 0}]),
    ({"type": "object", "properties": {"k": {"enum": ["red", "green", 3, None]}, "s": {"type": "string", "minLength": 2, "maxLength": 5}},
      "required": ["k", "s"], "additionalProperties": False},
     [{"k": "blue", "s": "ab"}, {"k": 3, "s": "a"}]),
    ({"type": "object", "properties": {"v": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 1, "maxItems": 4},
                                        "t": {"type": "array", "prefixItems": [{"const": "x"}, {"type": "boolean"}], "items": False}},
      "required": ["v", "t"], "additionalProperties": False},
     [{"v": [], "t": ["x", True]}, {"v": [1], "t": ["y", True]}]),
    ({"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["x"], "additionalProperties": False}},
      "type": "object", "properties": {"p": {"$ref": "#/$defs/pt"}, "q": {"anyOf": [{"$ref": "#/$defs/pt"}, {"type": "null"}]},
                                       "d": {"type": "string", "format": "date"}},
      "required": ["p", "q", "d"], "additionalProperties": False},
     [{"p": {"x": 10}, "q": None, "d": "2020-01-01"}, {"p": {"x": 1}, "q": 5, "d": "2020-01-01"}]),
]

for i, (schema, bad_docs) in enumerate(TABLE):
    for doc in bad_docs:
        expect(not validates(schema, doc), f"schema {i}: the validator accepts a bad document {doc}")
    for seed in range(SEEDS):
        base = dict(temperature=1, seed=seed, max_tokens=200)
        msgs = [{"role": "user", "content": "Reply in JSON."}]
        replies = []
        st, r = post("/v1/chat/completions", dict(base, messages=msgs,
                                                  response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": seed % 2 == 0}}))
        expect(st == 200 and r["choices"][0]["finish_reason"] == "stop", f"schema {i} seed {seed}, chat: {st} {r}")
        replies.append(("chat", r["choices"][0]["message"]["content"]))
        st, r = post("/v1/completions", dict(base, prompt="JSON:", json_schema=schema))
        expect(st == 200 and r["choices"][0]["finish_reason"] == "stop", f"schema {i} seed {seed}, completions: {st} {r}")
        replies.append(("completions", r["choices"][0]["text"]))
        st, r = post("/v1/responses", dict(temperature=1, seed=seed, max_output_tokens=200, input="Reply in JSON.",
                                           text={"format": {"type": "json_schema", "name": "t", "schema": schema, "strict": True}}))
        expect(st == 200 and r["status"] == "completed", f"schema {i} seed {seed}, responses: {st} {r}")
        replies.append(("responses", "".join(p["text"] for o in r["output"] if o["type"] == "message" for p in o["content"])))
        st, r = post("/v1/messages", dict(base, messages=msgs, output_config={"format": {"type": "json_schema", "schema": schema}}))
        expect(st == 200 and r["stop_reason"] == "end_turn", f"schema {i} seed {seed}, messages: {st} {r}")
        replies.append(("messages", "".join(b["text"] for b in r["content"] if b["type"] == "text")))
        for route, text in replies:
            try:
                doc = json.loads(text)
            except ValueError as e:
                expect(False, f"schema {i} seed {seed}, {route}: not JSON ({e}): {text!r}")
            expect(validates(schema, doc), f"schema {i} seed {seed}, {route}: {doc} does not validate")

# json_object: any object
for seed in range(SEEDS):
    st, r = post("/v1/chat/completions", dict(temperature=1, seed=seed, max_tokens=300, messages=[{"role": "user", "content": "JSON"}],
                                              response_format={"type": "json_object"}))
    text = r["choices"][0]["message"]["content"]
    expect(r["choices"][0]["finish_reason"] in ("stop", "length"), f"json_object: {r}")
    if r["choices"][0]["finish_reason"] == "stop":
        expect(isinstance(json.loads(text), dict), f"json_object seed {seed}: {text!r}")

# a raw grammar, on completions and chat
g = 'root ::= ("yes" | "no") " " [0-9]{1,3}'
for path, body in (("/v1/completions", {"prompt": "Answer:"}), ("/v1/chat/completions", {"messages": [{"role": "user", "content": "?"}]})):
    for seed in range(SEEDS):
        st, r = post(path, dict(body, grammar=g, temperature=1, seed=seed, max_tokens=20))
        c = r["choices"][0]
        text = c.get("text", c.get("message", {}).get("content"))
        ok = text and text.split(" ")[0] in ("yes", "no") and text.split(" ")[1].isdigit() and len(text.split(" ")[1]) <= 3
        expect(st == 200 and c["finish_reason"] == "stop" and ok, f"grammar on {path}: {st} {r}")

# tools: strict, forced or not; the arguments validate against the tool's schema
args = TABLE[0][0]
tool = {"type": "function", "function": {"name": "set", "description": "Set a and b", "parameters": args, "strict": True}}
msgs = [{"role": "user", "content": "Call a tool."}]
# (filler weights write call after call: one call per block, but for one request that may hold
# up to 16, room for all of them)
for seed in range(SEEDS):
    for choice, single in (("required", True), ({"type": "function", "function": {"name": "set"}}, seed > 0)):
        st, r = post("/v1/chat/completions", dict(temperature=1, seed=seed, max_tokens=300 if single else 1200, messages=msgs, tools=[tool],
                                                  tool_choice=choice, parallel_tool_calls=not single))
        calls = r["choices"][0]["message"].get("tool_calls") or []
        expect(st == 200 and r["choices"][0]["finish_reason"] == "tool_calls" and calls, f"chat, tool_choice {choice}: {st} {r}")
        expect(len(calls) == 1 or not single, f"parallel_tool_calls false, {len(calls)} calls")
        for c in calls:
            expect(c["function"]["name"] == "set" and validates(args, json.loads(c["function"]["arguments"])), f"chat strict call seed {seed}: {c}")
    st, r = post("/v1/responses", dict(temperature=1, seed=seed, max_output_tokens=300, input="Call a tool.", tool_choice="required", parallel_tool_calls=False,
                                       tools=[{"type": "function", "name": "set", "parameters": args, "strict": True}]))
    calls = [o for o in r["output"] if o["type"] == "function_call"]
    expect(st == 200 and r["status"] == "completed" and calls and all(validates(args, json.loads(c["arguments"])) for c in calls),
           f"responses forced strict call seed {seed}: {st} {r}")
    # Anthropic: every tool's input_schema holds, with any or with thinking before the call
    for extra in ({"tool_choice": {"type": "any", "disable_parallel_tool_use": True}},
                  {"tool_choice": {"type": "tool", "name": "set", "disable_parallel_tool_use": True}, "thinking": {"type": "enabled", "budget_tokens": 5}}):
        st, r = post("/v1/messages", dict(temperature=1, seed=seed, max_tokens=300, messages=msgs,
                                          tools=[{"name": "set", "input_schema": args}], **extra))
        uses = [b for b in r.get("content", []) if b["type"] == "tool_use"]
        expect(st == 200 and r["stop_reason"] == "tool_use" and uses and all(validates(args, u["input"]) for u in uses),
               f"messages, {extra}, seed {seed}: {st} {r}")
        if "thinking" in extra:
            expect(r["content"][0]["type"] == "thinking" and r["content"][0]["thinking"], f"thinking before the call: {r}")
# a strict tool without parameters: a call of it, with an empty arguments object
noargs = {"type": "function", "function": {"name": "ping", "strict": True,
                                           "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}}
st, r = post("/v1/chat/completions", dict(temperature=1, seed=2, max_tokens=60, messages=msgs, tools=[noargs], tool_choice="required",
                                          parallel_tool_calls=False))
calls = r["choices"][0]["message"].get("tool_calls") or []
expect(st == 200 and len(calls) == 1 and json.loads(calls[0]["function"]["arguments"]) == {}, f"a strict tool without parameters: {st} {r}")
# tool_choice none: no call can be written
st, r = post("/v1/chat/completions", dict(temperature=1, seed=1, max_tokens=30, messages=msgs, tools=[tool], tool_choice="none"))
expect(st == 200 and not r["choices"][0]["message"].get("tool_calls"), f"tool_choice none: {r}")

# bad schemas and grammars: a 400 that names the keyword or the position
for path, body, param, word in (
        ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": {"type": "object", "not": {}}}}},
         "response_format", "not"),
        ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": {"type": "string", "pattern": "(?<=a)b"}}}},
         "response_format", "pattern"),
        ("/v1/chat/completions", {"grammar": 'root ::= "a'}, "grammar", "1:"),
        ("/v1/chat/completions", {"grammar": "root ::= x\nx ::= x \"a\""}, "grammar", "x"),
        ("/v1/completions", {"json_schema": {"type": "integer", "minimum": 1, "maximum": "ten"}}, "json_schema", "maximum"),
        ("/v1/chat/completions", {"response_format": {"type": "xml"}}, "response_format", "response_format"),
        ("/v1/chat/completions", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"not": {}}}}, "strict": True}}]},
         "tools", "not")):
    base = {"prompt": "x"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
    st, r = post(path, dict(base, max_tokens=4, **body))
    expect(st == 400 and r["error"]["param"] == param and word in r["error"]["message"], f"bad {param} {body}: {st} {r}")

# a grammar that can reach no token: it needs the end-of-sentence id, which stays masked while
# the grammar cannot end; the reply ends at once with the dead end's finish reason
st, r = post("/v1/completions", dict(prompt="x", grammar='root ::= "a" <[1]> "b"', max_tokens=8, temperature=1, seed=1))
expect(st == 200 and r["choices"][0]["finish_reason"] == "grammar_dead_end", f"a dead end: {st} {r}")
