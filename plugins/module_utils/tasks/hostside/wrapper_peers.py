# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job wrapper's part that a multi-node run's jobs run as they end (tasks.hostside.wrapper
calls it from ``_gf_finish``), over the SSH the run's nodes already share (port 10022, the
run's key). Shell text, joined into the wrapper's script after ``_gf_finish``.

- **The run supervises itself** (``_gf_peers_verdict``): a job whose end ends the run (it
  failed, ran past max_duration or its utilization_policy, or it is the master of a
  master-done run) asks every other job's container to stop (``$DSTACK_DIR/run/stop``, which
  their monitor carries out). A job stopped from outside says nothing.
- **The run's end is judged on job 0** (``_gf_run_end``), so that its host can post one
  ``run.status`` for the whole run (tasks.hostside.eventside reads it): every other job tells
  job 0 how it ended (``$DSTACK_DIR/run/end.RANK``, tried three times); job 0, once its own
  command has ended, waits until each other job has told it, or is gone (no sshd has answered
  at its address for ``GPUFLEET_PEER_LOST_AFTER`` seconds, probed every
  ``GPUFLEET_PEER_PROBE_EVERY``), or a user's stop reaches it (its own, or
  ``state/run_stopped`` when the stop came after its command ended: every job is stopped so),
  or a TERM, then writes ``state/run_end``: one line per job, ``RANK CODE STARTED REASON``
  (``-`` where there is none), ``RANK - - lost`` for a job that went without a word, ``RANK -
  1 terminated_by_user`` for one not waited for after a user's stop, ``RANK - - unknown``
  after another TERM. Job 0's container stays while it waits (its job has ended: ps says so,
  and its host is still held, as for any job whose container is there).

What either does is noted in ``state/peers.log``, never in the job's output, which is the
user's. Each connection is bounded: a peer that stalls before its session is up (a frozen
node, which no ssh option bounds) is killed after ``GPUFLEET_PEER_STOP_LIMIT`` seconds.
"""

from __future__ import annotations

PEERS = r"""_gf_note() {
    printf 'gpufleet: %s\n' "$*" >> "$GPUFLEET_STATE/peers.log" 2>/dev/null
}

_gf_can_ssh() {
    [ -r "$GPUFLEET_DIR/ssh/dstack_job" ] && command -v ssh >/dev/null 2>&1
}

# _gf_ssh_to IP COMMAND &: COMMAND in the run's container at IP, as the job's user. Always
# started in the background: the ssh client is the background process (exec), so that
# _gf_bounded_wait's KILL ends it, not a shell around it.
_gf_ssh_to() {
    _gf_login=${_gf_name:-$(id -un 2>/dev/null)}
    # A peer that vanishes once connected (its node lost) must not hold this job's end for the
    # kernel's TCP timeout: the connection gives up after ~6 silent seconds.
    exec ssh -q -n -o BatchMode=yes -o ConnectTimeout=4 -o StrictHostKeyChecking=no \
        -o ServerAliveInterval=2 -o ServerAliveCountMax=3 \
        -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes \
        -i "$GPUFLEET_DIR/ssh/dstack_job" -p 10022 -l "${_gf_login:-root}" "$1" "$2" \
        > /dev/null 2>&1
}

# _gf_bounded_wait PIDS [NOTE]: waits for the ssh clients PIDS; those still there after
# GPUFLEET_PEER_STOP_LIMIT seconds are killed (KILL: TERM is ignored from the drain on, and so
# by everything started since). NOTE is noted once per client that failed; the status is 0
# when none did.
_gf_bounded_wait() {
    ( sleep "${GPUFLEET_PEER_STOP_LIMIT:-20}"; kill -KILL $1 ) > /dev/null 2>&1 &
    _gf_killer=$!
    _gf_failed=0
    for _gf_p in $1; do
        if ! wait "$_gf_p" 2>/dev/null; then
            _gf_failed=$((_gf_failed + 1))
            [ -z "$2" ] || _gf_note "$2"
        fi
    done
    kill -KILL "$_gf_killer" 2>/dev/null
    [ "$_gf_failed" = 0 ]
}

