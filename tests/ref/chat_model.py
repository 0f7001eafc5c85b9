"""chat_model.py CONFIG_IN CONFIG_OUT TOKENIZER_OUT - a text checkpoint's config and tokenizer for
the tests: the tiny geometry with room for a byte-level vocabulary (320 ids: 8 special tokens,
256 bytes, a few merges) and a context of 2048, and a tokenizer.json in the Hugging Face
layout with the V4.1 pre-tokenizer and special-token spellings. `dsv41 synth` writes the
weights; the tokenizer is copied beside them."""
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
