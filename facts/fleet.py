"""Facts about a real node: the containerd that runs on it and the kubelet that talks to it.

A real node is not a lab root: its containerd runs under systemd with flags of its own, or none.
Everything is found from the processes, never assumed, and read in one command that writes
nothing (no temporary file, no socket left behind).
"""

import base64
import shlex

from pyinfra.api import FactBase

from gpuop.regen import nvidia_binaries

from .containerd import cri_answer, cri_info, restart_answer, restart_merge
from .files import TAR_OF_ARGS, untarred

DEFAULT_CONFIG = "/etc/containerd/config.toml"
DEFAULT_SOCKET = "/run/containerd/containerd.sock"
_SECTION = "--- gpuop "

# Per containerd: its --config and --address (both forms of each flag), relative to its cwd.
_DAEMON_FLAGS = (
    'o=$(tr "\\0" "\\n" <"/proc/$p/cmdline" | { c=' + DEFAULT_CONFIG + '; a=; n=; '
    'while IFS= read -r x; do case "$n" in c) c=$x;; a) a=$x;; esac; n=; case "$x" in '
    '-c|--config) n=c;; -a|--address) n=a;; -c=*|--config=*) c=${x#*=};; -a=*|--address=*) a=${x#*=};; '
    'esac; done; printf "%s\\n%s\\n" "$c" "$a"; }); '
    'cfg=$(echo "$o" | sed -n 1p); addr=$(echo "$o" | sed -n 2p); '
    'case "$cfg" in /*) ;; *) cfg="$(readlink "/proc/$p/cwd")/$cfg";; esac; '
)
# The socket the config names when no flag does (grpc.address), else containerd's default.
_CONFIG_ADDRESS = (
    '[ -n "$addr" ] || addr=$(awk -F\'"\' \'/^[[:space:]]*\\[/ {t=$0; gsub(/[[:space:]]/, "", t)} '
    't == "[grpc]" && $1 ~ /^[[:space:]]*address[[:space:]]*=/ {print $2; exit}\' "$cfg" 2>/dev/null); '
    f'[ -n "$addr" ] || addr={DEFAULT_SOCKET}; addr=${{addr#unix://}}; '
)
# kubelet's --container-runtime-endpoint, else the last containerRuntimeEndpoint of its --config
# file and then its --config-dir drop-ins (*.conf, in name order, as kubelet merges them), YAML or
# JSON (EKS: config.json; RKE2: kubelet.conf.d only), else its default (since 1.27).
_FLAG = "/^{f}=/{{s/^[^=]*=//p;q}};/^{f}$/{{n;p;q}}"
_ENDPOINT_KEY = ("-e 's/.*\"containerRuntimeEndpoint\"[[:space:]]*:[[:space:]]*\"\\([^\"]*\\)\".*/\\1/p' "
                 "-e 's/^[[:space:]]*containerRuntimeEndpoint[[:space:]]*:[[:space:]]*//p'")
