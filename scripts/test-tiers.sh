#!/usr/bin/env bash
# make test: the test tiers in lanes that run at the same time, then how long each tier took
# (also when one failed, so that the end of a CI log says where the time went).
#
# usage: scripts/test-tiers.sh LANE...
#   LANE   make targets joined by commas, run one after another; the lanes run side by side.
#          A lane written nice:TIERS runs under nice 19, so it only takes the CPU time the
#          other lanes leave idle (their tests keep their timing). Each lane is a session of
#          its own, and where the kernel schedules each session as a group (autogroup), a
#          process's nice value counts only inside its group: the lane sets its group's too.
#          scripts/test-tiers.sh unit-all,lint runs those two, one after the other.
#
# Each tier's output goes to build/tiers/TIER.log and is printed whole when the tier ends, one
# tier at a time, so that lanes do not interleave their lines. Every tier runs, also after one
# failed (the lanes run at the same time anyway); the exit status is 0 when every tier passed.
# Every TIERS_HEARTBEAT seconds (300) a line says which tiers are still running.
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS=build/tiers
PRINT_LOCK=$LOGS/.print

# One lane (run by the main script, in a process group of its own): its tiers in turn.
if [ "${1:-}" = --lane ]; then
    niceness=$(nice)
    if [ "$niceness" -gt 0 ] && [ -w /proc/$$/autogroup ]; then
        echo "$niceness" > /proc/$$/autogroup 2>/dev/null || true
    fi
    IFS=, read -r -a tiers <<< "$2"
    failed=0
    for tier in "${tiers[@]}"; do
        start=$(date +%s)
        { flock 9; echo "== $tier started ($(date +%T))"; } 9>"$PRINT_LOCK"
        make --no-print-directory "$tier" > "$LOGS/$tier.log" 2>&1 < /dev/null
        status=$?
        seconds=$(( $(date +%s) - start ))
        echo "$status $seconds" > "$LOGS/$tier.status"
        word=passed; [ "$status" -ne 0 ] && word="FAILED (exit $status)"
        {
            flock 9
            echo "== $tier: output"
            cat "$LOGS/$tier.log"
            echo "== $tier $word in ${seconds}s"
        } 9>"$PRINT_LOCK"
        [ "$status" -ne 0 ] && failed=1
    done
    exit "$failed"
fi

if [ $# -eq 0 ]; then
    echo "usage: $0 LANE... (a lane: make targets joined by commas, nice:TIERS for nice 19)" >&2
    exit 2
fi
mkdir -p "$LOGS"
rm -f build/molecule-times "$LOGS"/*.log "$LOGS"/*.status
: > "$PRINT_LOCK"

begin=$(date +%s)
pids=()
all=()
for lane in "$@"; do
    prefix=()
    case $lane in
        nice:*) lane=${lane#nice:}; prefix=(nice -n 19) ;;
    esac
    IFS=, read -r -a tiers <<< "$lane"
    all+=("${tiers[@]}")
    # setsid: the lane is a process group of its own, so that an interrupt can end all of it.
    setsid "${prefix[@]}" "$0" --lane "$lane" &
    pids+=($!)
done

# A tier's output comes whole when it ends, so a long one (integration) is silent for many
# minutes: say every 5 minutes which tiers are still running, for CI logs and the people
# watching them.
(
    while sleep "${TIERS_HEARTBEAT:-300}"; do
        running=$(for t in "${all[@]}"; do [ -f "$LOGS/$t.log" ] && [ ! -f "$LOGS/$t.status" ] \
            && printf '%s ' "$t"; done)
        { flock 9; echo "== $(date +%T) still running: ${running:-(starting)}"; } 9>"$PRINT_LOCK"
    done
) &
heartbeat=$!

stop_lanes() {
    for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done
}
trap 'stop_lanes; interrupted=1' INT TERM
interrupted=0
for pid in "${pids[@]}"; do
    # wait returns early when a trapped signal arrives: wait again for the lane to be gone.
    while ! wait "$pid" && kill -0 "$pid" 2>/dev/null; do :; done
done

kill "$heartbeat" 2>/dev/null
wait "$heartbeat" 2>/dev/null
status=0
echo
echo "== test tiers (seconds)"
for tier in "${all[@]}"; do
    if [ -f "$LOGS/$tier.status" ]; then
        read -r rc seconds < "$LOGS/$tier.status"
        printf '%-16s %5ds%s\n' "$tier" "$seconds" "$([ "$rc" -ne 0 ] && printf '  FAILED')"
        [ "$rc" -ne 0 ] && status=1
    else
        printf '%-16s %6s  (interrupted)\n' "$tier" "-"
        status=1
    fi
done
printf '%-16s %5ds  (wall time, %d lanes side by side)\n' "all" $(( $(date +%s) - begin )) "$#"
if [ -s build/molecule-times ]; then
    echo "== molecule scenarios (seconds)"
    cat build/molecule-times
fi
# What failed, by name, at the very end, so that a CI log that keeps only its tail still says
# it: pytest's short summary lines, or else the failed tier's last lines.
for tier in "${all[@]}"; do
    [ -f "$LOGS/$tier.status" ] || continue
    read -r rc seconds < "$LOGS/$tier.status"
    [ "$rc" -ne 0 ] || continue
    echo "== $tier: what failed"
    grep -E '^(FAILED|ERROR) |^=+ .*[0-9]+ (failed|error)' "$LOGS/$tier.log" | tail -n 40 \
        | grep . || tail -n 15 "$LOGS/$tier.log"
done
[ "$interrupted" -eq 1 ] && exit 130
exit "$status"
