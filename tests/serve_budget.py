"""serve_budget.py PORT CHAT PROMPT - a thinking budget on /v1/messages against an independent expectation.

The test model never closes its reasoning, so a budget of B tokens must end it: the reply's
thinking is the plain reply's first B tokens of reasoning (the same request with max_tokens B and
no budget), and its answer is the greedy raw completion of the prompt's ids, those B reasoning
ids and </think> (from chat completions' return_tokens and /tokenize of PROMPT, the text that
`dsv41 render` wrote of the chat file CHAT, whose messages the requests send): the tokens a reply
gets when </think> is fed at that position. Whole and streamed (the thinking block stops where
the text block starts), and usage counts all B + 1 + A tokens within max_tokens. Exits non-zero
on a mismatch."""
import json, sys, urllib.request

port, B, A = sys.argv[1], 6, 5
user = json.load(open(sys.argv[2], encoding="utf-8"))["messages"]

direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy


def post(path, body):
    rq = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with direct.open(rq, timeout=120) as r:
        return r.read().decode("utf-8")


def messages(**kw):
    return json.loads(post("/v1/messages", dict(messages=user, temperature=0, **kw)))


plain = messages(max_tokens=B, thinking={"type": "enabled"})
assert plain["stop_reason"] == "max_tokens" and plain["usage"]["output_tokens"] == B, plain
thought = plain["content"][0]["thinking"]
# the same reasoning's ids and the prompt's, for the raw completion
chat = json.loads(post("/v1/chat/completions", dict(messages=user, temperature=0, max_tokens=B, thinking={"type": "enabled"}, return_tokens=True)))
assert chat["choices"][0]["message"]["reasoning_content"] == thought, (chat, thought)
prompt = json.loads(post("/tokenize", {"content": sys.argv[3]}))["tokens"]
assert len(prompt) == chat["usage"]["prompt_tokens"], (len(prompt), chat["usage"])
unthink = json.loads(post("/tokenize", {"content": "</think>"}))["tokens"]
assert len(unthink) == 1, unthink
raw = json.loads(post("/v1/completions", dict(prompt=prompt + chat["tokens"] + unthink, temperature=0, max_tokens=A)))
answer = raw["choices"][0]["text"]

budget = dict(max_tokens=B + 1 + A, thinking={"type": "enabled", "budget_tokens": B})
got = messages(**budget)
blocks = [(b["type"], b.get("thinking", b.get("text"))) for b in got["content"]]
assert blocks == [("thinking", thought), ("text", answer)], (blocks, thought, answer)
assert got["stop_reason"] == "max_tokens" and got["usage"]["output_tokens"] == B + 1 + A, got

events = [json.loads(l[6:]) for l in post("/v1/messages", dict(messages=user, temperature=0, stream=True, **budget)).split("\n") if l.startswith("data: ")]
kinds = [(e["type"], e.get("index")) for e in events if e["type"].startswith("content_block_") and e["type"] != "content_block_delta"]
assert kinds == [("content_block_start", 0), ("content_block_stop", 0), ("content_block_start", 1), ("content_block_stop", 1)], kinds
part = lambda i, k: "".join(e["delta"][k] for e in events if e["type"] == "content_block_delta" and e["index"] == i)
assert part(0, "thinking") == thought and part(1, "text") == answer, (part(0, "thinking"), part(1, "text"))
