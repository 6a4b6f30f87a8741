#!/usr/bin/env bash
# Make sure this machine has the programs the tests run for real: HAProxy (Debian's 2.6, the
# in-fleet proxy's version), whose configurations the services' tests check with `haproxy -c`
# and serve through; openssl, which signs a gateway's test certificate; and Pebble, Let's
# Encrypt's ACME test server with its mock DNS (pebble-challtestsrv), which the gateway's
# integration test obtains a certificate from. Installs Debian's packages when missing (needs
# root and apt); HAProxy's own service, if the package starts one, has no listener.
set -euo pipefail

missing=()
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v pebble >/dev/null 2>&1 || missing+=(pebble)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "ensure-test-tools: installing ${missing[*]} needs root; run: sudo $0" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
