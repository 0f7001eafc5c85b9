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

# a pseudo-terminal: Ctrl-C during a long reply stops the reply, not the program
python3 - "$dsv41" "$tmp/m" <<'PY' && ok || bad "chat on a terminal with Ctrl-C"
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "chat", "-m", sys.argv[2], "--temp", "1", "--seed", "3"])
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
time.sleep(0.3)
os.write(fd, b"\x03")                # Ctrl-C while the reply streams
after = wait_for(b"> ")              # the prompt comes back: the program lives
os.write(fd, b"/quit\r")
rest = read_for(3)
_, status = os.waitpid(pid, 0)
text = (after + rest).decode("utf-8", "replace")
alive = b"> " in after
gen = [l for l in text.splitlines() if "generated:" in l]
n = int(gen[-1].split("generated: ")[1].split()[0]) if gen else -1
ok = b"> " in first and alive and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and 0 < n < 1900
if not ok: print("pty transcript:", repr(text[-600:]), "status", status, "generated", n)
sys.exit(0 if ok else 1)
PY

expect_error "run with an unknown flag" "$dsv41" run -m "$tmp/m" -p "hi" --bogus 1
expect_error "run without a tokenizer" "$dsv41" run -m "$tmp/ck_none" -p "hi"
mkdir -p "$tmp/notok" && cp "$tmp/m"/*.json "$tmp/m"/*.safetensors "$tmp/notok/" && rm "$tmp/notok/tokenizer.json"
expect_error "run with tokenizer.json missing" "$dsv41" run -m "$tmp/notok" -p "hi"
expect_error "a prompt longer than the context" "$dsv41" run -m "$tmp/m" -p "$(python3 -c 'print("word " * 3000)')"
expect_error "invalid UTF-8 in the prompt" "$dsv41" run -m "$tmp/m" -p "$(printf 'bad \377 byte')"
expect_error "a bad temperature" "$dsv41" run -m "$tmp/m" -p "hi" --temp -1

finish
