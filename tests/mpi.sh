#!/bin/sh
# mpi.sh - dsv41-mpi on 2 and 3 ranks of one host: the golden passes, checkpoints decode the
# single process's tokens, every rank reads only its own experts, Engram rows and head rows
# (the other ranks' are corrupted in its copy of the checkpoint, and the tokens must not
# change; corrupting its own must change them), speculative decoding (--draft) emits the single
# process's tokens, serve answers one slot's requests (prompt cache, reset, slot files) with one
# process's replies, and a rank that cannot load the model, loads another one or dies ends the
# whole job with an error instead of a hang. Split by rows (--split rows: every dense projection
# cut by output rows too) the same runs give the same bits on 2 and 3 ranks (3 divides few of the
# tiny model's row counts, and leaves a rank without a row of the 2-row indexer weights), chat
# saves and restores a conversation, each rank reads only its rows, and reads at most 55% (2
# ranks) or 40% (3 ranks) of one process's weight bytes per decoded token.
# Needs ./dsv41, ./dsv41-mpi and build/mpi_draft (make test-mpi builds them) and Open MPI's mpirun. Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_start.sh"
golden=${DSV41_GOLDEN:-${DSV41_SHARED:-../shared}/golden/ds41_tiny_golden.json}
if [ ! -f "$golden" ] || [ ! -x ./dsv41-mpi ] || [ ! -x build/mpi_draft ] || ! command -v mpirun >/dev/null; then
    bad "needs $golden, ./dsv41-mpi, build/mpi_draft and mpirun"; finish; exit 1
fi
# shared memory between the ranks, without the cross-process copy containers often forbid; ranks
# that wait yield their core (this host has fewer cores than ranks and other jobs)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
    OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
mpi() { timeout 120 mpirun --oversubscribe "$@"; }

for k in 2 3; do
    for split in experts rows; do
        last=$(mpi -np $k ./dsv41-mpi check "$golden" -t 1 --split $split 2>&1 | tail -n 1)
        [ "$last" = "443 passed, 0 failed" ] && ok || bad "check on $k ranks split by $split: '$last'"
    done
done

./dsv41 convert --golden "$golden" --dtype bf16 -o "$tmp/bf16" && ./dsv41 convert --golden "$golden" --dtype fp8 -o "$tmp/fp8" ||
    { bad "convert"; finish; exit 1; }
last=$(mpi -np 2 ./dsv41-mpi check "$golden" -m "$tmp/bf16" -t 1 2>&1 | tail -n 1)
[ "$last" = "443 passed, 0 failed" ] && ok || bad "check -m on 2 ranks: '$last'"

# a prompt longer than one op carries inline (27 ids), then decode steps
ids=2,17,47,5,9,33,61,12,8,40,3,27,50,19,44,6,31,58,11,36,24,1,63,15,29,42,7,55,20,38
want=$(./dsv41 run -m "$tmp/fp8" --ids $ids -n 16 -t 1 | head -n 1)
[ -n "$want" ] && ok || bad "single-process run"
for k in 2 3; do
    for split in experts rows; do
        got=$(mpi -np $k ./dsv41-mpi run -m "$tmp/fp8" --ids $ids -n 16 -t 1 --split $split 2>"$tmp/err" | head -n 1)
        [ "$got" = "$want" ] && ok || bad "run on $k ranks split by $split: '$got', one process: '$want' ($(head -c 300 "$tmp/err"))"
    done
done

# the text commands: rank 0 reads stdin (mpirun forwards it there), samples and prints
chat_model "$tmp/chat" || bad "synth the chat model"
single=$(./dsv41 run -m "$tmp/chat" -p "hello" -n 12 --temp 0.9 --seed 7 -t 1 2>/dev/null)
for split in experts rows; do
    ranks=$(mpi -np 3 ./dsv41-mpi run -m "$tmp/chat" -p "hello" -n 12 --temp 0.9 --seed 7 -t 1 --split $split 2>/dev/null)
    [ -n "$single" ] && [ "$ranks" = "$single" ] && ok || bad "run -p on 3 ranks split by $split: '$ranks', one process: '$single'"
