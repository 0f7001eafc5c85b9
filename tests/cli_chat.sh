#!/bin/sh
# cli_chat.sh - `dsv41 run -p` and `dsv41 chat` end to end as a person drives them: a tiny
# synthesized checkpoint with a small byte-level tokenizer, piped stdin, a pseudo-terminal
# with Ctrl-C during a reply, and bad input. Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"

chat_model "$tmp/m" && ok || bad "synth the test model"

out=$("$dsv41" run -m "$tmp/m" -p "hello there" -n 12 --temp 0 2>"$tmp/err"); rc=$?
[ $rc -eq 0 ] && [ -n "$out" ] && grep -qE '^prompt: [0-9]+ tokens, [0-9.]+ tok/s \| generated: [0-9]+ tokens, [0-9.]+ tok/s$' "$tmp/err" &&
    ok || bad "run -p: rc=$rc, out '$out', err '$(cat "$tmp/err")'"
a=$("$dsv41" run -m "$tmp/m" -p "hello" -n 20 --temp 0.9 --top-p 0.9 --seed 7 2>/dev/null)
b=$("$dsv41" run -m "$tmp/m" -p "hello" -n 20 --temp 0.9 --top-p 0.9 --seed 7 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "the same seed gives the same reply"
"$dsv41" run -m "$tmp/m" -p "hello" -n 20 --think high --top-k 5 --min-p 0.05 >/dev/null 2>&1 && ok || bad "run with --think and samplers"

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
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "chat", "-m", sys.argv[2], "--temp", "1", "--seed", "30"])
def read_for(t):
    out, end = b"", time.time() + t
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try: out += os.read(fd, 65536)
            except OSError: break
    return out
def wait_for(token, t=20):
    out, end = b"", time.time() + t
    while time.time() < end and token not in out:
        out += read_for(0.1)
    return out
first = wait_for(b"> ")
os.write(fd, b"hello there\r")
echo = wait_for(b"hello there\r\n")  # the terminal's echo of the line, then the reply starts
streamed, end = b"", time.time() + 20
while not streamed.strip(b" \r\n") and time.time() < end:
    streamed += read_for(0.05)
os.write(fd, b"\x03")                # Ctrl-C while the reply streams
after = wait_for(b"> ")              # the prompt comes back: the program lives
os.write(fd, b"/quit\r")
rest = read_for(3)
_, status = os.waitpid(pid, 0)
text = (after + rest).decode("utf-8", "replace")
alive = b"> " in after
gen = [l for l in text.splitlines() if "generated:" in l]
n = int(gen[-1].split("generated: ")[1].split()[0]) if gen else -1
ok = b"> " in first and alive and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and 0 < n < int(sys.argv[3])
if not ok: print("pty transcript:", repr(text[-600:]), "status", status, "generated", n)
sys.exit(0 if ok else 1)
PY

expect_error "run with an unknown flag" "$dsv41" run -m "$tmp/m" -p "hi" --bogus 1
expect_error "run without a tokenizer" "$dsv41" run -m "$tmp/ck_none" -p "hi"
mkdir -p "$tmp/notok" && cp "$tmp/m"/*.json "$tmp/m"/*.safetensors "$tmp/notok/" && rm "$tmp/notok/tokenizer.json"
expect_error "run with tokenizer.json missing" "$dsv41" run -m "$tmp/notok" -p "hi"
expect_error "a prompt longer than the context" "$dsv41" run -m "$tmp/m" -p "$(python3 -c 'print("word " * 3000)')"
expect_error "invalid UTF-8 in the prompt" "$dsv41" run -m "$tmp/m" -p "$(printf 'bad \377 byte')"
grep -q -- "-p text: .*byte offset 4" "$tmp/err" && ok || bad "the offset is the user's text's: $(cat "$tmp/err")"
expect_error "a --think value with a quote" "$dsv41" run -m "$tmp/m" -p "hi" --think 'lo"w'
grep -q reasoning_effort "$tmp/err" && ok || bad "--think is escaped, then refused by name: $(cat "$tmp/err")"

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
