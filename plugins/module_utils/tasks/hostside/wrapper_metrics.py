# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job wrapper's metrics sampler, started with the command (section 7 of
tasks.hostside.wrapper's script): the samples ``gpufleet metrics`` reads, and
``utilization_policy`` judged from them in the job itself. Shell text, joined into the
wrapper's script where it stands.
"""

from __future__ import annotations

METRICS = r"""# The metrics gpufleet metrics shows, sampled here as dstack's runner samples them in the
# container (tasks/metrics.py reads them): every GPUFLEET_METRICS_INTERVAL seconds (10; 0 turns
# it off) a block appended to state/metrics, a header line
#   @ EPOCH UPTIME CPU_USEC MEMORY_BYTES INACTIVE_FILE_BYTES MEMORY_LIMIT CPUS MEMTOTAL_KB
# from the container's cgroup (v2, else v1) and /proc, then one line per GPU: "nvidia UTIL
# USED_MIB TOTAL_MIB" from nvidia-smi, or amd-smi's CSV lines after "amd ". The file keeps
# a little over an hour of samples.
_gf_key() {
    [ -r "$1" ] || return 0
    while read -r _gf_k _gf_v _gf_rest; do
        if [ "$_gf_k" = "$2" ]; then printf '%s' "$_gf_v"; return 0; fi
    done < "$1"
}
_gf_sample() {
    _gf_cg=${GPUFLEET_CGROUP:-/sys/fs/cgroup}
    if [ -r "$_gf_cg/cpu.stat" ] && [ -r "$_gf_cg/memory.current" ]; then
        _gf_cpu=$(_gf_key "$_gf_cg/cpu.stat" usage_usec)
        _gf_mem=$(cat "$_gf_cg/memory.current" 2>/dev/null)
        _gf_cache=$(_gf_key "$_gf_cg/memory.stat" inactive_file)
        _gf_lim=$(cat "$_gf_cg/memory.max" 2>/dev/null)
    else
        _gf_cpu=
        for _gf_acct in "$_gf_cg/cpuacct" "$_gf_cg/cpu,cpuacct" "$_gf_cg/cpu"; do
            if [ -r "$_gf_acct/cpuacct.usage" ]; then
                _gf_cpu=$(( $(cat "$_gf_acct/cpuacct.usage") / 1000 ))
                break
            fi
        done
        _gf_mem=$(cat "$_gf_cg/memory/memory.usage_in_bytes" 2>/dev/null)
        _gf_cache=$(_gf_key "$_gf_cg/memory/memory.stat" total_inactive_file)
        _gf_lim=$(cat "$_gf_cg/memory/memory.limit_in_bytes" 2>/dev/null)
    fi
    # GNU nproc would answer the job's OMP_NUM_THREADS instead.
    _gf_ncpu=$(unset OMP_NUM_THREADS OMP_THREAD_LIMIT; nproc 2>/dev/null) || _gf_ncpu=
    read -r _gf_up _gf_rest < "${GPUFLEET_PROC:-/proc}/uptime" 2>/dev/null || _gf_up=
    _gf_mt=$(_gf_key "${GPUFLEET_PROC:-/proc}/meminfo" MemTotal:)
    printf '@ %s %s %s %s %s %s %s %s\n' "$(date +%s)" "${_gf_up:--}" "${_gf_cpu:--}" \
        "${_gf_mem:--}" "${_gf_cache:--}" "${_gf_lim:--}" "${_gf_ncpu:--}" "${_gf_mt:--}"
    if command -v nvidia-smi > /dev/null 2>&1; then
        # "[Not Supported]" has a space: spaces go, fields are split on commas.
        nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total \
            --format=csv,noheader,nounits 2>/dev/null | tr -d ' ' |
            while IFS=, read -r _gf_u _gf_m _gf_t _gf_rest; do
                printf 'nvidia %s %s %s\n' "${_gf_u:--}" "${_gf_m:--}" "${_gf_t:--}"
            done
    elif command -v amd-smi > /dev/null 2>&1; then
        amd-smi monitor -vu --csv 2>/dev/null | while IFS= read -r _gf_line; do
            printf 'amd %s\n' "$_gf_line"
        done
    fi
}
# utilization_policy, from the samples as they are taken (dstack's server does it from the
# metrics it collects): once some GPU's utilization has stayed below GPUFLEET_UTIL_MIN percent
# for GPUFLEET_UTIL_WINDOW seconds (every sample since then), the command is stopped with
# state/reason terminated_due_to_utilization_policy. Each GPU's last sample at or above the
# least is kept in $_gf_ok ("INDEX EPOCH" lines); the window counts from the first sample.
_gf_umin=
_gf_uwin=
case "${GPUFLEET_UTIL_MIN-}:${GPUFLEET_UTIL_WINDOW-}" in
    :*|*:|*[!0-9:]*) ;;
    *) _gf_umin=$GPUFLEET_UTIL_MIN; _gf_uwin=$GPUFLEET_UTIL_WINDOW ;;
