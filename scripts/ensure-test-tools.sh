#!/usr/bin/env bash
# Make sure this machine has the programs the unit tier runs for real: HAProxy (Debian's 2.6,
# the in-fleet proxy's version), whose configurations the services' tests check with
# `haproxy -c` and one test serves through. Installs Debian's package when it is missing (needs
# root and apt); the package's own service, if it starts one, has no listener.
set -euo pipefail

missing=()
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "ensure-test-tools: installing ${missing[*]} needs root; run: sudo $0" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
