#!/bin/sh
# serve_slots.sh - the server's prompt cache and slot files. Every greedy reply is compared with
# one computed on the library directly (tests/ref/serve_ref.py: a prefill, then the appended
# tokens one per call, then greedy decoding), never with the server's own earlier output alone:
# a repeated prompt gives its cold reply with every prompt token cached; a prompt extending the
# slot's tokens computes only the new ones; cache_prompt false is a cold prefill; a prompt that
# diverges part way rewinds to the snapshot of the earlier prompt; token-id prompts and
# return_tokens; a chat that continues a conversation reuses the earlier turns. Then slot files:
# save, SIGKILL, restart, restore into another slot, and the extended request gives the first
# server's reply with every saved token reused; a corrupted file, names out of the folder, a
# symbolic link out of it and a missing file get a 4xx while the server goes on. Bad bodies for
# every new field get a 400 in OpenAI's error shape. A request that gives up during a long
# prefill frees its slot with nothing cached. Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"

n=8
# ref PREFILL APPEND: the reference reply as {"tokens", "text"} on stdout
ref() { DSV41_LIB=build/libdsv41.so PYTHONPATH=python python3 tests/ref/serve_ref.py "$m" $n "$1" "$2"; }
# field FILE EXPR: a python expression over the JSON reply r in FILE
field() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1],encoding="utf-8")); print(eval(sys.argv[2]))' "$1" "$2"; }
# complete IDS [EXTRA]: a greedy completion of token ids with return_tokens; the reply in $tmp/resp
complete() { req POST /v1/completions "{\"prompt\":$1,\"max_tokens\":$n,\"temperature\":0,\"return_tokens\":true$2}"; }
# same NAME REF: the reply in $tmp/resp has the reference's tokens and text, and cached_tokens $3
same() {
    python3 - "$tmp/resp" "$2" "$3" <<'PY' && ok || bad "$1"
import json, sys
r, want, cached = json.load(open(sys.argv[1], encoding="utf-8")), json.loads(sys.argv[2]), int(sys.argv[3])
got = (r["tokens"], r["choices"][0]["text"], r["usage"]["prompt_tokens_details"]["cached_tokens"])
assert got == (want["tokens"], want["text"], cached), (got, want, cached)
PY
}

mkdir -p "$tmp/slots" "$tmp/outside"
start first -np 2 --slot-save-path "$tmp/slots" || { finish; exit 1; }

# token ids of a text through /tokenize (checked against the command line in serve.sh)
req POST /tokenize '{"content":"<｜begin▁of▁sentence｜>The cache keeps what the slot has seen"}'
P=$(field "$tmp/resp" 'json.dumps(r["tokens"])')
np=$(field "$tmp/resp" 'len(r["tokens"])')

# a cold prompt, then the same prompt again: the same reply, every prompt token cached
R=$(ref "$P" '[]')
complete "$P"
same "a token-id prompt on a fresh server" "$R" 0
complete "$P"
same "the same prompt again: its cold reply, all $np tokens cached" "$R" "$np"

# the prompt, its reply and more: only the new tokens are computed (the slot holds the prompt
# and every reply token but the last, which was sampled and never fed)
RT=$(printf '%s' "$R" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["tokens"]))')
X='[578, 1256, 3341]'
ext=$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1]) + json.loads(sys.argv[2]) + json.loads(sys.argv[3])))' "$P" "$RT" "$X")
tail=$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1]) + json.loads(sys.argv[2])))' "$RT" "$X")
held=$((np + n - 1))
complete "$ext"
same "an extended prompt appends only its new tokens ($held cached)" "$(ref "$P" "$tail")" "$held"

# cache_prompt false: a cold prefill of the whole prompt, nothing cached; on the slot that holds
# the prompt by appending, the cold state replaces that one, so the prompt asked again gets the
# cold reply with every token cached
cold=$(ref "$ext" '[]')
complete "$ext" ',"cache_prompt":false'
same "cache_prompt false: a cold prefill" "$cold" 0
complete "$ext" ',"cache_prompt":false,"id_slot":0'
same "cache_prompt false on the slot that appended the prompt" "$cold" 0
complete "$ext" ',"id_slot":0'
same "the prompt again: the cold prefill's reply, all cached" "$cold" "$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])))' "$ext")"

# a prompt that leaves the slot's tokens after the first prompt: it rewinds to that prompt's
# snapshot and appends the rest
Y='[4242, 17, 99]'
div=$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1]) + json.loads(sys.argv[2])))' "$P" "$Y")
complete "$div"
same "a diverging prompt rewinds to the snapshot of the shared part" "$(ref "$P" "$Y")" "$np"

