# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job wrapper: the POSIX sh script each task container runs as its first process.

It does inside the container what dstack's runner does (see
docs/reference/dstack-runtime.md#environment-variables,
docs/reference/dstack-runtime.md#mpi-hostfile, docs/reference/dstack-runtime.md#durations-of-a-run
and docs/reference/dstack-runtime.md#ssh-between-nodes): it reads the job folder written from the
rank plan (tasks.rankplan), mounted read-only at ``/gpufleet`` with a writable ``/gpufleet/state``,
then

1. sources ``env.sh`` and settles the working and repo folders (``DSTACK_WORKING_DIR``,
   ``DSTACK_REPO_DIR``);
2. writes ``/dstack/profile`` (the job's environment, for SSH sessions) and sources it from
   ``/etc/profile``;
3. copies the MPI hostfile to ``/dstack/mpi/hostfile``;
4. unpacks the run's code (``repo.tar.gz``) into ``DSTACK_REPO_DIR`` as ``if_exists`` allows, then
   copies the task's ``files`` (``files/N``, targets listed in ``files.list``);
5. installs the run's SSH key (and, for multi-node runs, the client config) and starts sshd on
   10022, where ``gpufleet attach`` and the other nodes log in; a multi-node run installs
   openssh-server when the image has none, a single-node one uses the image's sshd if it has
   one. Every session reads ``/dstack/profile`` first (``ssh/session.sh``, sshd's
   ForceCommand), so ``ssh RUN 'echo $DSTACK_NODE_RANK'`` sees the job's environment;
6. writes ``state/running``, the moment the command starts;
7. runs ``command.sh`` as the task's user, forwarding SIGTERM/SIGINT and enforcing max_duration
   (``state/reason`` = ``max_duration_exceeded``, TERM, then KILL after stop_duration);
8. writes ``state/exit_code``; in a multi-node run, tells the other jobs to stop when its end
   ends the run, and tells job 0 how it ended (job 0 waits for the others' word and writes
   ``state/run_end``, see tasks.hostside.wrapper_peers); exits with the command's code.

It runs with dash, busybox ash and bash, using only tools that busybox also has. For tests the
paths come from the environment: ``GPUFLEET_DIR`` (``/gpufleet``), ``GPUFLEET_STATE``
(``$GPUFLEET_DIR/state``), ``DSTACK_DIR`` (``/dstack``) and ``GPUFLEET_ETC`` (``/etc``; its
parent also roots ``run/sshd``).

The script is one text: sections 0 (the output kept on the host) and 5 (inter-node SSH), what
a multi-node run's jobs do as they end (tell the others to stop, tell job 0 how they ended), and
the metrics sampler (with utilization_policy) that section 7 starts, are kept in
tasks.hostside.wrapper_output, tasks.hostside.wrapper_ssh, tasks.hostside.wrapper_peers and
tasks.hostside.wrapper_metrics and joined in where they stand.
"""

from __future__ import annotations

from .wrapper_metrics import METRICS
from .wrapper_output import OUTPUT
from .wrapper_peers import PEERS
from .wrapper_ssh import SSH

WRAPPER = r"""#!/bin/sh
# gpufleet job wrapper (plugins/module_utils/tasks/hostside/wrapper.py): PID 1 of a task container.
_gf_start_dir=$(pwd)
GPUFLEET_DIR=${GPUFLEET_DIR:-/gpufleet}
GPUFLEET_STATE=${GPUFLEET_STATE:-$GPUFLEET_DIR/state}
DSTACK_DIR=${DSTACK_DIR:-/dstack}
GPUFLEET_ETC=${GPUFLEET_ETC:-/etc}
_gf_child=
_gf_watchdog=
_gf_sampler=
_gf_signalled=

_gf_log() {
    printf 'gpufleet: %s\n' "$*" >&2
}

_gf_finish() {
    if [ -n "$_gf_watchdog" ]; then
        kill "$_gf_watchdog" 2>/dev/null
    fi
    if [ -n "$_gf_sampler" ]; then
        kill "$_gf_sampler" 2>/dev/null
    fi
    _gf_drain
    printf '%s\n' "$1" > "$GPUFLEET_STATE/exit_code" 2>/dev/null
    _gf_peers_verdict "$1"
    _gf_run_end "$1"
    exit "$1"
}

""" + PEERS + r"""_gf_fail() {
    _gf_log "$*"
    _gf_finish 1
}

# SIGTERM goes to the command. Commands started in the background by a non-interactive shell
# ignore SIGINT (POSIX), so SIGINT is passed on as SIGTERM, which stops them the same way.
_gf_forward() {
    _gf_signalled=1
    if [ -n "$_gf_child" ]; then
        kill -TERM "$_gf_child" 2>/dev/null
    fi
}
trap _gf_forward TERM
trap _gf_forward INT

mkdir -p "$GPUFLEET_STATE" 2>/dev/null

""" + OUTPUT + r"""# --- 1. environment ----------------------------------------------------------------------------
[ -r "$GPUFLEET_DIR/env.sh" ] ||
    _gf_fail "$GPUFLEET_DIR/env.sh is missing: the job folder is not mounted"
. "$GPUFLEET_DIR/env.sh" || _gf_fail "cannot read $GPUFLEET_DIR/env.sh"
if [ -n "$_gf_tee_out" ]; then
    ( trap - INT; _gf_keep_output ) > /dev/null 2>&1 &
    _gf_keeper=$!
fi

# _gf_passwd NAME_OR_UID: sets _gf_pw_name _gf_pw_uid _gf_pw_gid _gf_pw_home from passwd.
_gf_passwd() {
    [ -r "$GPUFLEET_ETC/passwd" ] || return 1
    while IFS=: read -r _gf_n _gf_p _gf_u _gf_g _gf_c _gf_h _gf_s; do
        case $1 in
            *[!0-9]*) [ "$_gf_n" = "$1" ] || continue ;;
            *) [ "$_gf_u" = "$1" ] || continue ;;
        esac
        _gf_pw_name=$_gf_n
        _gf_pw_uid=$_gf_u
        _gf_pw_gid=$_gf_g
        _gf_pw_home=$_gf_h
        return 0
    done < "$GPUFLEET_ETC/passwd"
    return 1
}

