#!/bin/sh
# links.sh - every relative link in README.md and docs/*.md points at a file of the repository,
# and a link's #anchor at a heading of that file (GitHub's slugs: lower case, punctuation dropped,
# spaces to hyphens, a repeated heading numbered -1, -2, ...). Links in code are not links; web
# links are not fetched. Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
python3 - README.md docs/*.md <<'PY'
import os, re, sys
passed = failed = 0
def slugs(path):
    seen, out, fence = {}, set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"): fence = not fence
        m = None if fence else re.match(r"^#{1,6} +(.*?) *#* *$", line)
        if not m: continue
        s = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(s, 0); seen[s] = n + 1
        out.add(s if n == 0 else "%s-%d" % (s, n))
    return out
for path in sys.argv[1:]:
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)   # code blocks
    text = re.sub(r"`[^`\n]*`", "", text)                          # code spans
    for target in re.findall(r"\]\(([^)\s]*)(?: \"[^\"]*\")?\)", text):
        if re.match(r"^[a-z]+:", target): continue                # http:, https:, mailto:
        if target in ("", "#"):
            failed += 1; print("FAIL: %s: a link to nowhere: (%s)" % (path, target)); continue
        file, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(dest):
            failed += 1; print("FAIL: %s: %s: no file %s" % (path, target, dest)); continue
        if anchor and not (dest.endswith(".md") and anchor in slugs(dest)):
            failed += 1; print("FAIL: %s: %s: no heading #%s in %s" % (path, target, anchor, dest)); continue
        passed += 1
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
