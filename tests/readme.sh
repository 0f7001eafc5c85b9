#!/bin/sh
# readme.sh - every command of README.md, run or checked, so that a renamed flag or a changed
# output fails the suite and not a newcomer: tests/readme.py says how each kind of block is
# treated (the info string after the fence: sh, text, python, sh server, sh client, toml,
# sh real). Also the man page against every command's --help. Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
for f in "${DSV41_SHARED:-../shared}/models/tiny_text.json" "${DSV41_SHARED:-../shared}/tokenizer/v41_added_tokens.json"; do
    if [ ! -f "$f" ]; then bad "shared data not found: $f"; finish; exit 1; fi
done
python3 tests/readme.py "$dsv41" "$tmp"