# the returned ids decode to the returned text (through /detokenize)
req POST /detokenize "{\"tokens\":$(field "$tmp/resp" 'json.dumps(r["tokens"])')}"
cp "$tmp/resp" "$tmp/detok"
complete "$div"
[ "$(field "$tmp/detok" 'r["content"]')" = "$(field "$tmp/resp" 'r["choices"][0]["text"]')" ] && ok || bad "return_tokens: the ids do not decode to the text"

# streamed with return_tokens, each chunk carries the ids of the text it brings: laid end to end
# the chunks' ids and texts are the whole reply's (completions here, chats below)
# sse_same NAME REPLY TEXT_EXPR: the events in $tmp/sse against the reply in REPLY
sse_same() {
    python3 - "$tmp/sse" "$2" "$3" <<'PY' && ok || bad "$1"
import json, sys
ids, text = [], ""
for line in open(sys.argv[1], encoding="utf-8"):
    if line.startswith("data: {"):
        c = json.loads(line[6:])
        ids += c.get("tokens", [])
        for ch in c["choices"]:
            text += ch.get("text") or ch.get("delta", {}).get("content") or ""
r = json.load(open(sys.argv[2], encoding="utf-8"))
assert ids == r["tokens"] and text == eval(sys.argv[3]), (ids, text, r)
PY
}
curl -sN "http://127.0.0.1:$port/v1/completions" -o "$tmp/sse" \
    --data-binary "{\"prompt\":$div,\"max_tokens\":$n,\"temperature\":0,\"return_tokens\":true,\"stream\":true}"
sse_same "a streamed completion's chunk ids are the reply's" "$tmp/resp" 'r["choices"][0]["text"]'

# a chat that continues a conversation reuses the earlier turn: cached_tokens is what the slot
# can stand for (the first turn's prompt and reply, or at least the first turn's prompt)
chat1='{"messages":[{"role":"user","content":"Tell me a story"}],"temperature":0,"max_tokens":6,"return_tokens":true}'
req POST /v1/chat/completions "$chat1"
cp "$tmp/resp" "$tmp/turn1"
curl -sN "http://127.0.0.1:$port/v1/chat/completions" -o "$tmp/sse" --data-binary "${chat1%\}},\"stream\":true}"
sse_same "a streamed chat's chunk ids are the reply's" "$tmp/turn1" 'r["choices"][0]["message"]["content"]'
reply=$(field "$tmp/turn1" 'json.dumps(r["choices"][0]["message"]["content"])')
req POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"},{\"role\":\"assistant\",\"content\":$reply},{\"role\":\"user\",\"content\":\"Another\"}],\"temperature\":0,\"max_tokens\":4}"
cp "$tmp/resp" "$tmp/turn2"
for t in 1 2; do
    python3 - "$t" "$reply" >"$tmp/case$t.json" <<'PY'
import json, sys
msgs = [{"role": "user", "content": "Tell me a story"}]
if sys.argv[1] == "2":
    msgs += [{"role": "assistant", "content": json.loads(sys.argv[2])}, {"role": "user", "content": "Another"}]
print(json.dumps({"messages": msgs, "options": {"thinking_mode": "chat"}}))
PY
    $dsv41 render --chat "$tmp/case$t.json" >"$tmp/prompt$t"
    $dsv41 tokenize --tokenizer "$m/tokenizer.json" --special "$(cat "$tmp/prompt$t")" >"$tmp/ids$t"
done
python3 - "$tmp/ids1" "$tmp/ids2" "$tmp/turn1" "$tmp/turn2" <<'PY' && ok || bad "a continued chat: cached_tokens"
import json, sys
p1, p2 = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
t1, t2 = json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
held = p1 + t1["tokens"][:-1]
want = len(held) if p2[:len(held)] == held else len(p1) if p2[:len(p1)] == p1 else 0
u = t2["usage"]
assert u["prompt_tokens"] == len(p2) and want > 0 and u["prompt_tokens_details"]["cached_tokens"] == want, (u, want, len(p1), len(held))
PY