# _gf_group NAME: prints the gid of a group name.
_gf_group() {
    [ -r "$GPUFLEET_ETC/group" ] || return 1
    while IFS=: read -r _gf_n _gf_p _gf_g _gf_m; do
        if [ "$_gf_n" = "$1" ]; then
            printf '%s\n' "$_gf_g"
            return 0
        fi
    done < "$GPUFLEET_ETC/group"
    return 1
}

_gf_cur_uid=$(id -u)
_gf_cur_gid=$(id -g)
_gf_name=
_gf_grp=
_gf_switch=
if [ -z "$GPUFLEET_USER" ]; then
    _gf_uid=$_gf_cur_uid
    _gf_gid=$_gf_cur_gid
    _gf_home=$HOME
    if [ -z "$_gf_home" ]; then
        if _gf_passwd "$_gf_uid"; then _gf_home=$_gf_pw_home; else _gf_home=/; fi
    fi
else
    _gf_user=${GPUFLEET_USER%%:*}
    _gf_grp=
    case $GPUFLEET_USER in *:*) _gf_grp=${GPUFLEET_USER#*:} ;; esac
    if _gf_passwd "$_gf_user"; then
        _gf_name=$_gf_pw_name
        _gf_uid=$_gf_pw_uid
        _gf_gid=$_gf_pw_gid
        _gf_home=$_gf_pw_home
    else
        case $_gf_user in
            ''|*[!0-9]*)
                _gf_fail "user: $_gf_user does not exist in the image ($GPUFLEET_ETC/passwd);" \
                    "set user to an existing user or a numeric uid" ;;
        esac
        _gf_uid=$_gf_user
        _gf_gid=0
        _gf_home=/
    fi
    if [ -n "$_gf_grp" ]; then
        case $_gf_grp in
            *[!0-9]*)
                _gf_gid=$(_gf_group "$_gf_grp") ||
                    _gf_fail "user: group $_gf_grp does not exist in the image" \
                        "($GPUFLEET_ETC/group); use an existing group or a numeric gid" ;;
            *) _gf_gid=$_gf_grp ;;
        esac
    fi
    [ -n "$_gf_home" ] || _gf_home=/
    if [ "$_gf_uid" != "$_gf_cur_uid" ] || [ "$_gf_gid" != "$_gf_cur_gid" ]; then
        _gf_switch=1
    fi
