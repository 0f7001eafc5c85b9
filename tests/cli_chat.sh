#!/bin/sh
# cli_chat.sh - `dsv41 run -p` and `dsv41 chat` end to end as a person drives them: a tiny
# synthesized checkpoint with a small byte-level tokenizer, piped stdin, a pseudo-terminal
# with Ctrl-C during a reply (with --draft too), and bad input. Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"

chat_model "$tmp/m" && ok || bad "synth the test model"

out=$("$dsv41" run -m "$tmp/m" -p "hello there" -n 12 --temp 0 2>"$tmp/err"); rc=$?
[ $rc -eq 0 ] && [ -n "$out" ] && grep -qE '^prompt: [0-9]+ tokens, [0-9.]+ tok/s \| generated: [0-9]+ tokens, [0-9.]+ tok/s$' "$tmp/err" &&
    ok || bad "run -p: rc=$rc, out '$out', err '$(cat "$tmp/err")'"
a=$("$dsv41" run -m "$tmp/m" -p "hello" -n 20 --temp 0.9 --top-p 0.9 --seed 7 2>/dev/null)
b=$("$dsv41" run -m "$tmp/m" -p "hello" -n 20 --temp 0.9 --top-p 0.9 --seed 7 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "the same seed gives the same reply"
"$dsv41" run -m "$tmp/m" -p "hello" -n 20 --think high --top-k 5 --min-p 0.05 >/dev/null 2>&1 && ok || bad "run with --think and samplers"

# --stop: the reply ends before the earliest stop string in it, whichever is listed first. Two
# strings taken from the greedy reply without stops (the reference) that the same token completes:
# A (4 characters) and B, its last 2, which first occurs inside A. Both orders must cut before A.
full=$("$dsv41" run -m "$tmp/m" -p "hello" -n 40 --temp 0 2>/dev/null)
python3 - "$full" >"$tmp/stops" <<'PY'
import sys
full = sys.argv[1]
i = next(i for i in range(len(full) - 3) if "\n" not in full[i:i + 4] and full.find(full[i:i + 4]) == i and full.find(full[i + 2:i + 4]) == i + 2)
print(full[i:i + 4]); print(full[i + 2:i + 4]); print(full[:i], end="")
PY
a=$(sed -n 1p "$tmp/stops"); b=$(sed -n 2p "$tmp/stops"); want=$(tail -n +3 "$tmp/stops")
for order in "$a|$b" "$b|$a"; do
    got=$("$dsv41" run -m "$tmp/m" -p "hello" -n 40 --temp 0 --stop "${order%%|*}" --stop "${order#*|}" 2>/dev/null)
    [ -n "$a" ] && [ "$got" = "$want" ] && ok || bad "--stop '${order%%|*}' --stop '${order#*|}': '$got', want '$want' (of '$full')"
done

# piped stdin: two turns, a reset, another turn
printf 'hello\nhow are you\n/reset\nand again\n/quit\n' | "$dsv41" chat -m "$tmp/m" -n 10 --temp 0 >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q 'conversation cleared' "$tmp/err" && grep -qE '^prompt: [0-9]+ tokens.*generated: 30 tokens' "$tmp/err" &&
    [ "$(wc -l <"$tmp/out")" -eq 3 ] && ok || bad "chat over a pipe: rc=$rc, $(cat "$tmp/err")"

# a pseudo-terminal: Ctrl-C during a long reply stops the reply, not the program. Seed 30's reply
# is long (1105 tokens before EOS when this was written); it is measured over a pipe first, and
# the interrupted reply must be shorter.
full=$(printf 'hello there\n/quit\n' | "$dsv41" chat -m "$tmp/m" --temp 1 --seed 30 2>&1 >/dev/null |
    sed -n 's/.*generated: \([0-9]*\) tokens.*/\1/p')
python3 - "$dsv41" "$tmp/m" "${full:-0}" <<'PY' && ok || bad "chat on a terminal with Ctrl-C (the whole reply: ${full:-?} tokens)"
import os, sys, time
sys.path.insert(0, "tests/ref")
from terminal import spawn, read_for, wait_for
pid, fd = spawn([sys.argv[1], "chat", "-m", sys.argv[2], "--temp", "1", "--seed", "30"])
first = wait_for(fd, b"> ")
os.write(fd, b"hello there\r")
echo = wait_for(fd, b"hello there\r\n")  # the terminal's echo of the line, then the reply starts
streamed, end = b"", time.time() + 20
while not streamed.strip(b" \r\n") and time.time() < end:
    streamed += read_for(fd, 0.05)
os.write(fd, b"\x03")                # Ctrl-C while the reply streams
after = wait_for(fd, b"> ")              # the prompt comes back: the program lives
os.write(fd, b"/quit\r")
rest = read_for(fd, 3)
_, status = os.waitpid(pid, 0)
text = (after + rest).decode("utf-8", "replace")
alive = b"> " in after
gen = [l for l in text.splitlines() if "generated:" in l]
n = int(gen[-1].split("generated: ")[1].split()[0]) if gen else -1
ok = b"> " in first and alive and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and 0 < n < int(sys.argv[3])
if not ok: print("pty transcript:", repr(text[-600:]), "status", status, "generated", n)
sys.exit(0 if ok else 1)
PY

# Ctrl-C during a reply of chat --draft 3 (a model with DSpark stages): every token shown is in
# the session, the one picked after a round's kept drafts too, so /save writes the prompt's
# tokens plus every generated one
python3 tests/ref/chat_model.py models/tiny_dspark.json "$tmp/tiny_ds.json" "$tmp/tokenizer.json" &&
    "$dsv41" synth --config "$tmp/tiny_ds.json" -o "$tmp/md" >/dev/null && cp "$tmp/tokenizer.json" "$tmp/md/" || bad "synth the chat model with stages"
python3 - "$dsv41" "$tmp/md" "$tmp/saved" <<'PY' && ok || bad "chat --draft: Ctrl-C leaves the tokens shown in the session"
import os, re, sys, time
sys.path.insert(0, "tests/ref")
from terminal import spawn, read_for, wait_for
pid, fd = spawn([sys.argv[1], "chat", "-m", sys.argv[2], "--temp", "1", "--seed", "30", "--draft", "3"])
wait_for(fd, b"> ")
os.write(fd, b"hello there\r")
wait_for(fd, b"hello there\r\n")
streamed, end = b"", time.time() + 20
while not streamed.strip(b" \r\n") and time.time() < end:
    streamed += read_for(fd, 0.05)   # until the reply streams
os.write(fd, b"\x03")
after = wait_for(fd, b"> ")
os.write(fd, ("/save %s\r" % sys.argv[3]).encode())
saved = wait_for(fd, b"> ")
os.write(fd, b"/quit\r")
text = (after + saved + wait_for(fd, b"generated:", 10) + wait_for(fd, b"\n", 3)).decode("utf-8", "replace")
os.waitpid(pid, 0)
n = re.search(r"saved (\d+) tokens", text)
st = re.search(r"prompt: (\d+) tokens.*generated: (\d+) tokens", text)
ok = n and st and int(n.group(1)) == int(st.group(1)) + int(st.group(2)) and int(st.group(2)) > 0
if not ok: print("pty transcript:", repr(text[-600:]))
sys.exit(0 if ok else 1)
PY

# special tokens are hidden unless asked for; the same draws otherwise
a=$($dsv41 run -m "$tmp/m" -p "hello" -n 300 --temp 3 --seed 11 2>/dev/null)
b=$($dsv41 run -m "$tmp/m" -p "hello" -n 300 --temp 3 --seed 11 --special 2>/dev/null)
case "$a" in *"<｜"*) bad "special tokens shown without --special";; *) ok;; esac
case "$b" in *"<｜"*) ok;; *) bad "--special shows no special token in '$b'";; esac
# -f reads the message from a file; penalties change a greedy reply
printf 'hello there' >"$tmp/msg.txt"
a=$($dsv41 run -m "$tmp/m" -f "$tmp/msg.txt" -n 12 --temp 0 2>/dev/null)
b=$($dsv41 run -m "$tmp/m" -p "hello there" -n 12 --temp 0 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "run -f: '$a' vs '$b'"
c=$($dsv41 run -m "$tmp/m" -p "hello there" -n 40 --temp 0 --repeat-penalty 5 --frequency-penalty 2 2>/dev/null)
d=$($dsv41 run -m "$tmp/m" -p "hello there" -n 40 --temp 0 2>/dev/null)
[ -n "$c" ] && [ "$c" != "$d" ] && ok || bad "penalties change nothing"
# progress: on a terminal a line with the share done, erased at the end; nothing into a file
$dsv41 synth --config "$tmp/tiny.json" --dtype fp8 -o "$tmp/m8" 2>"$tmp/err" && [ ! -s "$tmp/err" ] && ok ||
    bad "synth writes progress into a file: $(head -c 200 "$tmp/err")"
python3 - $dsv41 "$tmp/tiny.json" "$tmp/m8t" <<'PY' && ok || bad "synth shows progress on a terminal"
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "synth", "--config", sys.argv[2], "--dtype", "fp8", "-o", sys.argv[3]])
out = b""
while True:
    try: d = os.read(fd, 65536)
    except OSError: break
    if not d: break
    out += d
