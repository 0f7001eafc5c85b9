"""readme.py DSV41 TMP - every command of README.md, run or checked (tests/readme.sh runs it from
the repository root). The README's fenced blocks say by their info string what the test does:

  ```sh          the first one is CI's set-up (.ci/run runs it as written): only its dsv41 flags
                 are checked here. Every later one is run with bash -eu -o pipefail, in order, from
                 the repository root, stdin empty: it must exit 0 and print no JSON error object
  ```text        right after a run block: that block's exact stdout
  ```python      run with python3, the module and the library of the build (PYTHONPATH=python,
                 DSV41_LIB=build/libdsv41.so; skipped for a sanitizer build, whose library python
                 cannot load)
  ```sh server   its `export` lines join the environment of the blocks after it; its one
                 `dsv41 serve` line starts the server in the background on a port the kernel picks
                 (the test waits at most 60 s for it), which the blocks after it reach in place
                 of 127.0.0.1:8080; the server is stopped with SIGTERM at the end (20 s to exit 0)
  ```sh client   a client's set-up: its `export` lines are evaluated into the environment, the
                 client program itself is not run; the test makes the request that client makes
                 with those variables (ANTHROPIC_*: POST /v1/messages and count_tokens; OPENAI_*:
                 chat completions and models) and checks the reply, and that without the key the
                 server answers 401
  ```toml        a Codex config.toml: parsed; its provider must say wire_api = "responses", and a
                 Responses request to its base_url with the key its env_key names must succeed
  ```sh real     needs the real checkpoint, a download or an install: not run; every dsv41
                 command in it is checked against `dsv41 CMD --help` (the command, every flag)

In every block that runs, /tmp/ becomes this test's temporary folder, ./dsv41 the program under
test, ../shared/ $DSV41_SHARED when set, and 127.0.0.1:8080 the server's port. A block of another
kind fails the test, so a new block has to say what it is. Every dsv41 command in the README and in
the ```sh blocks of docs/ has its flags checked. The README stays at most 260 lines, and the man
page names every flag `dsv41 CMD --help` prints.
Prints "N passed, N failed"; every wait is bounded."""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

dsv41, tmp = sys.argv[1], sys.argv[2]
passed = failed = 0


def ok():
    global passed
    passed += 1


def bad(msg):
    global failed
    failed += 1
    print("FAIL: " + msg, flush=True)


def check(cond, msg):
    ok() if cond else bad(msg)


readme = open("README.md", encoding="utf-8").read()
lines = readme.split("\n")
check(len(lines) <= 261, "README.md has %d lines, more than 260" % (len(lines) - 1))

# ---- the blocks: (info string, text, line number)
blocks, cur = [], None
for n, line in enumerate(lines, 1):
    if cur is None and line.startswith("```"):
        cur = (line[3:].strip(), [], n)
    elif cur is not None and line == "```":
        blocks.append((cur[0], "\n".join(cur[1]) + "\n", cur[2]))
        cur = None
    elif cur is not None:
        cur[1].append(line)
check(cur is None, "README.md: a block opened at line %s is not closed" % (cur and cur[2]))

# ---- dsv41's commands and their flags, from --help
helps = {}


def flags_of(cmd):
    if cmd not in helps:
        r = subprocess.run([dsv41, cmd, "--help"], capture_output=True, text=True, timeout=60)
        helps[cmd] = None if r.returncode else set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", r.stdout))
    return helps[cmd]