done
printf 'hello\nhow are you\n/reset\nand again\n/quit\n' >"$tmp/turns"
single=$(./dsv41 chat -m "$tmp/chat" -n 10 --temp 0 -t 1 <"$tmp/turns" 2>/dev/null)
ranks=$(mpi -np 2 ./dsv41-mpi chat -m "$tmp/chat" -n 10 --temp 0 -t 1 <"$tmp/turns" 2>/dev/null)
[ -n "$single" ] && [ "$ranks" = "$single" ] && ok || bad "chat on 2 ranks: '$ranks', one process: '$single'"
# split by rows, a conversation saved, continued, restored and continued again (sampled)
printf 'hello\n/save %s\nhow are you\n/load %s\nand again\n/quit\n' "$tmp/conv" "$tmp/conv" >"$tmp/turns"
single=$(./dsv41 chat -m "$tmp/chat" -n 10 --temp 0.9 --seed 3 -t 1 <"$tmp/turns" 2>/dev/null)
for k in 2 3; do
    ranks=$(mpi -np $k ./dsv41-mpi chat -m "$tmp/chat" -n 10 --temp 0.9 --seed 3 -t 1 --split rows <"$tmp/turns" 2>/dev/null)
    [ -n "$single" ] && [ "$ranks" = "$single" ] && ok || bad "chat with /save and /load on $k ranks split by rows: '$ranks', one process: '$single'"
done

# serve on 2 ranks with one slot answers request after request as one process does: a cold
# prompt, a prompt extending it (its tokens cached), the first prompt again (copied back from the
# prompt cache's snapshot), another prompt (the session reset), a slot saved, a damaged file refused
# (by rank 0 before any op: the job goes on), the slot changed, restored and extended.
# served NAME CMD...: the server CMD's replies in $tmp/NAME.1 to $tmp/NAME.9 (shell only: a
# python start takes a second on a busy host)
served() {
    name=$1 i=0 program=$dsv41; shift
    rm -rf "$tmp/slots"; mkdir -p "$tmp/slots"; echo damaged >"$tmp/slots/bad.slot"
    dsv41="timeout 120 $*" m=$tmp/chat
    start "$name" -np 1 --slot-save-path "$tmp/slots"
    dsv41=$program
    post() { i=$((i + 1)); curl -s -m 60 -o "$tmp/$name.$i" "http://127.0.0.1:$port$1" --data-binary "$2" -H 'Content-Type: application/json'; }
    complete() { post /v1/completions "{\"prompt\":$1,\"max_tokens\":8,\"temperature\":0,\"return_tokens\":true}"; }
    # plus IDS: IDS, the last reply's tokens and 3 more
    plus() { echo "${1%]},$(sed -n 's/.*"tokens":\[\([^]]*\)\].*/\1/p' "$tmp/$name.$i"),40,41,42]"; }
    P="[$ids]" Q='[72, 101, 108, 108, 111]' # Q's reply holds only ids of the tokenizer
    complete "$P"; ext=$(plus "$P")
    complete "$ext"
    complete "$P"
    complete "$Q"; qext=$(plus "$Q")
    post '/slots/0?action=save' '{"filename":"s.slot"}'
    post '/slots/0?action=restore' '{"filename":"bad.slot"}'
    complete "$ext"
    post '/slots/0?action=restore' '{"filename":"s.slot"}'
    complete "$qext"
    kill -TERM $pid; wait $pid
}
served one ./dsv41
served ranks mpirun --oversubscribe -np 2 ./dsv41-mpi
served rows mpirun --oversubscribe -np 2 ./dsv41-mpi --split rows
for name in ranks rows; do
python3 - "$tmp" $name <<'PY' && ok || bad "serve on 2 ranks ($name): $(head -c 300 "$tmp/$name.log")"
import json, sys
def replies(name):
    out = []
    for i in range(1, 10):
        try:
            r = json.load(open("%s/%s.%d" % (sys.argv[1], name, i), encoding="utf-8"))
        except Exception as e:
            r = "no reply: %s" % e
        if isinstance(r, dict): r.pop("timings", None)
        out.append(r)
    return out
one, ranks = replies("one"), replies(sys.argv[2])
cached = [r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in one if "usage" in r]
assert cached == [0, 37, 30, 0, 41, 12], "one process: cached tokens %s, want [0, 37, 30, 0, 41, 12]" % cached
for i, (a, b) in enumerate(zip(one, ranks)):
    if "id" in a: a.pop("id"), b.pop("id", None); a.pop("created"), b.pop("created", None)
    assert a == b, "reply %d: one process %s, 2 ranks %s" % (i + 1, json.dumps(a)[:300], json.dumps(b)[:300])
