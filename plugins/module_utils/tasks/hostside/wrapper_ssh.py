# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job wrapper's part that installs the run's SSH key and starts sshd on 10022 (section 5
of tasks.hostside.wrapper's script), where ``gpufleet attach`` and the run's other nodes log
in. Shell text, joined into the wrapper's script where the section stands.
"""

from __future__ import annotations

SSH = r"""# --- 5. inter-node SSH -------------------------------------------------------------------------
_gf_sshd_start() {
    _gf_sshd=$(command -v sshd 2>/dev/null)
    case $_gf_sshd in /*) ;; *) _gf_sshd= ;; esac
    if [ -z "$_gf_sshd" ] && [ "$GPUFLEET_MULTINODE" != 1 ] && [ "$GPUFLEET_SSHD" != install ]
    then
        # Not in the job's log: a single-node run does not need sshd to do its work.
        printf 'no sshd in the image: ssh to this run (gpufleet attach) is not available\n' \
            > "$GPUFLEET_STATE/sshd.log"
        return 0
    fi
    if [ -z "$_gf_sshd" ] && [ "$_gf_cur_uid" = 0 ]; then
        # As dstack does: install openssh-server when the image has no sshd.
        {
            if command -v apt-get >/dev/null 2>&1; then
                apt-get update && DEBIAN_FRONTEND=noninteractive \
                    apt-get install -y --no-install-recommends openssh-server
            elif command -v dnf >/dev/null 2>&1; then
                dnf install -y openssh-server
            elif command -v yum >/dev/null 2>&1; then
                yum install -y openssh-server
            elif command -v apk >/dev/null 2>&1; then
                apk add --no-cache openssh-server
            fi
        } > "$GPUFLEET_STATE/sshd-install.log" 2>&1
        _gf_sshd=$(command -v sshd 2>/dev/null)
        case $_gf_sshd in /*) ;; *) _gf_sshd= ;; esac
    fi
    if [ -z "$_gf_sshd" ]; then
        _gf_log "warning: no sshd in the image and openssh-server could not be installed;" \
            "the nodes cannot ssh to each other (mpirun over ssh will fail)"
        return 0
    fi
    set -- "$GPUFLEET_ETC"/ssh/ssh_host_*_key
    if [ ! -e "$1" ]; then
        # Host keys of the two types every OpenSSH since 6.5 reads, as dstack's runner makes:
        # an RSA key (what "ssh-keygen -A" also makes) costs a few hundred CPU milliseconds, on
        # every node of every run. "-A" remains for an ssh-keygen too old for ed25519.
        mkdir -p "$GPUFLEET_ETC/ssh" 2>/dev/null
        for _gf_type in ecdsa ed25519; do
            ssh-keygen -q -t "$_gf_type" -N '' \
                -f "$GPUFLEET_ETC/ssh/ssh_host_${_gf_type}_key" < /dev/null > /dev/null 2>&1
        done
        set -- "$GPUFLEET_ETC"/ssh/ssh_host_*_key
        if [ ! -e "$1" ]; then
            ssh-keygen -A > /dev/null 2>&1 ||
                _gf_log "warning: ssh-keygen -A failed: sshd may not start"
        fi
    fi
    # sshd's privilege separation folder (Debian: /run/sshd).
    _gf_root=${GPUFLEET_ETC%/etc}
    mkdir -p "$_gf_root/run/sshd" 2>/dev/null && chmod 755 "$_gf_root/run/sshd" 2>/dev/null
    # Without an audit capability pam_loginuid fails every session in a container.
    if [ -w "$GPUFLEET_ETC/pam.d/sshd" ]; then
        _gf_s='[[:space:]]*'
        _gf_e="s/^session${_gf_s}required${_gf_s}pam_loginuid.so/session optional pam_loginuid.so/"
        sed -i "$_gf_e" "$GPUFLEET_ETC/pam.d/sshd" 2>/dev/null
    fi
    # An SSH session reads the job's environment first, whatever it runs: sshd runs every
    # session through session.sh (ForceCommand), which sources /dstack/profile and then runs the
    # command asked for, or a login shell. (bash skips BASH_ENV for commands run by sshd.) sftp
    # (and so scp) goes to the image's sftp-server.
    _gf_sftp=internal-sftp
    for _gf_p in /usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server \
        /usr/lib/ssh/sftp-server /usr/libexec/sftp-server; do
        if [ -x "$_gf_root$_gf_p" ]; then _gf_sftp=$_gf_p; break; fi
    done
    {
        printf '#!/bin/sh\n'
        printf '[ -r "%s/profile" ] && . "%s/profile"\n' "$DSTACK_DIR" "$DSTACK_DIR"
        printf 'case ${SSH_ORIGINAL_COMMAND-} in\n'
        printf "    '') exec \"\${SHELL:-/bin/sh}\" -l ;;\n"
        printf '    %s|internal-sftp) exec %s ;;\n' "$_gf_sftp" "$_gf_sftp"
        printf 'esac\n'
        printf 'exec "${SHELL:-/bin/sh}" -c "$SSH_ORIGINAL_COMMAND"\n'
    } > "$DSTACK_DIR/ssh/session.sh"
    chmod 755 "$DSTACK_DIR/ssh/session.sh"
    {
        printf 'Port 10022\n'
        printf 'PasswordAuthentication no\n'
        printf 'UsePAM yes\n'
        printf 'StrictModes no\n'
        printf 'AuthorizedKeysFile %s .ssh/authorized_keys\n' "$DSTACK_DIR/ssh/authorized_keys"
        printf 'ClientAliveInterval 30\n'
        # A multi-node run's jobs all tell job 0 how they ended in the same second: more
        # logins at once than sshd's default lets wait (10).
        printf 'MaxStartups %s:30:%s\n' $(( ${DSTACK_NODES_NUM:-1} + 10 )) \
            $(( ${DSTACK_NODES_NUM:-1} * 2 + 100 ))
        printf 'PidFile %s\n' "$DSTACK_DIR/ssh/sshd.pid"
        printf 'Subsystem sftp %s\n' "$_gf_sftp"
        printf 'ForceCommand %s/ssh/session.sh\n' "$DSTACK_DIR"
        for _gf_key in "$GPUFLEET_ETC"/ssh/ssh_host_*_key; do
            [ -e "$_gf_key" ] && printf 'HostKey %s\n' "$_gf_key"
        done
    } > "$DSTACK_DIR/ssh/sshd_config"
    "$_gf_sshd" -f "$DSTACK_DIR/ssh/sshd_config" -E "$GPUFLEET_STATE/sshd.log" < /dev/null \
        || _gf_log "warning: sshd did not start (see $GPUFLEET_STATE/sshd.log);" \
            "the nodes cannot ssh to each other"
    return 0
}

if [ -r "$GPUFLEET_DIR/ssh/dstack_job.pub" ]; then
    # The other nodes are reached with the run's key and client config (multi-node runs).
    if [ "$GPUFLEET_MULTINODE" = 1 ]; then
        _gf_ssh=${_gf_home%/}/.ssh
        mkdir -p "$_gf_ssh" || _gf_fail "cannot create $_gf_ssh"
        chmod 700 "$_gf_ssh"
        chown "$_gf_uid:$_gf_gid" "$_gf_ssh"
        cp "$GPUFLEET_DIR/ssh/dstack_job" "$_gf_ssh/dstack_job" ||
            _gf_fail "cannot write $_gf_ssh/dstack_job"
        chmod 600 "$_gf_ssh/dstack_job"
        chown "$_gf_uid:$_gf_gid" "$_gf_ssh/dstack_job"
        if [ -s "$GPUFLEET_DIR/ssh/config" ]; then
            if [ -s "$_gf_ssh/config" ] && [ -n "$(tail -c 1 "$_gf_ssh/config")" ]; then
                printf '\n' >> "$_gf_ssh/config"
            fi
            cat "$GPUFLEET_DIR/ssh/config" >> "$_gf_ssh/config" ||
                _gf_fail "cannot write $_gf_ssh/config"
            chmod 600 "$_gf_ssh/config"
            chown "$_gf_uid:$_gf_gid" "$_gf_ssh/config"
        fi
    fi
    mkdir -p "$DSTACK_DIR/ssh" || _gf_fail "cannot create $DSTACK_DIR/ssh"
    cp "$GPUFLEET_DIR/ssh/dstack_job.pub" "$DSTACK_DIR/ssh/authorized_keys" ||
        _gf_fail "cannot write $DSTACK_DIR/ssh/authorized_keys"
    chmod 644 "$DSTACK_DIR/ssh/authorized_keys"
    # Where another node of the run leaves a stop request (see _gf_peers_verdict).
    mkdir -p "$DSTACK_DIR/run" || _gf_fail "cannot create $DSTACK_DIR/run"
    rm -f "$DSTACK_DIR/run/stop"
    chown "$_gf_uid:$_gf_gid" "$DSTACK_DIR/run" 2>/dev/null
    chmod 700 "$DSTACK_DIR/run"
    _gf_sshd_start
fi

"""
