#!/usr/bin/env bash
# Make sure this machine has a running Docker engine, debootstrap, gpg and a static busybox, for
# the local backend and its tests. Installs Debian's docker.io when the engine is missing (needs
# root and apt), and starts dockerd in the background when nothing answers and systemd is not
# managing it.
set -euo pipefail

log=/var/log/gpufleet-dockerd.log

need_root() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "ensure-docker-engine: $1 needs root; run: sudo $0" >&2
        exit 1
    fi
}

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io iptables)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
# Molecule's stub vendor repositories are signed with gpg.
command -v gpg >/dev/null 2>&1 || missing+=(gnupg)
# The gcp_gpudirect scenario builds its stand-in images from a static busybox.
[ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || missing+=(busybox-static)
if [ "${#missing[@]}" -gt 0 ]; then
    need_root "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Every systemd container (Molecule's test instances) takes inotify instances; the kernel's
# default of 128 runs out at a few dozen and new containers then never finish booting.
if [ "$(id -u)" -eq 0 ] && [ "$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo 1024)" -lt 1024 ]; then
    sysctl -qw fs.inotify.max_user_instances=1024 || true
fi

# Local nodes reach each other over one bridge, each from its own network namespace, and the
# kernel counts every namespace's ARP entries against one limit (gc_thresh3, 1024 by default):
# a cluster fleet of N nodes takes about N x N of them, so past about 25 nodes the table
# overflows ("neighbor table overflow" in dmesg) and nodes stop reaching each other.
if [ "$(id -u)" -eq 0 ] && [ "$(cat /proc/sys/net/ipv4/neigh/default/gc_thresh3 2>/dev/null || echo 8192)" -lt 8192 ]; then
    sysctl -qw net.ipv4.neigh.default.gc_thresh1=2048 net.ipv4.neigh.default.gc_thresh2=4096 \
        net.ipv4.neigh.default.gc_thresh3=8192 || true
fi

if docker info >/dev/null 2>&1; then
    exit 0
fi
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    need_root "starting docker"
    systemctl start docker
else
    need_root "starting dockerd"
    nohup dockerd >"$log" 2>&1 &
fi
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        exit 0
    fi
    sleep 1
done
echo "ensure-docker-engine: the Docker engine did not come up within 60 s; see $log" >&2
exit 1
