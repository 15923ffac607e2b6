#!/usr/bin/env bash
# Debian packages the tests need beyond the machine's Go, Python and make: an OpenSSH server for
# the SSH tests (started by the tests themselves on loopback, never as a system service), and sudo
# for the test of a non-root SSH user.
set -euo pipefail
missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh-keygen >/dev/null || missing+=(openssh-client)
command -v sudo >/dev/null || missing+=(sudo)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "lab/deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
