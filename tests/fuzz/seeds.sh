#!/bin/sh
# seeds.sh OUT - seed corpora for the fuzz harnesses, built from the shared data and the test
# fixtures at run time (nothing of the shared data is kept in the repository): OUT/<harness>/
# holds one file per seed. Needs ./dsv41 (to convert the golden into checkpoints) and python3.
# A new harness gets its seeds from a new section here.
set -e
cd "$(dirname "$0")/../.."
out=$1
shared=${DSV41_SHARED:-../shared}
golden=${DSV41_GOLDEN:-$shared/golden/ds41_tiny_golden.json}
rm -rf "$out"
mkdir -p "$out/checkpoint" "$out/tokenizer" "$out/tokenize" "$out/chat" "$out/golden" "$out/session" "$out/api" "$out/grammar" "$out/schema"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
./dsv41 convert --golden "$golden" --dtype bf16 -o "$work/bf16" >/dev/null
./dsv41 convert --golden "$golden" --dtype fp8 -o "$work/fp8" >/dev/null
python3 - "$shared" "$golden" "$work" "$out" <<'PY'
import json, os, sys
shared, golden, work, out = sys.argv[1:5]
def put(harness, name, data):
    with open(os.path.join(out, harness, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))

# checkpoint: the files in fuzz_checkpoint.c's order, joined by its separator
SEP = b"\n--dsv41-fuzz-file--\n"
FILES = ["config.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors",
         "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors", "engram_token_map.json"]
for d in ("bf16", "fp8"):
    put("checkpoint", d, SEP.join(open(os.path.join(work, d, f), "rb").read() for f in FILES))

# tokenize: each test vector's text, behind the byte that picks special parsing
for i, v in enumerate(json.load(open(os.path.join(shared, "tokenizer", "vectors.json"), encoding="utf-8"))):
    put("tokenize", "v%02d" % i, chr(1 if v.get("parse_special") else 0) + v["text"])

# chat: each case of the chat vectors as the render command reads it
for name in ("chat_vectors.json", "chat_vectors_v4.json"):
    for i, c in enumerate(json.load(open(os.path.join(shared, "tokenizer", name), encoding="utf-8"))):
        put("chat", "%s-%02d" % (name[:-5], i), json.dumps({k: c[k] for k in ("messages", "tools", "options") if k in c}, ensure_ascii=False))

# schema: every schema of the test table; grammar: grammars in the documented form
for i, c in enumerate(json.load(open("tests/data/schema_cases.json", encoding="utf-8"))["cases"]):
    put("schema", "case%02d" % i, json.dumps(c["schema"]))
grammars = [
    'root ::= "{" ws "\\"a\\"" ws ":" ws num ws "}"\nws ::= [ \\t\\n]{0,3}\nnum ::= "-"? [0-9]{1,4}\n',
    '# comment\nroot ::= item ("," item)*\nitem ::= [a-z\\u00e9]+ | "(" root ")"\n',
    'root ::= <think> [^<]* </think> ("yes" | "no"){1,2} <[1]>?\n',
    'root ::= "<\uff5cDSML\uff5c calls>" . .? [\\x41-\\x5A]{2,}\n',
]
for i, g in enumerate(grammars):
    put("grammar", "g%d" % i, g + "abcd")

# tokenizer: the V3 tokenizer.json cut to its first 300 tokens and the merges among them
t = json.load(open(os.path.join(shared, "tokenizer", "deepseek-v3", "tokenizer.json"), encoding="utf-8"))
vocab = {k: v for k, v in t["model"]["vocab"].items() if v < 300}
t["model"]["vocab"] = vocab
t["model"]["merges"] = [m for m in t["model"]["merges"]
                        if all(p in vocab for p in (m.split(" ") if isinstance(m, str) else m)) and "".join(m.split(" ") if isinstance(m, str) else m) in vocab]