_KUBELET_ENDPOINT = (
    'c=$(tr "\\0" "\\n" <"/proc/$p/cmdline"); w=$(readlink "/proc/$p/cwd"); '
    f'ke=$(echo "$c" | sed -n "{_FLAG.format(f="--container-runtime-endpoint")}"); '
    f'if [ -z "$ke" ]; then k=$(echo "$c" | sed -n "{_FLAG.format(f="--config")}"); '
    f'kd=$(echo "$c" | sed -n "{_FLAG.format(f="--config-dir")}"); '
    'case "$k" in ""|/*) ;; *) k="$w/$k";; esac; case "$kd" in ""|/*) ;; *) kd="$w/$kd";; esac; '
    'kd=${kd:-$kd0}; for f in $k ${kd:+"$kd"/*.conf}; do [ -f "$f" ] || continue; '
    f'v=$(sed -n {_ENDPOINT_KEY} "$f" 2>/dev/null | head -n 1 | tr -d "\\"\' "); [ -z "$v" ] || ke=$v; done; fi; '
    'ke=${ke:-$ke0}; ke=${ke#unix://}; '
)
# k3s is one multicall binary (FLEETS.md): its containerd's /proc/PID/exe is the k3s file, told
# apart by argv[0]'s base name, and its kubelet runs inside the k3s process, whose endpoint is
# its flag, else the kubelet.conf.d drop-ins under its --data-dir, else its containerd's socket.
# Any other process of that binary (ctr, crictl, kubectl) is skipped. Each candidate's kind and
# the defaults of its endpoint (ke0) and drop-ins (kd0) are set here.
K3S_SOCKET = "/run/k3s/containerd/containerd.sock"
_KIND = (
    f'ke0=unix://{DEFAULT_SOCKET}; kd0=; '
    'if [ "$kind" = k3s ]; then a0=$(tr "\\0" "\\n" <"/proc/$p/cmdline" | head -n 1); case "${a0##*/}" in '
    'containerd) kind=containerd;; '
    'k3s|k3s-server|k3s-agent) kind=kubelet; '
    f'dd=$(tr "\\0" "\\n" <"/proc/$p/cmdline" | sed -n "{_FLAG.format(f="--data-dir")}"); '
    f'kd0=${{dd:-/var/lib/rancher/k3s}}/agent/etc/kubelet.conf.d; ke0=unix://{K3S_SOCKET};; '
    '*) continue;; esac; fi; '
)
# The binary asked for the restart view: the daemon's own when it is named containerd, else the
# `containerd` beside it (k3s's link to itself, which runs containerd), else none.
_RESTART_BINARY = 'case "${e##*/}" in containerd) b=$e;; *) b=${e%/*}/containerd; [ -x "$b" ] || b=;; esac; '
# The files the config's top-level `imports` reach, and every file of the conf.d beside it
# (a drop-in there that no import reaches is a finding). tomllib re-reads `imports` exactly.
_WRITTEN = (
    'set -- "$cfg"; d=${cfg%/*}; '
    'for g in $(awk \'/^[[:space:]]*\\[/ {exit} /^[[:space:]]*imports[[:space:]]*=/ {on=1} '
    'on {print} on && /\\]/ {exit}\' "$cfg" 2>/dev/null | grep -o "\\"[^\\"]*\\"\\|\'[^\']*\'" | tr -d "\\"\'"); do '
    'case "$g" in /*) ;; *) g="$d/$g";; esac; for f in $g; do [ -f "$f" ] && set -- "$@" "$f"; done; done; '
    'for f in "$d"/conf.d/* "$d"/config.toml.tmpl "$d"/config-v3.toml.tmpl; do [ -f "$f" ] && set -- "$@" "$f"; done; '
)


# The CDI specs of GPUs in the spec directories the daemon reads (crictl's cdiSpecDirs, from its
# answer above): the files that name the kind nvidia.com/gpu.
_CDI_SPECS = (
    'for d in $(printf "%s" "$out" | tr -d "\\n" | sed -n "s/.*\\"cdiSpecDirs\\": *\\[\\([^]]*\\)\\].*/\\1/p" | tr -d "\\" " | tr , " "); do '
    'grep -l -s -E "nvidia\\.com/gpu" "$d"/*.yaml "$d"/*.yml "$d"/*.json; done; '
)


