# serve_start.sh - start(), for the scripts that test a server (after lib.sh): serve_lib.sh, and
# mpi.sh, which serves on ranks. Sourcing it starts and builds nothing.

# start NAME ARGS...: `$dsv41 serve -m $m --port 0 -t 1 ARGS` in the background ($dsv41 may be a
# command line, a launcher before the program); sets $port and $pid, adds $pid to $pids (log in
# $tmp/NAME.log). A minute for the port: ranks under mpirun start slowly on a busy host.
start() {
    name=$1; shift
    $dsv41 serve -m "$m" --port 0 -t 1 "$@" 2>"$tmp/$name.log" &
    pid=$!; pids="$pids $pid"; port=""
    for _ in $(seq 600); do
        port=$(sed -n 's|^dsv41 serve: .* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$tmp/$name.log")
        [ -n "$port" ] && return 0
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
    done
    bad "$name: the server did not start: $(head -c 300 "$tmp/$name.log")"
    return 1
}