t["added_tokens"] = t["added_tokens"][:8]
for a in t["added_tokens"]: a["id"] = 300 + t["added_tokens"].index(a)
put("tokenizer", "v3-cut", json.dumps(t, ensure_ascii=False))
t["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
put("tokenizer", "v3-cut-bytelevel", json.dumps(t, ensure_ascii=False))

# golden: the whole golden, and one regime of it
g = json.load(open(golden))
put("golden", "tiny", json.dumps(g))
g["fixture"]["regimes"] = ["prefill12"]
put("golden", "tiny-prefill", json.dumps({k: g[k] for k in ("fixture", "weights_meta", "prefill12")}))

# session (fuzz_session.c's modes): a real file of 14 ids, 4 fed one by one, with one byte
# changed; the same with no change; a file of nothing but a header
put("session", "real-flip", bytes([2, 14, 4] + list(range(3, 17)) + [40, 0, 1]))
put("session", "real", bytes([2, 21, 0] + list(range(5, 26))))
put("session", "header", bytes([1]) + b"DSV41SES" + bytes([1] + [0] * 71))

# api (fuzz_api.c): a byte for the route (0 chat, 1 completion, 2 /tokenize, 3 /detokenize; the
# high bits: bytes per generated token), the request body, then a generated reply. The chat
# vectors give the requests, and their rendered assistant turns (after <think>, before the end
# of sentence) the replies: reasoning, answers and DSML tool-call blocks as the model writes them.
SEP = "\n--dsv41-fuzz-reply--\n"
def api(name, route, body, reply=None):
    text = json.dumps(body, ensure_ascii=False) + ("" if reply is None else SEP + reply)
    put("api", name, bytes([route]) + text.encode("utf-8", "surrogatepass"))
replies = []
for name in ("chat_vectors.json", "chat_vectors_v4.json"):
    for i, c in enumerate(json.load(open(os.path.join(shared, "tokenizer", name), encoding="utf-8"))):
        text = c.get("expect", {}).get("exact", "")
        turns = [t.split("<｜end▁of▁sentence｜>")[0] for t in text.split("<｜Assistant｜>")[1:]]
        turns = [t[len("<think>"):] if t.startswith("<think>") else t for t in turns]
        replies += turns
        body = {k: c[k] for k in ("messages", "tools") if k in c}
        body["thinking"] = (c.get("options") or {}).get("thinking_mode", "thinking") == "thinking"
        calls = [t for t in turns if "DSML" in t]
        api("%s-%02d" % (name[:-5], i), 4 * (i % 7), body, (calls or turns or ["Hello."])[-1])
        if calls: # a block that does not parse stays text, with the whitespace before it (streamed too)
            api("%s-%02d-broken" % (name[:-5], i), 4 * (i % 7), body, calls[-1][:calls[-1].rfind("</")] + "</calls>")
for i, r in enumerate(replies[:12]):
    api("stream-%02d" % i, 4 * (i % 7), {"messages": [{"role": "user", "content": "Hi"}], "stream": True,
        "stream_options": {"include_usage": True}, "return_tokens": True, "thinking": i % 2 == 0}, r)
api("completion-text", 1, {"prompt": "The capital of France is", "max_tokens": 16, "stop": ["\n", "."],
    "temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": 7}, " Paris. It is")
api("completion-ids", 5, {"prompt": [0, 100, 2000, 128000], "stream": True, "return_tokens": True,
    "cache_prompt": False, "id_slot": 1}, "\u00e9t\u00e9 \U0001F600 done")
# two stop strings in one token, the one listed second earlier in the text: the earliest ends it
api("completion-stops", 1 + 4 * 3, {"prompt": "x", "stop": ["bc", "ab"], "stream": True}, "xabcdefg")
# the Messages and Responses routes (the first byte's top two bits: 64 messages, 128 responses,
# 192 count_tokens) on the same conversations translated, and requests of their own shapes
MSG, RESP, COUNT = 64, 128, 192
tool = {"name": "get_weather", "description": "Weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
call = [r for r in replies if "DSML" in r][:1] or ["Hello."]
for i, r in enumerate(replies[:8]):
    api("messages-%02d" % i, MSG + 4 * (i % 7), {"model": "m", "max_tokens": 64, "system": "Be brief.", "stream": i % 2 == 0,
        "messages": [{"role": "user", "content": "Hi"}], "thinking": {"type": "enabled", "budget_tokens": 32} if i % 3 == 0 else {"type": "disabled"}}, r)
    api("responses-%02d" % i, RESP + 4 * (i % 7), {"model": "m", "input": "Hi", "instructions": "Be brief.", "stream": i % 2 == 1,
        "max_output_tokens": 64, "reasoning": {"effort": "high"} if i % 3 == 0 else None}, r)
api("messages-tools", MSG + 4, {"model": "m", "max_tokens": 128, "tools": [tool], "stream": True, "stop_sequences": ["STOP"],
    "temperature": 0.5, "top_p": 0.9, "top_k": 20, "messages": [
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "Look it up.", "signature": ""},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21 C"}]}]}, call[0])
api("responses-tools", RESP + 8, {"model": "m", "stream": True, "tools": [{"type": "function", "name": "get_weather",
    "parameters": tool["input_schema"]}], "input": [
    {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C"}]}, call[0])
api("responses-stored", RESP, {"model": "m", "input": "Hi", "previous_response_id": "resp_1"})
api("messages-bad", MSG, {"model": "m", "max_tokens": 0, "messages": []})
api("count-tokens", COUNT, {"model": "m", "system": [{"type": "text", "text": "Be brief."}], "tools": [tool],
    "messages": [{"role": "user", "content": "Hi"}]})
api("count-tokens-bad", COUNT, {"model": "m"})
# structured output (server/structured.c): schemas, a grammar, strict and forced tools, agents' fields
schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"enum": ["x", "y"]}},
          "required": ["a"], "additionalProperties": False}
api("structured-chat", 0, {"messages": [{"role": "user", "content": "JSON"}], "max_tokens": 32,
    "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}}, '{"a": 3, "b": "x"}')
api("structured-grammar", 1, {"prompt": "x", "grammar": 'root ::= ("yes" | "no") [0-9]{1,3}', "max_tokens": 8}, "yes12")
api("structured-tools", 4, {"messages": [{"role": "user", "content": "Call"}], "tool_choice": "required", "parallel_tool_calls": False,
    "tools": [{"type": "function", "function": {"name": "set", "parameters": schema, "strict": True}}]}, call[0])
api("structured-messages", MSG, {"model": "m", "max_tokens": 64, "tools": [tool], "tool_choice": {"type": "any"},
    "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=2;"}, {"type": "text", "text": "Be brief."}],
    "thinking": {"type": "adaptive"}, "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": schema}},
    "messages": [{"role": "user", "content": "Hi"}, {"role": "system", "content": "Reminder."}]}, call[0])
api("responses-custom", RESP + 4, {"model": "m", "stream": True, "tools": [{"type": "custom", "name": "apply_patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}], "input": [
    {"role": "user", "content": "Patch"}, {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"},
    {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"}]}, call[0].replace("get_weather", "apply_patch"))
api("structured-responses", RESP, {"model": "m", "input": "Hi", "parallel_tool_calls": False, "store": False,
    "text": {"format": {"type": "json_schema", "name": "t", "schema": schema, "strict": True}}}, '{"a": 1}')
api("tokenize", 2, {"content": "Hello <｜User｜> world \u00e9", "parse_special": True})
api("detokenize", 3, {"tokens": [0, 1, 100, 128000, 128799]})
PY