_, status = os.waitpid(pid, 0)
ok = os.WEXITSTATUS(status) == 0 and b"load: layers" in out and b"%" in out and out.endswith(b"\x1b[K")
if not ok: print(repr(out[-300:]))
sys.exit(0 if ok else 1)
PY

# the example program (examples/generate.c) gives what run gives with the same settings
a=$(build/example_generate "$tmp/m" "hello there" 2>&1); rc=$?
b=$($dsv41 run -m "$tmp/m" -p "hello there" --seed 1 --repeat-penalty 1.1 --special 2>/dev/null)
[ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "examples/generate.c: rc=$rc, '$a' vs '$b'"
expect_error "run -f with a missing file" $dsv41 run -m "$tmp/m" -f "$tmp/none.txt"

# chat's own commands and multi-line messages never reach the model
printf '/help\n/save\n/load\n/bogus\nline one\\\nline two\n"""\nblock one\nblock two\n"""\n/quit\n' |
    $dsv41 chat -m "$tmp/m" -n 5 --temp 0 >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q '^/save NAME' "$tmp/err" && grep -q '^usage: /save NAME' "$tmp/err" &&
    grep -q '^usage: /load NAME' "$tmp/err" && grep -q 'unknown command /bogus' "$tmp/err" &&
    grep -qE 'generated: 10 tokens' "$tmp/err" && [ "$(wc -l <"$tmp/out")" -eq 2 ] && ok ||
    bad "chat commands and multi-line input: rc=$rc, $(cat "$tmp/err")"

# /save and /load across processes: a conversation saved after its first turn and loaded in a
# new chat gives the second reply the first process gives (sampled, so the sampler's state and
# the penalties' history must come back too); the first process's whole output is its first
# reply then its second
opts="-n 12 --temp 0.9 --top-p 0.9 --seed 7 --repeat-penalty 1.3"
printf 'hello\nhow are you\n/quit\n' | $dsv41 chat -m "$tmp/m" $opts >"$tmp/both" 2>/dev/null
printf 'hello\n/save %s\n/quit\n' "$tmp/conv" | $dsv41 chat -m "$tmp/m" $opts >"$tmp/first" 2>"$tmp/err1"
printf '/load %s\nhow are you\n/quit\n' "$tmp/conv" | $dsv41 chat -m "$tmp/m" $opts >"$tmp/second" 2>"$tmp/err2"; rc=$?
[ $rc -eq 0 ] && [ -s "$tmp/second" ] && grep -q "saved .* tokens" "$tmp/err1" && grep -q "loaded .* tokens" "$tmp/err2" &&
    [ "$(cat "$tmp/first" "$tmp/second")" = "$(cat "$tmp/both")" ] && ok ||
    bad "a saved conversation continues alike: rc=$rc, '$(cat "$tmp/both")' vs '$(cat "$tmp/first" "$tmp/second")' $(cat "$tmp/err1" "$tmp/err2")"
# a bad /load is one line and the conversation goes on: the same second reply as without it
printf 'not a session' >"$tmp/junk"
printf 'hello\n/load %s\n/load %s\n/load %s/none\nhow are you\n/quit\n' "$tmp/junk" "$tmp" "$tmp" |
    $dsv41 chat -m "$tmp/m" $opts >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && [ "$(grep -c "^dsv41: .*$tmp" "$tmp/err")" -eq 3 ] && cmp -s "$tmp/out" "$tmp/both" && ok ||
    bad "failed loads leave the conversation: rc=$rc, $(cat "$tmp/err")"
printf 'hello\n/save %s/no/such/dir/x\n/quit\n' "$tmp" | $dsv41 chat -m "$tmp/m" -n 4 --temp 0 >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q "^dsv41: $tmp/no/such/dir/x: " "$tmp/err" && ok || bad "a failed save: rc=$rc, $(cat "$tmp/err")"

# a turn of 64+ tokens on a terminal: the prefill's layer display is gone before the reply
# streams, and the reply arrives whole (it once was erased by a redraw after every token)
long="please tell me about $(printf 'the hello world %.0s' $(seq 1 30))"
want=$(printf '%s\n/quit\n' "$long" | $dsv41 chat -m "$tmp/m" -n 24 --temp 0 2>/dev/null | head -n 1)
python3 - $dsv41 "$tmp/m" "$long" "$want" <<'PY' && ok || bad "the prefill display erases the reply on a terminal"
import os, sys
sys.path.insert(0, "tests/ref")
from terminal import spawn, wait_for
pid, fd = spawn([sys.argv[1], "chat", "-m", sys.argv[2], "-n", "24", "--temp", "0"])
wait_for(fd, b"> ")
os.write(fd, sys.argv[3].encode() + b"\r")
text = wait_for(fd, b"\n> ")
os.write(fd, b"/quit\r")
wait_for(fd, b"generated:", 5)
os.waitpid(pid, 0)
want = sys.argv[4].encode()
echo_end = text.find(b"\n")              # the echoed input line ends first
after = text[echo_end + 1:]
start = after.find(want)
tail = after[start + len(want):] if start >= 0 else b""
ok = len(want) > 0 and start >= 0 and b"\x1b[K" not in tail and b"prefill" not in tail and b"\r" not in tail.replace(b"\r\n", b"")
if not ok: print("want", repr(want), "got", repr(after[-800:]))
sys.exit(0 if ok else 1)
PY

expect_error "run with an unknown flag" $dsv41 run -m "$tmp/m" -p "hi" --bogus 1
expect_error "run without a tokenizer" $dsv41 run -m "$tmp/ck_none" -p "hi"
mkdir -p "$tmp/notok" && cp "$tmp/m"/*.json "$tmp/m"/*.safetensors "$tmp/notok/" && rm "$tmp/notok/tokenizer.json"
expect_error "run with tokenizer.json missing" "$dsv41" run -m "$tmp/notok" -p "hi"
expect_error "a prompt longer than the context" "$dsv41" run -m "$tmp/m" -p "$(python3 -c 'print("word " * 3000)')"
expect_error "invalid UTF-8 in the prompt" "$dsv41" run -m "$tmp/m" -p "$(printf 'bad \377 byte')"
grep -q -- "-p text: .*byte offset 4" "$tmp/err" && ok || bad "the offset is the user's text's: $(cat "$tmp/err")"
expect_error "a --think value with a quote" "$dsv41" run -m "$tmp/m" -p "hi" --think 'lo"w'
grep -q -- "--think" "$tmp/err" && ok || bad "a bad --think value is refused by name: $(cat "$tmp/err")"

# a piped line of 30000 bytes is one turn (one context error), not four of 8191 bytes
python3 -c 'print("word " * 6000)' | "$dsv41" chat -m "$tmp/m" -n 4 --temp 0 >/dev/null 2>"$tmp/err"
[ "$(grep -c 'would need' "$tmp/err")" -eq 1 ] && ok || bad "a long piped line: $(cat "$tmp/err")"

# Ctrl-C while a reply streams (seed 30 samples 1105 tokens before EOS): the reply stops and run
# exits 130 (128 + SIGINT)
"$dsv41" run -m "$tmp/m" -p "hello there" -n 2000 --temp 1 --seed 30 >"$tmp/int_out" 2>"$tmp/int_err" &
pid=$!
i=0
while [ $i -lt 300 ] && [ ! -s "$tmp/int_out" ] && kill -0 $pid 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
kill -INT $pid
wait $pid; rc=$?
[ $rc -eq 130 ] && grep -q interrupted "$tmp/int_err" && ok || bad "an interrupted run: rc=$rc, $(cat "$tmp/int_err")"
expect_error "a bad temperature" "$dsv41" run -m "$tmp/m" -p "hi" --temp -1

finish