def check_commands(text, where):
    """Every dsv41 command in a shell text: a command dsv41 knows, flags its --help names."""
    words, held = [], ""
    for line in text.replace("\\\n", " ").split("\n"):
        held += line
        lex = shlex.shlex(held, posix=True, punctuation_chars=True)
        lex.whitespace_split, lex.commenters = True, "#"
        try:
            words += list(lex) + [";"]
            held = ""
        except ValueError:  # a quote open across lines: the command goes on on the next one
            held += "\n"
    if held:
        bad("%s: a quote is never closed in: %s" % (where, held.strip()))
        return
    cmds, one = [], []
    for w in words:
        if w and set(w) <= set(";&|()<>"):
            if one: cmds.append(one)
            one = []
        else:
            one.append(w)
    for c in cmds:
        if c and c[0] == "mpirun":  # mpirun's own options and their values, then the program
            c = c[1:]
            while c and c[0].startswith("-"):
                c = c[2:] if c[0] in ("-np", "-n", "--hostfile", "-H", "--host", "--map-by", "--bind-to") else c[1:]
        if not c or os.path.basename(c[0]) not in ("dsv41", "dsv41-mpi"):
            continue
        if os.path.basename(c[0]) == "dsv41-mpi" and "--split" in c:  # the transport's own flag
            i = c.index("--split")
            check(c[i + 1:i + 2] in (["experts"], ["rows"]), "%s: dsv41-mpi --split takes experts or rows" % where)
            c = c[:i] + c[i + 2:]
        if len(c) < 2 or c[1] in ("--version", "--help", "-h"):
            ok()
            continue
        fl = flags_of(c[1])
        if fl is None:
            bad("%s: dsv41 has no command '%s'" % (where, c[1]))
            continue
        for w in c[2:]:
            if w.startswith("-") and w != "-" and not re.match(r"^-[0-9.]", w):
                check(w.split("=")[0] in fl, "%s: `dsv41 %s` has no flag %s (dsv41 %s --help)" % (where, c[1], w, c[1]))
        ok()


# ---- running
env = dict(os.environ)
server, port = None, None


def subst(text):
    text = text.replace("/tmp/", tmp + "/")
    if os.environ.get("DSV41_SHARED"):
        text = text.replace("../shared/", os.environ["DSV41_SHARED"].rstrip("/") + "/")
    text = re.sub(r"(^|[\s;&|(])\./dsv41\b", lambda m: m.group(1) + shlex.quote(dsv41), text, flags=re.M)
    if port:
        text = text.replace("127.0.0.1:8080", "127.0.0.1:%d" % port)
    return text


def exports(text, where):
    """Evaluates the export lines of a block into env; returns the other lines."""
    ex = [l for l in text.split("\n") if l.startswith("export ")]
    rest = [l for l in text.split("\n") if l.strip() and not l.startswith("export ")]
    if ex:
        r = subprocess.run(["bash", "-eu", "-c", subst("\n".join(ex)) + "\nenv -0"], env=env, capture_output=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        if r.returncode:
            bad("%s: its exports failed: %s" % (where, r.stderr.decode()[:300]))
        else:
            env.clear()
            env.update(kv.split("=", 1) for kv in r.stdout.decode().split("\0") if "=" in kv)
            ok()
    return rest


def request(method, url, body=None, headers=None):
    """(status, parsed JSON or text) of one request; at most 300 s."""
    data = json.dumps(body).encode() if body is not None else None
    rq = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}, **{"Content-Type": "application/json"}))
    try:
        with urllib.request.urlopen(rq, timeout=300) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except OSError as e:
        return 0, str(e)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def stop_server():
    global server, port
    if server is None: return
    server.send_signal(signal.SIGTERM)
    try:
        check(server.wait(timeout=20) == 0, "the README's server did not exit 0 after SIGTERM")
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
        bad("the README's server ignored SIGTERM for 20 s")
    server, port = None, None


def start_server(text, where):
    global server, port
    stop_server()
    rest = exports(text, where)
    serve = [l for l in rest if re.match(r"^\./dsv41\s+serve\b", l)]
    if len(serve) != 1 or len(rest) != 1:
        return bad("%s: a server block holds exports and one `./dsv41 serve` line" % where)
    check_commands(serve[0], where)
    line = subst(serve[0])
    line = re.sub(r"\bserve\b", "serve --port 0 -t 1", line, count=1)
    log = os.path.join(tmp, "serve.log")
    with open(log, "w") as err:
        server = subprocess.Popen(["bash", "-c", "exec " + line], env=env, stderr=err, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL)
    for _ in range(600):
        m = re.search(r"^dsv41 serve: .* on http://127\.0\.0\.1:(\d+) ", open(log).read(), re.M)
        if m:
            port = int(m.group(1))
            return ok()
        if server.poll() is not None: break
        time.sleep(0.1)
    bad("%s: the server did not start: %s" % (where, open(log).read()[:300]))
    stop_server()