_gf_peers_verdict() {
    [ "$GPUFLEET_MULTINODE" = 1 ] || return 0
    _gf_why=
    [ -r "$GPUFLEET_STATE/reason" ] && _gf_why=$(head -n 1 "$GPUFLEET_STATE/reason")
    case $_gf_why in
        terminated_by_*|done_by_runner) return 0 ;;
        max_duration_exceeded|terminated_due_to_utilization_policy)
            _gf_tell=terminated_by_server ;;
        *)
            if [ "$1" != 0 ]; then
                _gf_tell=terminated_by_server
            elif [ "$DSTACK_NODE_RANK" = 0 ] && [ "$GPUFLEET_STOP_CRITERIA" = master-done ]; then
                _gf_tell=done_by_runner
            else
                return 0
            fi ;;
    esac
    _gf_tell_peers "$_gf_tell"
}

_gf_tell_peers() {
    _gf_can_ssh || {
        _gf_note "cannot tell the other nodes to stop (no ssh client in the image);" \
            "a gpufleet command on the fleet will stop them"
        return 0
    }
    _gf_i=0
    _gf_pids=
    for _gf_ip in $DSTACK_NODES_IPS; do
        if [ "$_gf_i" != "$DSTACK_NODE_RANK" ]; then
            _gf_ssh_to "$_gf_ip" "printf '%s\n' $1 > $DSTACK_DIR/run/stop" &
            _gf_pids="$_gf_pids $!"
        fi
        _gf_i=$((_gf_i + 1))
    done
    [ -z "$_gf_pids" ] || _gf_bounded_wait "$_gf_pids" "could not reach another node to stop \
it (a gpufleet command on the fleet will stop it)"
    _gf_note "asked the other nodes of the run to stop ($1)"
}

# _gf_my_end CODE: this job's line of state/run_end.
_gf_my_end() {
    _gf_r=
    [ -r "$GPUFLEET_STATE/reason" ] && _gf_r=$(head -n 1 "$GPUFLEET_STATE/reason")
    case $_gf_r in ''|*[!a-z_]*) _gf_r=- ;; esac
    _gf_s=0
    [ -e "$GPUFLEET_STATE/running" ] && _gf_s=1
    printf '%s %s %s %s\n' "$DSTACK_NODE_RANK" "$1" "$_gf_s" "$_gf_r"
}

_gf_ip_of() {
    _gf_k=0
    for _gf_a in $DSTACK_NODES_IPS; do
        [ "$_gf_k" = "$1" ] && { printf '%s\n' "$_gf_a"; return 0; }
        _gf_k=$((_gf_k + 1))
    done
    return 1
}

# A user's stop of the run: this job's own (state/reason), or one that came once its command
# had ended (state/run_stopped, tasks.hostside.nodeside's stop).
_gf_stopped_by_user() {
    for _gf_f in reason run_stopped; do
        [ "$(head -n 1 "$GPUFLEET_STATE/$_gf_f" 2>/dev/null)" = terminated_by_user ] &&
            return 0
    done
    return 1
}

