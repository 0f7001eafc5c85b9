# serve_ref.py - the greedy reply the server's prompt cache must reproduce, computed on the
# library directly (not through the server): PREFILL as one prefill at position 0, then APPEND
# one token per call (as a slot extends the tokens it holds), then N greedy tokens, each fed
# unless it is the last; an EOS ends the reply and is not part of it.
# Usage: DSV41_LIB=build/libdsv41.so PYTHONPATH=python python3 serve_ref.py MODEL_DIR N PREFILL APPEND
# with PREFILL and APPEND JSON arrays of ids; prints {"tokens": [...], "text": "..."}.
import ctypes
import json
import sys

import dsv41

m = dsv41.Model(sys.argv[1])
n, prefill, append = int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
V = m.vocab_size
session = dsv41._session_new(m._m)
params = dsv41._params_default()
params.temperature = 0.0
sampler = dsv41._sampler_new(ctypes.byref(params), V)
logits = (ctypes.c_float * V)()


def feed(ids):
    if dsv41._forward(session, (ctypes.c_int32 * len(ids))(*ids), len(ids), logits, None):
        dsv41._fail()


feed(prefill)
for t in append:
    feed([t])
eos = dsv41._tok_find(m._tokenizer(), "<｜end▁of▁sentence｜>".encode("utf-8"))
out = []
for i in range(n):
    t = dsv41._sample(sampler, logits)
    if t == eos:
        break
    out.append(t)
    if i + 1 < n:
        feed([t])
# the text by the one rule for reply text: special tokens left out but those that mark its parts
print(json.dumps({"tokens": out, "text": "".join(m._pieces(out, False))}, ensure_ascii=False))