# id_slot: the request goes to the slot named; GET /slots shows what each holds
complete "$P" ',"id_slot":1'
same "id_slot 1: the cold reply" "$R" "$(field "$tmp/resp" 'r["usage"]["prompt_tokens_details"]["cached_tokens"]')"
req GET /slots
[ "$code" = 200 ] && [ "$(field "$tmp/resp" '[(s["id"], s["busy"]) for s in r]')" = "[(0, False), (1, False)]" ] &&
    [ "$(field "$tmp/resp" 'r[1]["n_tokens"]')" -ge "$np" ] && ok || bad "GET /slots: $(cat "$tmp/resp")"

# bad bodies for the new fields
expect_err "id_slot below -1" 400 POST /v1/completions "{\"prompt\":$P,\"id_slot\":-2}"
expect_err "id_slot past the slots" 400 POST /v1/completions "{\"prompt\":$P,\"id_slot\":2}"
expect_err "id_slot not an integer" 400 POST /v1/completions "{\"prompt\":$P,\"id_slot\":\"0\"}"
expect_err "cache_prompt not a boolean" 400 POST /v1/completions "{\"prompt\":$P,\"cache_prompt\":1}"
expect_err "return_tokens not a boolean" 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"return_tokens":"yes"}'
expect_err "a token id out of the vocabulary" 400 POST /v1/completions '{"prompt":[1, 99999999]}'
expect_err "a negative token id" 400 POST /v1/completions '{"prompt":[1, -3]}'
expect_err "a fractional token id" 400 POST /v1/completions '{"prompt":[1.5]}'
expect_err "a string in a token array" 400 POST /v1/completions '{"prompt":["hi"]}'
expect_err "an empty token array" 400 POST /v1/completions '{"prompt":[]}'

# slot files: a prompt and its reply on slot 0, saved; then the extended request on this server
req POST /slots/0?action=erase
[ "$code" = 200 ] && ok || bad "erase slot 0: $code $(cat "$tmp/resp")"
req GET /slots
[ "$(field "$tmp/resp" 'r[0]["n_tokens"]')" = 0 ] && ok || bad "erase leaves tokens: $(cat "$tmp/resp")"
complete "$P" ',"id_slot":0'
same "a cold reply on slot 0 after erase" "$R" 0
req POST /slots/0?action=save '{"filename":"conv.slot"}'
[ "$code" = 200 ] && [ "$(field "$tmp/resp" 'r["n_saved"]')" = "$held" ] && [ -f "$tmp/slots/conv.slot" ] && ok ||
    bad "save slot 0: $code $(cat "$tmp/resp")"
complete "$ext" ',"id_slot":0'
cp "$tmp/resp" "$tmp/first"
same "the extended request on the first server" "$(ref "$P" "$tail")" "$held"

# a busy slot is not saved (409) and the stream goes on
curl -sN -o /dev/null "http://127.0.0.1:$port/v1/completions" --data-binary "{\"prompt\":$P,\"max_tokens\":3000,\"id_slot\":1,\"stream\":true}" &
cpid=$!
for _ in $(seq 50); do req GET /slots; [ "$(field "$tmp/resp" 'r[1]["busy"]')" = True ] && break; sleep 0.1; done
expect_err "saving a busy slot" 409 POST /slots/1?action=save '{"filename":"busy.slot"}'
kill $cpid 2>/dev/null; wait $cpid 2>/dev/null

# SIGKILL, and a new server on the same folder
kill -9 $pid; wait $pid 2>/dev/null
start second -np 2 --slot-save-path "$tmp/slots" || { finish; exit 1; }
req POST /slots/1?action=restore '{"filename":"conv.slot"}'
[ "$code" = 200 ] && [ "$(field "$tmp/resp" 'r["n_restored"]')" = "$held" ] && ok || bad "restore into slot 1: $code $(cat "$tmp/resp")"
complete "$ext"
same "after a restart and a restore: the first server's reply, all $held saved tokens reused" "$(cat "$tmp/first" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(json.dumps({"tokens": r["tokens"], "text": r["choices"][0]["text"]}))')" "$held"
[ "$(field "$tmp/resp" 'r["usage"]["prompt_tokens_details"]["cached_tokens"]')" = "$held" ] && ok || bad "restored slot not chosen"

