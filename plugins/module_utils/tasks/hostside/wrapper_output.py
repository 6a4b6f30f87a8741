# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job wrapper's part that keeps the job's output on the host (section 0 of
tasks.hostside.wrapper's script): the tees to ``state/output.log``, its rotation and the
offsets ``gpufleet logs --since`` reads (tasks.hostside.logside). Shell text, joined into the
wrapper's script where the section stands.
"""

from __future__ import annotations

OUTPUT = r"""# --- 0. the job's output, kept on the host ----------------------------------------------------
# Everything the job prints, this wrapper's own messages included, goes to the container's
# output (docker logs) and to state/output.log, which lives on the host beside the job's state,
# so gpufleet logs reads it after the container is gone (tasks/hostside/logside.py). Standard output and
# standard error each pass through a tee (docker keeps them apart); both append to one file, as
# a terminal shows them. The keeper (below) copies output.log to output.log.1 and empties it
# once it passes half of GPUFLEET_LOGS_MAX_MB (100), and notes "EPOCH OFFSET" lines in
# output.idx for --since: OFFSET counts every byte written since the job began. output.base
# holds "BASE1 BASE" (the offsets where output.log.1 and output.log begin). Only root reads
# them. Images without tee or mkfifo keep only docker's copy.
_gf_tee_out=
_gf_tee_err=
_gf_keeper=
_gf_capture() {
    command -v tee > /dev/null 2>&1 && command -v mkfifo > /dev/null 2>&1 || return 0
    mkdir -p "$DSTACK_DIR" 2>/dev/null
    _gf_log_file=$GPUFLEET_STATE/output.log
    ( umask 077; : >> "$_gf_log_file" ) 2>/dev/null || return 0
    for _gf_s in out err; do
        _gf_fifo=$DSTACK_DIR/.output-$_gf_s.$$
        rm -f "$_gf_fifo"
        mkfifo -m 600 "$_gf_fifo" 2>/dev/null || return 0
        # Both ends are opened here, before the FIFO's name goes: fd 9 holds the pipe open
        # both ways, so that neither open waits for the other; tee gets its end as fd 8.
        exec 9<> "$_gf_fifo"
        exec 8< "$_gf_fifo"
        if [ "$_gf_s" = out ]; then
            tee -a "$_gf_log_file" <&8 8<&- 9>&- &
            _gf_tee_out=$!
            exec > "$_gf_fifo"
        else
            tee -a "$_gf_log_file" <&8 >&2 8<&- 9>&- &
            _gf_tee_err=$!
            exec 2> "$_gf_fifo"
        fi
        exec 8<&- 9>&-
        rm -f "$_gf_fifo"
    done
    ( umask 077
      printf '0 0\n' > "$GPUFLEET_STATE/output.base"
      printf '%s 0\n' "$(date +%s)" > "$GPUFLEET_STATE/output.idx" )
}

# _gf_size FILE: its size in bytes (empty when it cannot be read).
_gf_size() {
    set -- $(ls -ln "$1" 2>/dev/null)
    printf '%s' "$5"
}

