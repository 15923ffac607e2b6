#!/usr/bin/env bash
# Debian packages the tests need beyond the machine's Go, Python and make:
# - containerd (1.6.20, with runc): the lab node's default containerd. Nothing starts it as a
#   service; the playbook runs a private daemon of its own (see README, "The lab node's containerd");
# - containernetworking-plugins: the loopback plugin, which containerd's CRI runs for every Pod of
#   the lab's kubelet node (NODE=kubelet), beside the node's own plugin (lab/standin/cni);
# - libc6-dev's static libc: the kubelet node's stand-in program is linked statically (lab/standin);
# - busybox-static: the node audit's cluster reach runs its read Pod from an image of it (its sh and
#   nsenter; lab/standin/images.py), since nothing can be pulled here;
# - an OpenSSH server for the SSH tests (started by the tests themselves on loopback, never as a
#   system service), and sudo for the test of a non-root SSH user;
# - conmon: the monitor the CRI-O sim nodes' real crio (lab/build.sh crio) runs each container
#   under, with Debian's runc as its OCI runtime;
# - kmod's modinfo and DKMS: the driver's read asks them of a node (the NVIDIA module's version,
#   DKMS's status), and the tests ask them of planted driver trees (tests/helpers/drivers.py).
set -euo pipefail
missing=()
[ -x /usr/bin/containerd ] || missing+=(containerd)
[ -x /usr/lib/cni/loopback ] || missing+=(containernetworking-plugins)
command -v gcc >/dev/null || missing+=(gcc)
[ -f "$(gcc -print-file-name=libc.a 2>/dev/null)" ] || missing+=(libc6-dev)
[ -x /bin/busybox ] || missing+=(busybox-static)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh-keygen >/dev/null || missing+=(openssh-client)
command -v sudo >/dev/null || missing+=(sudo)
[ -x /usr/bin/conmon ] || missing+=(conmon)
command -v modinfo >/dev/null || [ -x /usr/sbin/modinfo ] || missing+=(kmod)
command -v dkms >/dev/null || [ -x /usr/sbin/dkms ] || missing+=(dkms)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "lab/deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