_gf_run_end() {
    [ "$GPUFLEET_MULTINODE" = 1 ] || return 0
    _gf_line=$(_gf_my_end "$1")
    if [ "$DSTACK_NODE_RANK" != 0 ]; then
        _gf_can_ssh || return 0
        _gf_to=$DSTACK_DIR/run/end.$DSTACK_NODE_RANK
        # Tried three times, a few seconds apart (spread by rank): job 0's sshd may turn away
        # logins when many jobs end at once.
        for _gf_try in 1 2 3; do
            _gf_ssh_to "$DSTACK_MASTER_NODE_IP" \
                "printf '%s\n' '$_gf_line' > $_gf_to.new && mv $_gf_to.new $_gf_to" &
            _gf_bounded_wait "$!" && return 0
            [ "$_gf_try" = 3 ] ||
                sleep $(( _gf_try + DSTACK_NODE_RANK % 5 )) < /dev/null > /dev/null 2>&1
        done
        _gf_note "could not tell job 0 how this job ended"
        return 0
    fi
    _gf_missed=
    _gf_lost=
    _gf_term=
    # A stop (TERM) ends the wait: what is known is written.
    trap '_gf_term=1' TERM INT
    _gf_probe_at=$(( $(date +%s) + ${GPUFLEET_PEER_PROBE_EVERY:-15} ))
    while :; do
        _gf_wanting=
        _gf_i=1
        while [ "$_gf_i" -lt "${DSTACK_NODES_NUM:-1}" ]; do
            [ -s "$DSTACK_DIR/run/end.$_gf_i" ] || _gf_wanting="$_gf_wanting $_gf_i "
            _gf_i=$((_gf_i + 1))
        done
        # A stop of the run (TERM, or its word in run_stopped) ends the wait.
        [ -n "$_gf_wanting" ] && [ -z "$_gf_term" ] && ! _gf_stopped_by_user &&
            [ ! -s "$GPUFLEET_STATE/run_stopped" ] || break
        _gf_now=$(date +%s)
        if [ "$_gf_now" -ge "$_gf_probe_at" ]; then
            _gf_can_ssh || break
            # A job is lost once no sshd has answered at its address for
            # GPUFLEET_PEER_LOST_AFTER seconds (as long as a controller waits for a silent
            # host): a blip, or a job still starting, is waited for.
            for _gf_i in $_gf_wanting; do
                [ -z "$_gf_term" ] || break
                case $_gf_lost in *" $_gf_i "*) continue ;; esac
                _gf_ip=$(_gf_ip_of "$_gf_i") || continue
                _gf_ssh_to "$_gf_ip" true &
                if _gf_bounded_wait "$!"; then
                    _gf_missed=$(printf '%s\n' "$_gf_missed" | sed "s/ $_gf_i@[0-9]* //")
                    continue
                fi
                [ -s "$DSTACK_DIR/run/end.$_gf_i" ] && continue   # it told, then went
                _gf_since=$(printf '%s\n' "$_gf_missed" |
                    sed -n "s/.* $_gf_i@\([0-9]*\) .*/\1/p")
                if [ -z "$_gf_since" ]; then
                    _gf_missed="$_gf_missed $_gf_i@$_gf_now "
                elif [ $(( _gf_now - _gf_since )) -ge "${GPUFLEET_PEER_LOST_AFTER:-120}" ]; then
                    _gf_lost="$_gf_lost $_gf_i "
                fi
            done
            _gf_probe_at=$(( $(date +%s) + ${GPUFLEET_PEER_PROBE_EVERY:-15} ))
            _gf_all_lost=1
            for _gf_i in $_gf_wanting; do
                case $_gf_lost in *" $_gf_i "*) ;; *) _gf_all_lost= ;; esac
            done
            [ -z "$_gf_all_lost" ] || break
        fi
        sleep 1 < /dev/null > /dev/null 2>&1
    done
    trap '' TERM INT
    # Stopped by a user: so was every job (the stop goes to them all).
    _gf_untold=unknown
    _gf_stopped_by_user && _gf_untold=terminated_by_user
    {
        printf '%s\n' "$_gf_line"
        _gf_i=1
        while [ "$_gf_i" -lt "${DSTACK_NODES_NUM:-1}" ]; do
            if [ -s "$DSTACK_DIR/run/end.$_gf_i" ]; then
                head -n 1 "$DSTACK_DIR/run/end.$_gf_i"
            else
                case $_gf_lost in
                    *" $_gf_i "*) printf '%s - - lost\n' "$_gf_i" ;;
                    *) [ "$_gf_untold" = unknown ] && printf '%s - - unknown\n' "$_gf_i" ||
                        printf '%s - 1 %s\n' "$_gf_i" "$_gf_untold" ;;
                esac
            fi
            _gf_i=$((_gf_i + 1))
        done
    } > "$GPUFLEET_STATE/run_end.new" 2>/dev/null &&
        mv "$GPUFLEET_STATE/run_end.new" "$GPUFLEET_STATE/run_end" 2>/dev/null
    [ -z "$_gf_lost" ] || _gf_note "the jobs of rank" $_gf_lost "ended without a word" \
        "(no sshd answers where they ran)"
}

"""