esac
_gf_ok=
# Each GPU's utilization (percent) in a sample block, one per line: nvidia-smi's first field,
# or amd-smi's "gfx" column (its header line comes first; decimals dropped; "-" when blank).
_gf_utils() {
    printf '%s\n' "$1" | {
        _gf_col=
        while read -r _gf_kind _gf_rest; do
            case $_gf_kind in
                nvidia) printf '%s\n' "${_gf_rest%% *}" ;;
                amd)
                    _gf_ifs=$IFS
                    IFS=,
                    # shellcheck disable=SC2086
                    set -- $_gf_rest
                    IFS=$_gf_ifs
                    if [ -z "$_gf_col" ]; then
                        _gf_col=0
                        _gf_j=0
                        for _gf_f in "$@"; do
                            _gf_j=$((_gf_j + 1))
                            [ "$(printf '%s' "$_gf_f" | tr -d ' ')" = gfx ] && _gf_col=$_gf_j
                        done
                    elif [ "$_gf_col" -gt 0 ]; then
                        eval "_gf_v=\${$_gf_col}"
                        _gf_v=$(printf '%s' "$_gf_v" | tr -d ' ')
                        _gf_v=${_gf_v%%.*}
                        printf '%s\n' "${_gf_v:--}"
                    fi ;;
            esac
        done
    }
}
_gf_util_check() {
    [ -n "$_gf_umin" ] || return 0
    _gf_now=$1
    _gf_i=0
    _gf_next=
    _gf_low=
    for _gf_u in $(_gf_utils "$2"); do
        _gf_since=$(printf '%s\n' "$_gf_ok" | while read -r _gf_a _gf_b; do
            if [ "$_gf_a" = "$_gf_i" ]; then printf '%s' "$_gf_b"; break; fi; done)
        [ -n "$_gf_since" ] || _gf_since=$_gf_now
        case $_gf_u in
            # A GPU whose utilization cannot be read (N/A, [Not Supported]) is not judged.
            ''|*[!0-9]*) _gf_since=$_gf_now ;;
            *) [ "$_gf_u" -ge "$_gf_umin" ] && _gf_since=$_gf_now ;;
        esac
        [ $(( _gf_now - _gf_since )) -ge "$_gf_uwin" ] && _gf_low=1
        _gf_next="$_gf_next$_gf_i $_gf_since
"
        _gf_i=$((_gf_i + 1))
    done
    _gf_ok=$_gf_next
    if [ -n "$_gf_low" ]; then
        # Said by the wrapper once the command ended (the sampler holds none of the job's
        # output open: whoever reads it would wait for the sampler too).
        _gf_why="The job GPU utilization below ${_gf_umin}% for ${_gf_uwin} seconds"
        printf '%s\n' "$_gf_why" > "$GPUFLEET_STATE/stopped_why"
        _gf_stop_command terminated_due_to_utilization_policy "$_gf_why"
        return 1
    fi
    return 0
}
# The interval without leading zeros ("08" is no octal here; "00" is off, unless
# utilization_policy needs the samples: then it is 10).
_gf_every=${GPUFLEET_METRICS_INTERVAL:-10}
while [ "${_gf_every#0}" != "$_gf_every" ]; do _gf_every=${_gf_every#0}; done
[ -z "$_gf_every" ] && [ -n "$_gf_umin" ] && _gf_every=10
case $_gf_every in
    ''|*[!0-9]*) ;;
    *)
        (
            trap - TERM INT
            _gf_n=0
            _gf_out=$GPUFLEET_STATE/metrics
            # An hour and a little of samples, whatever a sample's size (one line per GPU).
            _gf_keep=$((3600 / _gf_every + 40))
            while kill -0 "$_gf_child" 2>/dev/null; do
                _gf_block=$(_gf_sample)
                printf '%s\n' "$_gf_block" >> "$_gf_out" 2>/dev/null
                _gf_util_check "$(date +%s)" "$_gf_block" || exit 0
                _gf_n=$((_gf_n + 1))
                if [ $((_gf_n % 50)) = 0 ]; then
                    _gf_cap=$(( _gf_keep * $(printf '%s\n' "$_gf_block" | wc -l) ))
                    if [ "$(wc -l < "$_gf_out")" -gt "$_gf_cap" ]; then
                        tail -n "$_gf_cap" "$_gf_out" > "$_gf_out.tmp" &&
                            mv -f "$_gf_out.tmp" "$_gf_out"
                    fi
                fi
                sleep "$_gf_every" < /dev/null > /dev/null 2>&1
            done
        ) > /dev/null 2>&1 &
        _gf_sampler=$!
        ;;
esac

"""