# files that must not restore: each a 4xx, the slot as it was, the server serving
req GET /slots
before=$(field "$tmp/resp" 'r[0]["n_tokens"]')
python3 - "$tmp/slots/conv.slot" "$tmp/slots/bad.slot" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 0x40
open(sys.argv[2], "wb").write(b)
PY
cp "$tmp/slots/conv.slot" "$tmp/outside/conv.slot"
ln -s "$tmp/outside/conv.slot" "$tmp/slots/link.slot"
head -c 100 "$tmp/slots/conv.slot" >"$tmp/slots/short.slot"
expect_err "a corrupted slot file" 400 POST /slots/0?action=restore '{"filename":"bad.slot"}'
expect_err "a cut slot file" 400 POST /slots/0?action=restore '{"filename":"short.slot"}'
expect_err "a symbolic link out of the folder" 400 POST /slots/0?action=restore '{"filename":"link.slot"}'
expect_err "a name climbing out" 400 POST /slots/0?action=restore '{"filename":"../outside/conv.slot"}'
expect_err "a name with a slash" 400 POST /slots/0?action=restore '{"filename":"sub/conv.slot"}'
expect_err "a name of dots" 400 POST /slots/0?action=restore '{"filename":".."}'
expect_err "a hidden name" 400 POST /slots/0?action=save '{"filename":".x"}'
expect_err "an empty name" 400 POST /slots/0?action=save '{"filename":""}'
expect_err "a name with a NUL" 400 POST /slots/0?action=save '{"filename":"a\u0000b"}'
expect_err "an over-long name" 400 POST /slots/0?action=save "{\"filename\":\"$(head -c 300 /dev/zero | tr '\0' a)\"}"
expect_err "a name that is not a string" 400 POST /slots/0?action=save '{"filename":7}'
expect_err "saving over a symbolic link" 400 POST /slots/0?action=save '{"filename":"link.slot"}'
expect_err "a missing file" 404 POST /slots/0?action=restore '{"filename":"none.slot"}'
expect_err "an unknown action" 400 POST /slots/0?action=load '{"filename":"conv.slot"}'
expect_err "a slot past the last" 400 POST /slots/2?action=erase
expect_err "a slot that is not a number" 400 POST /slots/x?action=erase
expect_err "a slot action by GET" 405 GET /slots/0?action=erase
cmp -s "$tmp/outside/conv.slot" "$tmp/slots/conv.slot" && ok || bad "the file outside the folder changed"
req GET /slots
[ "$(field "$tmp/resp" 'r[0]["n_tokens"]')" = "$before" ] && ok || bad "a refused restore changed slot 0: $(cat "$tmp/resp")"
req GET /health
[ "$code" = 200 ] && ok || bad "health after the refused files: $code"
complete "$P"
same "a completion after the refused files" "$R" "$(field "$tmp/resp" 'r["usage"]["prompt_tokens_details"]["cached_tokens"]')"
stop

# without --slot-save-path the slot actions are off
start plain || { finish; exit 1; }
expect_err "slot files off" 501 POST /slots/0?action=save '{"filename":"x.slot"}'

# a request that gives up during a long cold prefill: the prefill stops between layers, and the
# slot is free again holding nothing (run to its end, it would have kept the 4000 tokens). The
# client leaves as soon as /slots shows the prefill under way (prefill_layers_done), with all or
# nearly all of its 6 layers to run, each of which takes far longer than the server takes to see
# a client gone (it looks every 20 ms): no sleep decides the outcome.
busy0() { req GET /slots; field "$tmp/resp" 'r[0]["busy"]'; }
layers0() { curl -s "http://127.0.0.1:$port/slots" | sed -n 's/^\[{"id":0,[^}]*"prefill_layers_done":\([0-9]*\)}.*/\1/p'; }
long=$(python3 -c 'print([(i * 7919 + 3) % 129000 for i in range(4000)])')
curl -sN -o /dev/null "http://127.0.0.1:$port/v1/completions" \
    --data-binary "{\"prompt\":$long,\"max_tokens\":4,\"id_slot\":0,\"stream\":true}" &
cpid=$!
done0=
for _ in $(seq 1000); do done0=$(layers0); [ -n "$done0" ] && break; sleep 0.01; done
kill $cpid 2>/dev/null
wait $cpid 2>/dev/null
[ -n "$done0" ] && [ "$done0" -le 2 ] && ok || bad "the long prefill shows in /slots from its start (layers done when seen: '$done0')"
for _ in $(seq 200); do [ "$(busy0)" = False ] && break; sleep 0.05; done
[ "$(field "$tmp/resp" 'r[0]["busy"], r[0]["n_tokens"], "prefill_layers_done" in r[0]')" = "(False, 0, False)" ] && ok ||
    bad "a request that gave up during its prefill: $(cat "$tmp/resp")"
stop
expect_error "serve: a slot folder that cannot be made" $dsv41 serve -m "$m" --port 0 --slot-save-path /proc/none/slots

finish