def run_sh(text, where, want):
    check_commands(text, where)
    try:
        r = subprocess.run(["bash", "-eu", "-o", "pipefail", "-c", subst(text)], env=env, capture_output=True,
                           timeout=600, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return bad("%s: ran past 600 s" % where)
    out = r.stdout.decode("utf-8", "replace")
    if r.returncode:
        return bad("%s: exit %d: %s" % (where, r.returncode, (r.stderr.decode("utf-8", "replace") or out)[-400:]))
    try:
        if isinstance(json.loads(out), dict) and "error" in json.loads(out):
            return bad("%s: answered an error: %s" % (where, out[:300]))
    except ValueError:
        pass
    if want is not None and out.rstrip("\n") != want.rstrip("\n"):
        return bad("%s: printed %r, the README shows %r" % (where, out[:300], want[:300]))
    ok()


def run_python(text, where):
    if os.path.abspath(dsv41) != os.path.abspath("dsv41"):
        print("(%s: Python skipped: %s is not the normal build)" % (where, dsv41))
        return
    e = dict(env, PYTHONPATH="python", DSV41_LIB="build/libdsv41.so")
    try:
        r = subprocess.run(["python3", "-c", subst(text)], env=e, capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return bad("%s: ran past 600 s" % where)
    check(r.returncode == 0, "%s: exit %d: %s" % (where, r.returncode, r.stderr.decode("utf-8", "replace")[-400:]))


def unkeyed(headers, key_names):
    return {k: v for k, v in headers.items() if k not in key_names}


def client(text, where):
    if port is None:
        return bad("%s: a client block before any server block" % where)
    before = dict(env)
    rest = exports(text, where)
    check(all(re.match(r"^[\w-]+$", l.strip()) for l in rest), "%s: besides exports, only a client's name" % where)
    new = {k: v for k, v in env.items() if before.get(k) != v}
    said = False
    if "ANTHROPIC_BASE_URL" in new:
        said = True
        base = env["ANTHROPIC_BASE_URL"].rstrip("/")
        h = {"anthropic-version": "2023-06-01"}
        if env.get("ANTHROPIC_AUTH_TOKEN"): h["Authorization"] = "Bearer " + env["ANTHROPIC_AUTH_TOKEN"]
        if env.get("ANTHROPIC_API_KEY"): h["x-api-key"] = env["ANTHROPIC_API_KEY"]
        body = {"model": env.get("ANTHROPIC_MODEL", ""), "max_tokens": 8, "messages": [{"role": "user", "content": "Hello"}]}
        s, r = request("POST", base + "/v1/messages", body, h)
        check(s == 200 and isinstance(r, dict) and r.get("type") == "message", "%s: POST /v1/messages: %s %s" % (where, s, str(r)[:300]))
        small = dict(body, model=env.get("ANTHROPIC_DEFAULT_HAIKU_MODEL", ""))
        del small["max_tokens"]
        s, r = request("POST", base + "/v1/messages/count_tokens", small, h)
        check(s == 200 and isinstance(r, dict) and r.get("input_tokens", 0) > 0, "%s: count_tokens: %s %s" % (where, s, str(r)[:300]))
        s, r = request("POST", base + "/v1/messages", body, unkeyed(h, ("Authorization", "x-api-key")))
        check(s == 401, "%s: without the key the server answered %s, not 401: the block's key is not tested" % (where, s))
    if "OPENAI_BASE_URL" in new:
        said = True
        base = env["OPENAI_BASE_URL"].rstrip("/")
        h = {"Authorization": "Bearer " + env.get("OPENAI_API_KEY", "")}
        body = {"model": "any", "max_tokens": 8, "messages": [{"role": "user", "content": "Hello"}]}
        s, r = request("POST", base + "/chat/completions", body, h)
        check(s == 200 and isinstance(r, dict) and r.get("choices"), "%s: POST /chat/completions: %s %s" % (where, s, str(r)[:300]))
        s, r = request("GET", base + "/models", None, h)
        check(s == 200 and isinstance(r, dict) and r.get("data"), "%s: GET /models: %s %s" % (where, s, str(r)[:300]))
        s, r = request("POST", base + "/chat/completions", body)
        check(s == 401, "%s: without the key the server answered %s, not 401: the block's key is not tested" % (where, s))
    check(said, "%s: a client block sets neither ANTHROPIC_BASE_URL nor OPENAI_BASE_URL" % where)


def codex(text, where):
    if port is None:
        return bad("%s: a config block before any server block" % where)
    try:
        import tomllib
        cfg = tomllib.loads(text)
    except ImportError:  # python before 3.11: the flat subset this block uses
        cfg, table = {}, None
        for l in text.split("\n"):
            l = l.split("#")[0].strip()
            if l.startswith("["):
                table = cfg.setdefault("model_providers", {}).setdefault(l.strip("[]").split(".", 1)[1], {})
            elif "=" in l:
                k, v = (x.strip() for x in l.split("=", 1))
                (table if table is not None else cfg)[k] = json.loads(v)
    except ValueError as e:
        return bad("%s: not TOML: %s" % (where, e))
    p = cfg.get("model_providers", {}).get(cfg.get("model_provider"), {})
    check(p.get("wire_api") == "responses", "%s: the provider's wire_api is %r, not \"responses\"" % (where, p.get("wire_api")))
    base = subst(p.get("base_url", "")).rstrip("/")
    key = env.get(p.get("env_key", ""), "")
    check(key != "", "%s: env_key names %r, which no block exports" % (where, p.get("env_key")))
    body = {"model": cfg.get("model", ""), "instructions": "You are a coding agent.", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello"}]}],
        "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": {"effort": "medium"}, "store": False,
        "stream": False, "include": ["reasoning.encrypted_content"], "max_output_tokens": 8}
    s, r = request("POST", base + "/responses", body, {"Authorization": "Bearer " + key})
    check(s == 200 and isinstance(r, dict) and r.get("object") == "response", "%s: POST %s/responses: %s %s" % (where, base, s, str(r)[:300]))


try:
    for i, (info, text, n) in enumerate(blocks):
        where = "README.md:%d (```%s)" % (n, info)
        nxt = blocks[i + 1] if i + 1 < len(blocks) else None
        want = nxt[1] if nxt and nxt[0] == "text" else None
        if i == 0:
            check(info == "sh" and text.count("\n") == 2 and text.split("\n")[1] == "make test",
                  "%s: the first block must stay CI's two set-up lines" % where)
            check_commands(text, where)
        elif info == "sh":
            run_sh(text, where, want)
        elif info == "text":
            check(i > 0 and blocks[i - 1][0] == "sh" and i > 1, "%s: a text block follows no run block" % where)
        elif info == "python":
            run_python(text, where)
        elif info == "sh server":
            start_server(text, where)
        elif info == "sh client":
            client(text, where)
        elif info == "toml":
            codex(text, where)
        elif info == "sh real":
            check_commands(text, where)
        else:
            bad("%s: an info string the test does not know (see tests/readme.py)" % where)
finally:
    stop_server()

# ---- the dsv41 commands of the docs' shell blocks: commands dsv41 has, flags their --help names
for doc in sorted(os.listdir("docs")):
    if not doc.endswith(".md"): continue
    fence = None
    for n, line in enumerate(open(os.path.join("docs", doc), encoding="utf-8"), 1):
        if fence is None and line.startswith("```"):
            fence, info, start = [], line[3:].strip(), n
        elif fence is not None and line.rstrip("\n") == "```":
            if info.split(" ")[0] == "sh": check_commands("".join(fence), "docs/%s:%d" % (doc, start))
            fence = None
        elif fence is not None:
            fence.append(line)

# ---- the man page names every flag of every command
man = re.sub(r"\\f[BIRP]", " ", open("docs/dsv41.1", encoding="utf-8").read().replace("\\-", "-"))
r = subprocess.run([dsv41, "--help"], capture_output=True, text=True, timeout=60)
commands = re.findall(r"^  ([a-z]+)  ", r.stdout, re.M)
check(len(commands) >= 10, "dsv41 --help lists %d commands" % len(commands))
for c in commands:
    check(re.search(r"^\.B %s\b" % c, man, re.M) is not None, "docs/dsv41.1 does not describe the command %s" % c)
    for f in sorted((flags_of(c) or set()) - {"-h"}):  # --help stands for both
        check(re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(f), man) is not None, "docs/dsv41.1 does not name `dsv41 %s %s`" % (c, f))

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
