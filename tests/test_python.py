"""test_python.py DSV41 CHECKPOINT - the Python module against the dsv41 program: the same ids,
tokens and replies. DSV41 is the program to compare with; CHECKPOINT a directory with a
tokenizer. Prints "N passed, N failed"."""
import subprocess
import sys

import dsv41

prog, ck = sys.argv[1], sys.argv[2]
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def run(*args):
    return subprocess.run([prog, *args], capture_output=True, text=True, check=True).stdout


m = dsv41.Model()
want = [int(x) for x in run("run", "--ids", "2,17,47", "-n", "16").split(",")]
got = m.generate([2, 17, 47], 16)
check(got == want, "generate on the built-in model: %s vs %s" % (got, want))
lp = []
m.generate([2, 17, 47], 4, logprobs=lp)
check(len(lp) == 4 and all(x < 0 for x in lp), "log-probabilities: %s" % lp)
sampled = m.generate([2, 17, 47], 16, temperature=1.0, seed=9, top_k=20, repeat_penalty=1.3)
want = [int(x) for x in run("run", "--ids", "2,17,47", "-n", "16", "--temp", "1", "--seed", "9", "--top-k", "20",
                            "--repeat-penalty", "1.3").split(",")]
check(sampled == want, "sampling with penalties as the program does: %s vs %s" % (sampled, want))
check(dsv41.version() == run("--version").split()[1], "version")
check(dsv41.kernel_sets()[0] == "scalar", "kernel sets")
try:
    m.tokenize("hi")
    check(False, "the built-in model has no tokenizer")
except dsv41.Error as e:
    check("tokenizer" in str(e), "the error names the tokenizer: %s" % e)
m.close()

c = dsv41.Model(ck)
for text in ["hello there", "how are you", "naïve ☃ 123"]:
    want = [int(x) for x in run("tokenize", "-m", ck, "--", text).strip()[1:-1].split(",")]
    check(c.tokenize(text) == want, "tokenize %r" % text)
check(c.eos == 1 and c.bos == 0, "BOS and EOS from the checkpoint: %d %d" % (c.bos, c.eos))
want = run("run", "-m", ck, "-p", "hello there", "-n", "12", "--temp", "0")
got = c.chat("hello there", max_tokens=12, temperature=0)
check(got + "\n" == want, "chat: %r vs %r" % (got, want))
pieces = list(c.stream("hello there", max_tokens=12, temperature=0))
check(len(pieces) > 1 and "".join(pieces) == got, "stream yields the reply in pieces: %r" % pieces)
want = run("run", "-m", ck, "-p", "hello", "-n", "20", "--temp", "0.9", "--top-p", "0.9", "--seed", "7",
           "--system", "be brief", "--think", "high")
got = c.chat([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}], max_tokens=20,
             temperature=0.9, top_p=0.9, seed=7, thinking=True, effort="high")
check(got + "\n" == want, "chat with a system message, thinking and sampling: %r vs %r" % (got, want))
# stop strings: the program's --stop is the reference; two taken from the greedy reply, the later
# one listed first (both cut before the earlier one), and the reply without stops cut by hand
full = c.chat("hello there", max_tokens=40, temperature=0)
late, early = full[14:16], full[6:8]
want = run("run", "-m", ck, "-p", "hello there", "-n", "40", "--temp", "0", "--stop", late, "--stop", early)
got = c.chat("hello there", max_tokens=40, temperature=0, stop=[late, early])
cut = min(i for i in (full.find(late), full.find(early)) if i >= 0)
check(len(full) > 16 and got + "\n" == want and got == full[:cut], "chat with stop strings: %r vs %r" % (got, want))
pieces = list(c.stream("hello there", max_tokens=40, temperature=0, stop=early))
check("".join(pieces) == full[:full.find(early)], "stream with one stop string: %r" % pieces)
try:
    dsv41.Model(ck + "/missing")
    check(False, "a missing checkpoint is an error")
except dsv41.Error as e:
    check("missing" in str(e), "the error names the path: %s" % e)
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