fi

# _gf_expand PATH: ~ and ~/x become the job user's home; relative paths start at $2.
_gf_expand() {
    case $1 in
        "~") printf '%s\n' "$_gf_home" ;;
        "~/"*) printf '%s/%s\n' "${_gf_home%/}" "${1#"~/"}" ;;
        /*) printf '%s\n' "$1" ;;
        *) printf '%s/%s\n' "${2%/}" "$1" ;;
    esac
}

if [ -n "$GPUFLEET_WORKING_DIR" ]; then
    # A relative working_dir is dstack's legacy form: /workflow/<dir>.
    _gf_wd=$(_gf_expand "$GPUFLEET_WORKING_DIR" /workflow)
else
    _gf_wd=$_gf_start_dir
fi
if [ ! -d "$_gf_wd" ]; then
    mkdir -p "$_gf_wd" || _gf_fail "working_dir: cannot create $_gf_wd"
    chown "$_gf_uid:$_gf_gid" "$_gf_wd" 2>/dev/null
fi
DSTACK_WORKING_DIR=$_gf_wd
export DSTACK_WORKING_DIR
# The repo goes to repos[0].path, relative to the working folder (dstack: /workflow, untouched,
# for a run without repos).
case ${GPUFLEET_REPO_DIR:-/workflow} in
    .|./) DSTACK_REPO_DIR=$_gf_wd ;;
    ./*) DSTACK_REPO_DIR=$(_gf_expand "${GPUFLEET_REPO_DIR#./}" "$_gf_wd") ;;
    *) DSTACK_REPO_DIR=$(_gf_expand "${GPUFLEET_REPO_DIR:-/workflow}" "$_gf_wd") ;;
esac
[ "$DSTACK_REPO_DIR" = / ] || DSTACK_REPO_DIR=${DSTACK_REPO_DIR%/}
export DSTACK_REPO_DIR
HOME=$_gf_home
export HOME
if [ -n "$_gf_name" ]; then
    USER=$_gf_name
    LOGNAME=$_gf_name
    export USER LOGNAME
fi

# --- 2. /dstack/profile ------------------------------------------------------------------------
# Every exported variable as export K='v' (the same text whatever the shell: `export -p` of bash
# uses double quotes). Names come from `env`; a line of a multi-line value that looks like
# NAME=... is dropped unless NAME is really set.
_gf_profile() {
    for _gf_v in $(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p' | sort -u); do
        case " HOSTNAME USER HOME SHELL SHLVL PWD OLDPWD _ " in *" $_gf_v "*) continue ;; esac
        eval "[ \"\${$_gf_v+set}\" = set ]" || continue
        eval "_gf_val=\$$_gf_v"
        # Only a value with a single quote costs a sed: a fork and an exec per variable were
        # a large part of a job's start-up CPU.
        case $_gf_val in
            *"'"*) _gf_q=$(printf '%sX' "$_gf_val" | sed "s/'/'\\\\''/g"); _gf_q=${_gf_q%X} ;;
            *) _gf_q=$_gf_val ;;
        esac
        printf "export %s='%s'\n" "$_gf_v" "$_gf_q"
    done
    printf 'cd "$DSTACK_WORKING_DIR"\n'
}
mkdir -p "$DSTACK_DIR" || _gf_fail "cannot create $DSTACK_DIR"
_gf_profile > "$DSTACK_DIR/profile" || _gf_fail "cannot write $DSTACK_DIR/profile"
# It holds the job's environment, secrets included: readable by the job's user only.
chmod 600 "$DSTACK_DIR/profile"
chown "$_gf_uid:$_gf_gid" "$DSTACK_DIR/profile" 2>/dev/null
_gf_line="[ -r \"$DSTACK_DIR/profile\" ] && . \"$DSTACK_DIR/profile\""
if ! grep -qxF "$_gf_line" "$GPUFLEET_ETC/profile" 2>/dev/null; then
    { printf '%s\n' "$_gf_line" >> "$GPUFLEET_ETC/profile"; } 2>/dev/null || :
fi

# --- 3. MPI hostfile ---------------------------------------------------------------------------
mkdir -p "$DSTACK_DIR/mpi" || _gf_fail "cannot create $DSTACK_DIR/mpi"
if [ -r "$GPUFLEET_DIR/hostfile" ]; then
    cp "$GPUFLEET_DIR/hostfile" "$DSTACK_DIR/mpi/hostfile" ||
        _gf_fail "cannot write $DSTACK_DIR/mpi/hostfile"
else
    : > "$DSTACK_DIR/mpi/hostfile"
fi
chmod 644 "$DSTACK_DIR/mpi/hostfile"

# --- 4. repo and files -------------------------------------------------------------------------
# repo.tar.gz: the run's code (tracked, changed and untracked-but-not-ignored files), unpacked
# into DSTACK_REPO_DIR when that folder is missing or empty (a lone lost+found counts as empty);
# otherwise if_exists decides: error (dstack's default) or skip. A remote repo
# (GPUFLEET_REPO_URL) is cloned there instead, with the credential of repo/ (token or key).
_gf_clone() {
    command -v git > /dev/null 2>&1 ||
        _gf_fail "Failed to set up the repo (git is not in the image: install git in it, or" \
            "bring the code as a local repo, repos: [path])"
    _gf_ssh="ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes"
    if [ -r "$GPUFLEET_DIR/repo/ssh_key" ]; then
        _gf_ssh="$_gf_ssh -o IdentitiesOnly=yes -i $GPUFLEET_DIR/repo/ssh_key"
    fi
    _gf_askpass=
    [ -r "$GPUFLEET_DIR/repo/token" ] && _gf_askpass=$GPUFLEET_DIR/repo/askpass
    set -- clone --quiet --recurse-submodules
    [ "$GPUFLEET_REPO_SINGLE_BRANCH" = 1 ] && set -- "$@" --single-branch
    [ -n "$GPUFLEET_REPO_BRANCH" ] && set -- "$@" --branch "$GPUFLEET_REPO_BRANCH"
    # git refuses a folder holding lost+found: it waits aside meanwhile.
    _gf_lf=
    if [ -d "$DSTACK_REPO_DIR/lost+found" ]; then
        _gf_lf=$(mktemp -d) && mv "$DSTACK_REPO_DIR/lost+found" "$_gf_lf/" ||
            _gf_fail "Failed to set up the repo (cannot move lost+found aside)"
    fi
    GIT_SSH_COMMAND=$_gf_ssh GIT_ASKPASS=$_gf_askpass GIT_TERMINAL_PROMPT=0 \
        git "$@" -- "$GPUFLEET_REPO_URL" "$DSTACK_REPO_DIR" < /dev/null
    _gf_rc=$?
    [ -n "$_gf_lf" ] && mv "$_gf_lf/lost+found" "$DSTACK_REPO_DIR/" && rmdir "$_gf_lf"
    [ "$_gf_rc" = 0 ] ||
        _gf_fail "Failed to set up the repo (git clone of $GPUFLEET_REPO_URL failed, exit" \
            "$_gf_rc; a private repo needs the secret GIT_TOKEN or GIT_SSH_KEY)"
    if [ -n "$GPUFLEET_REPO_HASH" ]; then
        git -C "$DSTACK_REPO_DIR" checkout --quiet "$GPUFLEET_REPO_HASH" ||
            _gf_fail "Failed to set up the repo (no commit $GPUFLEET_REPO_HASH in" \
                "$GPUFLEET_REPO_URL${GPUFLEET_REPO_BRANCH:+ on $GPUFLEET_REPO_BRANCH})"
    fi
}

if [ -r "$GPUFLEET_DIR/repo.tar.gz" ] || [ -n "$GPUFLEET_REPO_URL" ]; then
    _gf_empty=1
    if [ -d "$DSTACK_REPO_DIR" ]; then
        for _gf_item in "$DSTACK_REPO_DIR"/* "$DSTACK_REPO_DIR"/.[!.]* "$DSTACK_REPO_DIR"/..?*; do
            [ -e "$_gf_item" ] || [ -L "$_gf_item" ] || continue
            [ "${_gf_item##*/}" = lost+found ] && continue
            _gf_empty=
            break
        done
    elif [ -e "$DSTACK_REPO_DIR" ]; then
        _gf_fail "Failed to set up the repo (repo dir is not a directory: $DSTACK_REPO_DIR)"
    fi
    if [ -z "$_gf_empty" ] && [ "$GPUFLEET_REPO_IF_EXISTS" = skip ]; then
        _gf_log "Skipping repo checkout: repo dir is not empty: $DSTACK_REPO_DIR"
    elif [ -z "$_gf_empty" ]; then
        _gf_fail "Failed to set up the repo (repo dir is not empty: $DSTACK_REPO_DIR); set" \
            "repos[0].path (or working_dir) to an empty folder, or if_exists: skip"
    else
        mkdir -p "$DSTACK_REPO_DIR" ||
            _gf_fail "Failed to set up the repo (cannot create $DSTACK_REPO_DIR)"
        if [ -n "$GPUFLEET_REPO_URL" ]; then
            _gf_clone
        else
            tar -xzf "$GPUFLEET_DIR/repo.tar.gz" -C "$DSTACK_REPO_DIR" ||
                _gf_fail "Failed to set up the repo (cannot unpack it into $DSTACK_REPO_DIR;" \
                    "the image needs tar and gzip)"
        fi
        chown -R "$_gf_uid:$_gf_gid" "$DSTACK_REPO_DIR" 2>/dev/null
    fi