# The keeper: once a second, a note of how much was written (when it grew: the moment before
# and now), and the rotation. A TERM cuts its sleep short (a trapped signal ends a wait at
# once), then it makes its last note and stops (see _gf_drain): a job's end used to wait out
# the rest of the keeper's second, up to a second on every job.
_gf_keep_output() {
    umask 077
    _gf_quit=
    trap '_gf_quit=1' TERM
    _gf_cap=${GPUFLEET_LOGS_MAX_MB:-100}
    while [ "${_gf_cap#0}" != "$_gf_cap" ]; do _gf_cap=${_gf_cap#0}; done
    case $_gf_cap in
        '') _gf_cap=1 ;;                     # 0: the least there is, 1 MB
        *[!0-9]*) _gf_cap=100 ;;
        ?????????*) _gf_cap=10000000 ;;      # 10 TB: the arithmetic stays in 64 bits
    esac
    _gf_half=$(( _gf_cap * 524288 ))
    _gf_lf=$GPUFLEET_STATE/output.log
    _gf_idx=$GPUFLEET_STATE/output.idx
    _gf_b1=0
    _gf_base=0
    _gf_then=$(date +%s)
    _gf_total=0
    _gf_was=0
    while [ -z "$_gf_quit" ]; do
        sleep 1 < /dev/null > /dev/null 2>&1 &
        wait $! || kill $! 2>/dev/null
        _gf_now=$(date +%s)
        _gf_sz=$(_gf_size "$_gf_lf")
        [ -n "$_gf_sz" ] || continue
        if [ $(( _gf_base + _gf_sz )) != "$_gf_total" ]; then
            # What was written by the last tick was written before it; the rest after.
            _gf_total=$(( _gf_base + _gf_sz ))
            printf '%s %s\n%s %s\n' "$_gf_then" "$_gf_was" "$_gf_now" "$_gf_total" \
                >> "$_gf_idx"
        fi
        _gf_was=$_gf_total
        _gf_then=$_gf_now
        if [ "$_gf_sz" -gt "$_gf_half" ]; then
            # Copy, then empty at once: what is written between the two is lost (as with
            # logrotate's copytruncate), and only a shell builtin runs between them. The new
            # bases are written right after; readers check output.log.1's size against them
            # (tasks/hostside/logside.py) and wait out the moment until it is in place.
            cp "$_gf_lf" "$_gf_lf.1.tmp" 2>/dev/null || continue
            : > "$_gf_lf"
            _gf_copied=$(_gf_size "$_gf_lf.1.tmp")
            _gf_b1=$_gf_base
            _gf_base=$(( _gf_base + ${_gf_copied:-0} ))
            printf '%s %s\n' "$_gf_b1" "$_gf_base" > "$GPUFLEET_STATE/output.base"
            mv -f "$_gf_lf.1.tmp" "$_gf_lf.1"
            mv -f "$_gf_idx" "$_gf_idx.1"
            printf '%s %s\n' "$_gf_now" "$_gf_base" > "$_gf_idx"
            _gf_total=$_gf_base
            _gf_was=$_gf_total
        elif [ "$(_gf_size "$_gf_idx")" -gt 4194304 ] 2>/dev/null; then
            mv -f "$_gf_idx" "$_gf_idx.1"   # a long job that prints a little, all the time
        fi
    done
}

# At the end: stop the keeper (it makes its last note first), let both tees write what is still
# in their pipes (at most 2 seconds, in case a process the job left behind holds a pipe open),
# then note where the output ended. Signals no longer interrupt this.
_gf_drain() {
    [ -n "$_gf_tee_out$_gf_tee_err" ] || return 0
    trap '' TERM INT
    if [ -n "$_gf_keeper" ]; then
        # A TERM that reaches the keeper before it has set its own trap is lost: the subshell
        # takes it under the trap it inherited, then drops it as it resets its traps (dash and
        # busybox alike; a job that fails at once hit it). So it is sent again each second,
        # and KILL ends the keeper after three. Timers started from here ignore TERM (the trap
        # above is inherited): they are stopped with KILL.
        kill "$_gf_keeper" 2>/dev/null
        ( for _gf_x in 1 2 3; do sleep 1; kill "$_gf_keeper" || exit 0; done
          kill -KILL "$_gf_keeper" ) > /dev/null 2>&1 &
        _gf_timer=$!
        wait "$_gf_keeper" 2>/dev/null
        kill -KILL "$_gf_timer" 2>/dev/null
    fi
    exec > /dev/null 2>&1
    ( sleep 2; kill $_gf_tee_out $_gf_tee_err ) > /dev/null 2>&1 &
    _gf_timer=$!
    for _gf_t in $_gf_tee_out $_gf_tee_err; do
        wait "$_gf_t" 2>/dev/null
    done
    kill -KILL "$_gf_timer" 2>/dev/null
    _gf_tee_out=
    _gf_tee_err=
    rm -f "$GPUFLEET_STATE/output.log.1.tmp"
    read -r _gf_b1 _gf_b < "$GPUFLEET_STATE/output.base" 2>/dev/null || _gf_b=0
    _gf_sz=$(_gf_size "$GPUFLEET_STATE/output.log")
    printf '%s %s\n' "$(date +%s)" "$(( ${_gf_b:-0} + ${_gf_sz:-0} ))" \
        >> "$GPUFLEET_STATE/output.idx" 2>/dev/null
}

_gf_capture

"""
