#!/usr/bin/env bash
# make test: every tier in turn, stopping at the first that fails, then how long each took
# (also when one failed, so that the end of a CI log says where the time went).
# usage: scripts/test-tiers.sh TIER...   (make targets)
set -uo pipefail
times=()
status=0
rm -f build/molecule-times
for tier in "$@"; do
    start=$(date +%s)
    make --no-print-directory "$tier"
    status=$?
    times+=("$(printf '%-16s %5ds' "$tier" $(( $(date +%s) - start )))$( \
        [ "$status" -ne 0 ] && printf '  FAILED')")
    [ "$status" -ne 0 ] && break
done
echo
echo "== test tiers (seconds)"
printf '%s\n' "${times[@]}"
if [ -s build/molecule-times ]; then
    echo "== molecule scenarios (seconds)"
    cat build/molecule-times
fi
exit "$status"
