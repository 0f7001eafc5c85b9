# lib.sh - what the CLI test scripts share: run from the repository root with a temporary
# folder, count cases, and check that bad input fails the way the project promises.
cd "$(dirname "$0")/.." || exit 1
dsv41=${DSV41:-./dsv41} # the program under test (`make sanitize` names its own build)
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

# expect_error NAME CMD...: non-zero exit below 128 (no signal), exactly one stderr line, and it
# starts with "dsv41: "
expect_error() {
    name=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$lines" -eq 1 ] && grep -q '^dsv41: ' "$tmp/err"; then ok
    else bad "$name: rc=$rc, $lines stderr lines: $(head -c 300 "$tmp/err")"; fi
}

# chat_model DIR: a checkpoint of the tiny geometry with room for a byte-level vocabulary, a
# longer context and a small byte-level tokenizer.json, for the text commands
chat_model() {
    python3 - models/tiny.json "$tmp/tiny.json" "$tmp/tokenizer.json" <<'PY' || return 1
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg.update(vocab_size=320, engram_compressed_vocab_size=320, max_seq_len=2048)
json.dump(cfg, open(sys.argv[2], "w"))
# GPT-2 byte map: printable bytes stand for themselves, the rest for U+0100.. in order
bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
char = {b: chr(c) for b, c in zip(bs, cs)}
specials = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<｜User｜>", "<｜Assistant｜>",
            "<｜System｜>", "<think>", "</think>"]
vocab = {char[b]: 8 + b for b in range(256)}
merges = []
for pair in ["Ġ t", "h e", "Ġ a", "i n", "Ġt he", "e r", "o n", "Ġ s", "r e", "a t", "e n", "o r", "Ġ w", "l l",
             "Ġ h", "e l", "el l", "h ell", "Ġh ell", "Ġhell o", "o u", "Ġ y", "Ġy ou"]:
    a, b = pair.split(" ")
    if a + b not in vocab:
        vocab[a + b] = 8 + 256 + len(merges)
        merges.append(pair)
tok = {
    "version": "1.0",
    "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True} for i, s in enumerate(specials)],
    "normalizer": {"type": "Sequence", "normalizers": []},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges},
}
json.dump(tok, open(sys.argv[3], "w"), ensure_ascii=False)
PY
    "$dsv41" synth --config "$tmp/tiny.json" -o "$1" && cp "$tmp/tokenizer.json" "$1/"
}

# the closing line, and the exit status
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
