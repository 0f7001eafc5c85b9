#!/usr/bin/env python3
"""v41_tokenizer.py SHARED_TOKENIZER_DIR OUT.json - the V4.1 tokenizer.json a checkpoint directory
holds, made from the shared data: the DeepSeek-V3 tokenizer (deepseek-v3/tokenizer.json) with its
added tokens replaced by V4.1's table (v41_added_tokens.json), as `dsv41 tokenize --added` does.
With `dsv41 synth --config ../shared/models/tiny_text.json` it makes the chat model of the
README's quick start and of the server tests: the real 129,280-token vocabulary over filler weights."""
import json
import sys

if len(sys.argv) != 3:
    sys.exit("usage: v41_tokenizer.py SHARED_TOKENIZER_DIR OUT.json")
src, out = sys.argv[1], sys.argv[2]
with open(src + "/deepseek-v3/tokenizer.json", encoding="utf-8") as f:
    tok = json.load(f)
with open(src + "/v41_added_tokens.json", encoding="utf-8") as f:
    added = json.load(f)["tokens"]
tok["added_tokens"] = [{"id": a["id"], "content": a["content"], "single_word": False, "lstrip": False, "rstrip": False,
                        "normalized": False, "special": a.get("special", True)} for a in added]
with open(out, "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)