PY
done

# speculative decoding, on the tiny model with DSpark stages: --draft 3 on ranks prints the ids of
# one process without drafts (greedy, and sampled with a seed), and the leader alone prints the
# counts of drafts and accepted ones, the same as one process's
./dsv41 synth --config models/tiny_dspark.json -o "$tmp/draft" --dtype fp8 >/dev/null || bad "synth the model with stages"
for k in 2 3 s3 r2 rs3; do
    opts= split=
    case $k in r*) split="--split rows" k=${k#r};; esac
    [ $k = s3 ] && k=3 opts="--temp 0.9 --seed 7"
    plain=$(./dsv41 run -m "$tmp/draft" --ids $ids -n 16 -t 1 $opts 2>/dev/null)
    single=$(./dsv41 run -m "$tmp/draft" --ids $ids -n 16 -t 1 --draft 3 $opts 2>&1 >/dev/null | grep '^speculative:')
    got=$(mpi -np $k ./dsv41-mpi run -m "$tmp/draft" --ids $ids -n 16 -t 1 --draft 3 $opts $split 2>"$tmp/err")
    counts=$(grep '^speculative:' "$tmp/err")
    [ -n "$plain" ] && [ "$got" = "$plain" ] && printf '%s' "$single" | grep -q ' [1-9][0-9]* drafts' && [ "$counts" = "$single" ] && ok ||
        bad "--draft 3 $opts $split on $k ranks: '$got' and '$counts', one process: '$plain' and '$single' ($(head -c 300 "$tmp/err"))"
done

# the drafts themselves (ids, the bits of their logits and confidence) and verifies of forced
# drafts, alone and in a batch, checked against greedy decoding (tests/mpi_draft.c): on 2 and 3
# ranks, one process's lines
one=$(mpi -np 1 build/mpi_draft "$tmp/draft" 2>"$tmp/err") && [ -n "$one" ] && ok || bad "mpi_draft in one process: $(head -c 300 "$tmp/err")"
for k in 2 3; do
    for split in experts rows; do
        got=$(mpi -np $k build/mpi_draft "$tmp/draft" --split $split 2>"$tmp/err")
        [ -n "$one" ] && [ "$got" = "$one" ] && ok || bad "mpi_draft on $k ranks split by $split differs from one process ($(head -c 300 "$tmp/err"))"
    done
done

# corrupt DIR RANK K others|own|owndense [rows]: overwrite what rank RANK of K does not own
# (experts, Engram table rows, head rows but row 0, which the load's fingerprint samples; split
# by rows also the dense projections' rows but row 0), or its own experts, or (split by rows) its
# own rows of the dense projections (but row 0). The shares are restated here: [n r / K, n (r+1) / K) of
# each, of each output group's rows for wo_a; the indexer's wk stays whole on every rank.
corrupt() { python3 - "$@" <<'PY'
import json, os, re, struct, sys
d, rank, K, what = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows_split = sys.argv[5:] == ["rows"]
own = lambda i, n: n * rank // K <= i < n * (rank + 1) // K
wmap = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
E = 1 + max(int(m.group(1)) for m in (re.search(r"experts\.(\d+)\.", k) for k in wmap) if m)
orank = json.load(open(os.path.join(d, "config.json")))["text_config"]["o_lora_rank"]
dense = re.compile(r"\.(attn\.(wq_a|wq_b|wkv|wo_a|wo_b|compressor\.wkv|compressor\.wgate|indexer\.wq_b|"
                   r"indexer\.weights_proj)\.weight|ffn\.gate\.weight|shared_experts\.w[123]\.weight|hc_(attn|ffn)_fn|"
                   r"engram\.wkv\.weight)$")
def own_row(name, r, rows):
    return own(r % orank, orank) if name.endswith("wo_a.weight") else own(r, rows)
for shard in sorted(set(wmap.values())):
    path = os.path.join(d, shard)
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        for name, t in hdr.items():
            if name == "__metadata__" or not (name.endswith(".weight") or dense.search(name)): continue
            b, e = t["data_offsets"]
            rows = t["shape"][0]
            per = (e - b) // rows
            m = re.search(r"experts\.(\d+)\.", name)
            if rows_split and dense.search(name):
                bad = [r for r in range(1, rows) if own_row(name, r, rows) == (what == "owndense")]
            elif what == "owndense": continue
            elif m: bad = [r for r in range(rows) if own(int(m.group(1)), E) == (what == "own")]
            elif what == "own": continue
            elif name.endswith("engram.embed.weight"): bad = [r for r in range(rows) if not own(r, rows)]
            elif name == "head.weight": bad = [r for r in range(1, rows) if not own(r, rows)]
            else: continue
            for r in bad:
                f.seek(8 + n + b + r * per)
                f.write(b"\x55" * per)
PY
}
# ranks 0 (and 2) read a/m, rank 1 reads b/m: the same path for each, other bytes
# (split by rows: rank 0's command line says so, the others follow its load)
for k in 2 3; do
    for what in others own rows:others rows:owndense; do
        split=experts; case $what in rows:*) split=rows what=${what#rows:};; esac
        rm -rf "$tmp/a" "$tmp/b"; mkdir -p "$tmp/a" "$tmp/b"
        cp -r "$tmp/fp8" "$tmp/a/m" && cp -r "$tmp/fp8" "$tmp/b/m" && corrupt "$tmp/b/m" 1 $k $what $split || { bad "corrupt"; continue; }
        third=; [ $k -eq 3 ] && third=": -np 1 --wdir $tmp/a $PWD/dsv41-mpi"
        got=$(eval mpi -np 1 --wdir "$tmp/a" "$PWD/dsv41-mpi" run -m m --ids $ids -n 16 -t 1 --split $split : -np 1 --wdir "$tmp/b" "$PWD/dsv41-mpi" $third 2>"$tmp/err" | head -n 1)
        if [ $what = others ]; then
            [ "$got" = "$want" ] && ok || bad "$k ranks split by $split, rank 1 with the others' shares corrupted: '$got', want '$want' ($(head -c 300 "$tmp/err"))"
        else
            [ -n "$got" ] && [ "$got" != "$want" ] && ok || bad "$k ranks split by $split, rank 1 with its own $what corrupted still gave '$got'"
        fi
    done
done

# peak resident memory: each rank touches only its share, so on 2 ranks the larger one stays
# under 80% of one process on a model that is mostly experts (64 of inter 4096, 159 MB)
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c.update(n_routed_experts=64, n_activated_experts=6, moe_inter_dim=4096); json.dump(c, open(sys.argv[2], "w"))' \
    models/tiny.json "$tmp/big.json" && ./dsv41 synth --config "$tmp/big.json" -o "$tmp/big" --dtype fp8 || bad "synth the memory model"
# each process writes its children's peak to a file of its own (named by its Open MPI rank, 0
# outside mpirun): on the stderr mpirun forwards, the ranks' lines can interleave mid-line
peak='import os, resource, subprocess, sys; rc = subprocess.call(sys.argv[2:]); open(sys.argv[1] + "." + os.environ.get("OMPI_COMM_WORLD_RANK", "0"), "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)'
rm -f "$tmp"/peak1.* "$tmp"/peak2.* "$tmp"/peakr.*
python3 -c "$peak" "$tmp/peak1" ./dsv41 run -m "$tmp/big" --ids $ids,13,21,34,45,52,60,4,16,23,37 -n 8 -t 1 >/dev/null 2>&1
mpi -np 2 python3 -c "$peak" "$tmp/peak2" ./dsv41-mpi run -m "$tmp/big" --ids $ids,13,21,34,45,52,60,4,16,23,37 -n 8 -t 1 >/dev/null 2>&1
mpi -np 2 python3 -c "$peak" "$tmp/peakr" ./dsv41-mpi run -m "$tmp/big" --ids $ids,13,21,34,45,52,60,4,16,23,37 -n 8 -t 1 --split rows >/dev/null 2>&1
one=$(cat "$tmp"/peak1.0 2>/dev/null)
two=$([ -f "$tmp/peak2.0" ] && [ -f "$tmp/peak2.1" ] && cat "$tmp"/peak2.* | sort -n | tail -n 1)
rows=$([ -f "$tmp/peakr.0" ] && [ -f "$tmp/peakr.1" ] && cat "$tmp"/peakr.* | sort -n | tail -n 1)
[ -n "$one" ] && [ -n "$two" ] && [ $((two * 100)) -le $((one * 80)) ] && ok ||
    bad "peak memory: one process $one KB, largest of 2 ranks $two KB (want at most 80%)"
# split by rows a rank also holds only its rows of the dense part and of the embedding
[ -n "$one" ] && [ -n "$rows" ] && [ $((rows * 100)) -le $((one * 80)) ] && ok ||
    bad "peak memory split by rows: one process $one KB, largest of 2 ranks $rows KB (want at most 80%)"
echo "peak resident memory: one process $one KB, largest of 2 ranks $two KB split by experts, $rows KB by rows"

# failures: one "dsv41: " line from rank 0 naming the rank, a non-zero exit, no hang
fails() { # NAME PATTERN: runs the mpirun command after them
    name=$1 pattern=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?
    line=$(grep '^dsv41: ' "$tmp/err")
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(printf '%s\n' "$line" | wc -l)" -eq 1 ] && printf '%s' "$line" | grep -q "$pattern"; then ok
    else bad "$name: rc=$rc, '$(head -c 400 "$tmp/err")'"; fi
}
rm -rf "$tmp/a" "$tmp/b"; mkdir -p "$tmp/a" "$tmp/b"
cp -r "$tmp/fp8" "$tmp/a/m" && cp -r "$tmp/bf16" "$tmp/b/m"
fails "another model on rank 1" "rank 1 loaded a different model" \
    mpi -np 1 --wdir "$tmp/a" "$PWD/dsv41-mpi" run -m m --ids 1,2 -n 2 : -np 1 --wdir "$tmp/b" "$PWD/dsv41-mpi"
rm -rf "$tmp/b/m"
fails "no model on rank 1" "rank 1: .*config.json" \
    mpi -np 1 --wdir "$tmp/a" "$PWD/dsv41-mpi" run -m m --ids 1,2 -n 2 : -np 1 --wdir "$tmp/b" "$PWD/dsv41-mpi"
fails "bad input on rank 0" "token id 99" mpi -np 2 ./dsv41-mpi run --ids 1,99 -n 2

# a follower killed in the middle of a benchmark: the job ends, non-zero, within the timeout
descendants() { for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
mpi -np 2 ./dsv41-mpi bench -m "$tmp/fp8" -t 1 >"$tmp/out" 2>"$tmp/err" &
job=$!
follower=
for i in $(seq 50); do
    sleep 0.2
    for p in $(descendants $job); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && follower=$p
    done
    [ -n "$follower" ] && break
done
[ -n "$follower" ] && sleep 1 && kill -9 "$follower"
wait $job; rc=$?
[ -n "$follower" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && ok || bad "killed follower: rc=$rc, follower '$follower'"

# the benchmark's per-rank lines, on a run left alone; with --draft its verifies of drafts forced
# to the target's own tokens must keep them all (else it fails)
out=$(mpi -np 2 ./dsv41-mpi bench -m "$tmp/draft" -t 1 --draft 3 --json 2>&1 | tail -n 1)
printf '%s' "$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
r = j["ranks"]
assert len(r) == 2 and all(x["sent_bytes_per_token"] > 0 and x["weight_bytes_per_token"] > 0 for x in r)
assert j["speculative"]["draft"] == 3' && ok ||
    bad "bench on 2 ranks: '$out'"
# split by rows each rank reads about 1/K of what one process reads per decoded token (the
# embedding row and the indexer's wk stay whole on every rank): at most 55% on 2 ranks, 40% on 3
whole=$(./dsv41 inspect "$tmp/fp8" | sed -n 's/^one decoded token reads \([0-9]*\) bytes.*/\1/p')
for k in 2 3; do
    out=$(mpi -np $k ./dsv41-mpi bench -m "$tmp/fp8" -t 1 --split rows --json 2>&1 | tail -n 1)
    printf '%s' "$out" | python3 -c '
import json, sys
whole, k, r = float(sys.argv[1]), int(sys.argv[2]), json.load(sys.stdin)["ranks"]
limit = {2: 0.55, 3: 0.40}[k]
print("split by rows on %d ranks: weight bytes per token per rank %s of %d (%s), %s all-gathers per token, one %s us" %
      (k, [x["weight_bytes_per_token"] for x in r], whole, ["%.1f%%" % (100 * x["weight_bytes_per_token"] / whole) for x in r],
       r[0]["allgathers_per_token"], ["%.1f" % (1e6 * x["allgather_s"]) for x in r]))
assert len(r) == k and all(0 < x["weight_bytes_per_token"] <= limit * whole for x in r)' "$whole" $k && ok ||
        bad "bench on $k ranks split by rows: '$out' (one process reads $whole bytes)"
done
finish