class NodeRuntime(FactBase):
    """
    What runs on a real node, read-only and in one command (k3s's multicall too: its containerd by
    argv[0], its kubelet inside the k3s process); its hostname; kubelet's command line
    and the endpoint it uses (``--container-runtime-endpoint``, else ``containerRuntimeEndpoint``
    of its ``--config`` and ``--config-dir`` drop-ins, YAML or JSON, else its default); every containerd process (found by its
    binary's name, whatever its flags), each with its binary (``/proc/PID/exe``), command line,
    ``--config`` (default /etc/containerd/config.toml) and socket (``--address``, else the
    config's ``grpc.address``, else the default). The three views are read for the one daemon
    that ``serves``, the node's runtime (kubelet's; with no kubelet, the only one, or the one on
    the default socket): the files written (its config, the files its imports reach, its
    conf.d, and the k3s/RKE2 templates beside it), the NVIDIA runtime binaries where k3s looks
    at start (``nvidia_runtimes``: what its next start registers, ``gpuop.regen``), what it
    holds (``crictl info`` on its socket) and what its binary's next start would load
    (``config dump``, see ``facts.containerd.restart_merge``).

    .. code:: python

        host.get_fact(NodeRuntime, crictl="crictl")
        {"hostname": "gpu-a",
         "kubelet": {"pid": 901, "exe": "/usr/bin/kubelet", "args": [...],
                     "endpoint": "/run/containerd/containerd.sock"},  # None without a kubelet
         "containerds": [{"pid": 812, "exe": "/usr/bin/containerd", "args": ["/usr/bin/containerd"],
                          "binary": "/usr/bin/containerd",  # what the restart view runs
                          "config": "/etc/containerd/config.toml",
                          "address": "/run/containerd/containerd.sock", "serves": True,
                          "files": {"/etc/containerd/config.toml": {"mode": "644", "text": "..."}},
                          "loaded": {"cri": "ok", "runtimes": ["runc"], ...}, "nvidia_runtimes": [],
                          "restart": {"version": "1.6.20", "runtimes": ["runc"], "cri_ok": True, ...}}]}

    A daemon that does not serve has ``serves`` False, and empty ``files``, ``loaded`` and
    ``restart``: asking its CRI would not be read-only (a containerd writes its introspection
    uuid at its first CRI Status).
    """

    @staticmethod
    def default():
        return {"hostname": "", "containerds": [], "kubelet": None}

    def command(self, crictl="crictl"):
        # `ls -l` names every process's binary in one process (a readlink each costs a fork per
        # process on a busy node); shims and ctr are other binaries and do not match.
        found = ("ls -l /proc/[0-9]*/exe 2>/dev/null | sed -nE "
                 "'s@.* /proc/([0-9]+)/exe -> (.*/)?(containerd|kubelet|k3s)( \\(deleted\\))?$@\\3:\\1@p'")
        q = chr(34)  # the chosen daemon's values, as shell words
        return (
            f'echo "{_SECTION}hostname $(cat /proc/sys/kernel/hostname)"; ke=; list=; '
            f'for x in $({found}); do kind=${{x%:*}}; p=${{x#*:}}; {_KIND}'
            f'echo "{_SECTION}$kind $p"; e=$(readlink "/proc/$p/exe"); e=${{e% (deleted)}}; echo "$e"; '
            'base64 -w0 <"/proc/$p/cmdline"; echo; '
            f'if [ "$kind" = kubelet ]; then {_KUBELET_ENDPOINT}echo "$ke"; continue; fi; '
            f'{_DAEMON_FLAGS}{_CONFIG_ADDRESS}{_RESTART_BINARY}echo "$cfg"; echo "$addr"; echo "$b"; '
            'list="$list$p|$addr|$cfg|$b\\n"; done; '
            # CRI is asked of one daemon, the node's runtime: the one on kubelet's endpoint; with
            # no kubelet, the only one, or the one on the default socket. Asking another is not
            # read-only: a containerd writes its introspection uuid at its first CRI Status.
            'n=$(printf "%b" "$list" | grep -c .); '
            'printf "%b" "$list" | while IFS="|" read -r p addr cfg exe; do '
            'if [ -n "$ke" ]; then [ "$addr" = "$ke" ] || continue; '
            f'elif [ "$n" -gt 1 ]; then [ "$addr" = {DEFAULT_SOCKET} ] || continue; fi; '
            f'echo "{_SECTION}runtime $p"; ( {_WRITTEN}{TAR_OF_ARGS} ) </dev/null | grep . || echo; '
            f'echo "{_SECTION}restart"; {{ {restart_merge(q + "$exe" + q, q + "$cfg" + q)}; }} </dev/null; '
            f'echo "{_SECTION}cri"; out=$({{ {cri_info(shlex.quote(crictl), q + "$addr" + q)}; }} </dev/null); printf "%s\\n" "$out"; '
            f'echo "{_SECTION}cdi"; {_CDI_SPECS}'
            # what k3s and RKE2 would register at their next start (gpuop.regen)
            f'echo "{_SECTION}nvidia"; for f in {" ".join(nvidia_binaries())}; do [ -f "$f" ] && echo "$f"; done; '
            'break; done'
        )

    def process(self, output):
        result = self.default()
        sections, current = [], None
        for line in output:
            if line.startswith(_SECTION):
                current = (line[len(_SECTION):].split(" ", 1), [])
                sections.append(current)
            elif current is not None:
                current[1].append(line)
        daemons, runtime = {}, None
        for (kind, *rest), lines in sections:
            if kind == "hostname":
                result["hostname"] = rest[0].strip() if rest else ""
            elif kind == "kubelet":
                exe, args, endpoint = (lines + ["", "", ""])[:3]
                result["kubelet"] = {"pid": int(rest[0]), "exe": exe, "args": _args(args), "endpoint": endpoint}
            elif kind == "containerd":
                exe, args, config, address, binary = (lines + [""] * 5)[:5]
                daemons[rest[0]] = {"pid": int(rest[0]), "exe": exe, "args": _args(args), "config": config,
                                    "address": address, "binary": binary, "serves": False, "files": {},
                                    "restart": None, "loaded": None, "gpu_cdi_specs": [], "nvidia_runtimes": []}
                result["containerds"].append(daemons[rest[0]])
            elif kind == "runtime":
                runtime = daemons[rest[0]]
                runtime.update(serves=True, files=untarred(lines[0]) if lines and lines[0].strip() else {})
            elif kind == "restart":
                runtime["restart"] = restart_answer(lines) if lines else None
            elif kind == "cri":
                runtime["loaded"] = cri_answer(lines)
            elif kind == "cdi":
                runtime["gpu_cdi_specs"] = [line for line in lines if line.strip()]
            elif kind == "nvidia":
                runtime["nvidia_runtimes"] = [line for line in lines if line.strip()]
        return result


def _args(b64: str) -> list:
    return base64.b64decode(b64).decode(errors="replace").split("\0")[:-1]