fi


# files.list: one "N TARGET" line per entry of the task's files; files/N is its content (a file
# or a folder). Relative targets are under the working folder.
if [ -r "$GPUFLEET_DIR/files.list" ]; then
    while IFS= read -r _gf_entry || [ -n "$_gf_entry" ]; do
        [ -n "$_gf_entry" ] || continue
        _gf_n=${_gf_entry%% *}
        _gf_target=$(_gf_expand "${_gf_entry#* }" "$DSTACK_WORKING_DIR")
        _gf_src=$GPUFLEET_DIR/files/$_gf_n
        [ -e "$_gf_src" ] ||
            _gf_fail "files: $_gf_src (for $_gf_target) is missing from the job folder"
        if [ -d "$_gf_src" ]; then
            if [ ! -d "$_gf_target" ]; then
                mkdir -p "$_gf_target" || _gf_fail "files: cannot create $_gf_target"
                chown "$_gf_uid:$_gf_gid" "$_gf_target"
            fi
            for _gf_item in "$_gf_src"/* "$_gf_src"/.[!.]* "$_gf_src"/..?*; do
                [ -e "$_gf_item" ] || continue
                cp -R "$_gf_item" "$_gf_target/" || _gf_fail "files: cannot copy to $_gf_target"
                chown -R "$_gf_uid:$_gf_gid" "$_gf_target/${_gf_item##*/}"
            done
        else
            _gf_parent=${_gf_target%/*}
            [ -n "$_gf_parent" ] || _gf_parent=/
            mkdir -p "$_gf_parent" || _gf_fail "files: cannot create $_gf_parent"
            cp "$_gf_src" "$_gf_target" || _gf_fail "files: cannot write $_gf_target"
            chown "$_gf_uid:$_gf_gid" "$_gf_target"
        fi
    done < "$GPUFLEET_DIR/files.list"
fi

""" + SSH + r"""# --- 6. running --------------------------------------------------------------------------------
[ -r "$GPUFLEET_DIR/command.sh" ] ||
    _gf_fail "$GPUFLEET_DIR/command.sh is missing: the task has neither commands nor" \
        "entrypoint and the image has no ENTRYPOINT/CMD"
cd "$DSTACK_WORKING_DIR" || _gf_fail "working_dir: cannot enter $DSTACK_WORKING_DIR"
if [ -n "$_gf_signalled" ]; then
    _gf_log "stopped before the command started"
    _gf_finish 143
fi
date +%s > "$GPUFLEET_STATE/running" || _gf_fail "cannot write $GPUFLEET_STATE/running"

# --- 7. the command ----------------------------------------------------------------------------
GPUFLEET_COMMAND=$GPUFLEET_DIR/command.sh
export GPUFLEET_COMMAND
if [ -z "$_gf_switch" ]; then
    /bin/sh "$GPUFLEET_COMMAND" &
    _gf_child=$!
elif setpriv --help 2>&1 | grep -q -- --reuid; then
    if [ -n "$_gf_name" ]; then _gf_groups=--init-groups; else _gf_groups=--clear-groups; fi
    setpriv --reuid="$_gf_uid" --regid="$_gf_gid" "$_gf_groups" -- /bin/sh "$GPUFLEET_COMMAND" &
    _gf_child=$!
elif [ -n "$_gf_name" ] && command -v su >/dev/null 2>&1; then
    # su takes the user's primary group; -m keeps the environment set up above.
    su -m -s /bin/sh -c 'exec /bin/sh "$GPUFLEET_COMMAND"' "$_gf_name" &
    _gf_child=$!
elif [ -n "$_gf_name" ] && command -v runuser >/dev/null 2>&1; then
    if [ -n "$_gf_grp" ]; then
        runuser -m -u "$_gf_name" -g "$_gf_grp" -- /bin/sh "$GPUFLEET_COMMAND" &
    else
        runuser -m -u "$_gf_name" -- /bin/sh "$GPUFLEET_COMMAND" &
    fi
    _gf_child=$!
else
    _gf_fail "user: cannot run the command as $GPUFLEET_USER: the image has none of setpriv" \
        "(util-linux), su or runuser (or the uid has no passwd entry, which only setpriv" \
        "handles); install util-linux in the image, or drop user to run as the image's user"
fi
if [ -n "$_gf_signalled" ]; then
    _gf_log "stopped as the command started"
    kill -TERM "$_gf_child" 2>/dev/null
fi

# The monitor: max_duration, and stop requests from the run's other nodes. It records why it
# stops the command (state/reason), sends TERM, and KILL after stop_duration.
_gf_stop_command() {
    [ -e "$GPUFLEET_STATE/reason" ] || printf '%s\n' "$1" > "$GPUFLEET_STATE/reason"
    _gf_log "$2: stopping the command"
    kill -TERM "$_gf_child" 2>/dev/null
    _gf_end=$(( $(date +%s) + ${GPUFLEET_STOP_DURATION:-0} ))
    while kill -0 "$_gf_child" 2>/dev/null && [ "$(date +%s)" -lt "$_gf_end" ]; do
        sleep 1 < /dev/null > /dev/null 2>&1
    done
    kill -KILL "$_gf_child" 2>/dev/null
}

_gf_limit=
case $GPUFLEET_MAX_DURATION in
    ''|*[!0-9]*) ;;
    *) _gf_limit=$(( $(date +%s) + GPUFLEET_MAX_DURATION )) ;;
esac

# A dev environment's inactivity_duration, measured as dstack's runner does: activity is an
# established TCP connection to this container's sshd (port 10022, 271E in /proc/net/tcp) that
# has lasted more than 10 seconds.
_gf_inactive=
case ${GPUFLEET_INACTIVITY-} in
    ''|*[!0-9]*) ;;
    *) _gf_inactive=$GPUFLEET_INACTIVITY ;;
esac
_gf_ssh_peers() {
    for _gf_t in "${GPUFLEET_PROC:-/proc}/net/tcp" "${GPUFLEET_PROC:-/proc}/net/tcp6"; do
        [ -r "$_gf_t" ] || continue
        while read -r _gf_sl _gf_loc _gf_rem _gf_st _gf_rest; do
            case $_gf_loc in
                *:271E) [ "$_gf_st" = 01 ] && printf '%s\n' "$_gf_rem" ;;
            esac
        done < "$_gf_t"
    done
}
_gf_seen_since() {
    printf '%s\n' "$_gf_seen" | while read -r _gf_a _gf_b; do
        if [ "$_gf_a" = "$1" ]; then printf '%s\n' "$_gf_b"; break; fi
    done
}

if [ -n "$_gf_limit" ] || [ "$GPUFLEET_MULTINODE" = 1 ] || [ -n "$_gf_inactive" ]; then
    (
        trap - TERM INT
        _gf_active=$(date +%s)
        _gf_seen=
        while kill -0 "$_gf_child" 2>/dev/null; do
            if [ -n "$_gf_inactive" ]; then
                _gf_now=$(date +%s)
                _gf_next=
                for _gf_p in $(_gf_ssh_peers); do
                    _gf_first=$(_gf_seen_since "$_gf_p")
                    [ -n "$_gf_first" ] || _gf_first=$_gf_now
                    _gf_next="$_gf_next$_gf_p $_gf_first
"
                    [ $(( _gf_now - _gf_first )) -gt 10 ] && _gf_active=$_gf_now
                done
                _gf_seen=$_gf_next
                if [ $(( _gf_now - _gf_active )) -ge "$_gf_inactive" ]; then
                    _gf_why="The job was inactive for $(( _gf_now - _gf_active )) seconds,"
                    _gf_why="$_gf_why exceeding the inactivity_duration of $_gf_inactive seconds"
                    _gf_stop_command inactivity_duration_exceeded "$_gf_why"
                    exit 0
                fi
            fi
            if [ -s "$DSTACK_DIR/run/stop" ]; then
                _gf_asked=$(head -n 1 "$DSTACK_DIR/run/stop")
                case $_gf_asked in
                    done_by_runner) ;;
                    *) _gf_asked=terminated_by_server ;;
                esac
                _gf_stop_command "$_gf_asked" "another node of the run ended it ($_gf_asked)"
                exit 0
            fi
            if [ -n "$_gf_limit" ] && [ "$(date +%s)" -ge "$_gf_limit" ]; then
                _gf_stop_command max_duration_exceeded \
                    "max_duration (${GPUFLEET_MAX_DURATION}s) exceeded"
                exit 0
            fi
            sleep 1 < /dev/null > /dev/null 2>&1
        done
    ) &
    _gf_watchdog=$!
fi

""" + METRICS + r"""# --- 8. exit code ------------------------------------------------------------------------------
# A trapped signal interrupts wait; wait again until the command has really ended.
wait "$_gf_child"
_gf_rc=$?
while kill -0 "$_gf_child" 2>/dev/null; do
    wait "$_gf_child"
    _gf_rc=$?
done
wait "$_gf_child" 2>/dev/null
_gf_last=$?
[ "$_gf_last" -eq 127 ] || _gf_rc=$_gf_last
[ -s "$GPUFLEET_STATE/stopped_why" ] &&
    _gf_log "$(cat "$GPUFLEET_STATE/stopped_why"): the command was stopped"
_gf_finish "$_gf_rc"
"""


def wrapper_script():
    """The wrapper's text (``job.sh`` in the job folder)."""
    return WRAPPER
