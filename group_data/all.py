# Defaults for every host: the incident lab's own values. Override any with --data key=value
# (or per host in the hosts file); every value is parsed and checked before the first change.

gpuop_root = "/root/gpuop"  # absolute directory holding etc/, bin/, k8s/ and out/
lab_nodes = "lab-node-0,lab-node-1,lab-node-2"  # the cluster's lab nodes, in report order
gpu_node = "lab-node-0"  # step 6: the node whose device plugin advertises GPUs
gpu_count = 4  # step 6: GPUs advertised on gpu_node
timeslice_node = "lab-node-1"  # step 7: the node whose GPUs are time-sliced
physical_gpus = 4  # step 7: physical GPUs in timeslice_node (the hardware: 4 A100s)
replicas = 5  # step 7: time-slicing replicas per GPU (the ConfigMap's value)
vram_per_gpu_gib = 40  # step 7: memory of one physical GPU, in GiB
toolkit_image = "nvcr.io/nvidia/k8s/container-toolkit"  # step 8: toolkit image repository
toolkit_version_initial = "v1.16.2"  # step 8: tag rolled out first, on every node
toolkit_version_upgrade = "v1.17.0"  # step 8: tag of the upgrade that stalls
toolkit_memory_initial = "128Mi"  # step 8: memory request before the upgrade
toolkit_memory_upgrade = "64Gi"  # step 8: memory request of the upgrade (nodes have 32Gi)
toolkit_memory_fix = "256Mi"  # fix.py: memory request the repaired upgrade asks, one every lab node can take
max_unavailable = 1  # step 8: the DaemonSet's rollingUpdate.maxUnavailable
containerd_binary = "/usr/bin/containerd"  # the lab node's containerd daemon (Debian's 1.6.20); a containerd 2.x path selects that one (make CONTAINERD=2.4.2); empty, or absent on the host: none, use loaded_runtimes_observed
crictl_binary = "crictl"  # asks the lab containerd what it holds, through CRI
nvidia_ctk_binary = "nvidia-ctk"  # fix.py: the NVIDIA toolkit CLI that writes the repaired drop-in, as an operator would (make fix passes the lab's build); absent on the host: gpuop writes it
loaded_runtimes_observed = "runc"  # step 3: handlers the node's containerd held on the incident day, "recorded", used only where no lab containerd runs
kube_context = ""  # kubeconfig context on the target; empty: its current context
wait_timeout_s = 180  # longest wait for any live condition (scheduling, Ready Pods, the stall)
_timeout = 600  # pyinfra's deadline on each command of an operation, a wait included (a stalled SSH link or shell): above wait_timeout_s by a minute at least; kubectl, crictl and containerd calls have shorter ones of their own on the target
replay = False  # true: reset the lab to before step 1 (owned files, objects, GPU advertisements) and replay it all
reboot = False  # true (with kubelet_node): after step 8, restart the node's containerd as a reboot would, and record in reboot.txt what the node says against restart.txt's forecast
kubelet_node = ""  # the lab node a real kubelet runs on the lab containerd (make run NODE=kubelet: gpu_node; lab/kubeletnode.sh); empty: every lab node is kwok's

# Real nodes (pyinfra nodes.py audit.py): read-only, one command per node, the cluster read once
# from the machine that runs pyinfra.
node_name = ""  # the node's name in the cluster; empty: the host's own hostname
gpu_handler = "nvidia"  # the runtime handler GPU Pods need (RuntimeClass nvidia's)
gpu_driver = "gpu.nvidia.com"  # the DRA driver whose allocated devices are GPUs (NVIDIA's DRA driver): a Pod with such a claim is a GPU Pod
kubeconfig = ""  # the operator's kubeconfig on this machine; empty: $KUBECONFIG or ~/.kube/config (kube_context picks its context)
report = ""  # the fleet's JSON, written on this machine; empty: none
textfile = ""  # the audit in Prometheus' text format for node_exporter's textfile collector (the same series for both): the fleet's written on this machine, a lab host's on that host (an absolute path); empty: none
node_read_timeout_s = 150  # the deadline of a node's one read (crictl and config dump have shorter ones of their own)
cluster_read_timeout_s = (
    20  # the deadline of the fleet's one cluster read, every page of it (a cluster of many thousand Pods needs more)
)
reach = "ssh"  # how a node is read: ssh (its SSH login), or cluster (a short-lived privileged Pod on it, its log read through the API server: no SSH needed)
agent_heartbeat_s = 300  # the node agents' --heartbeat-s (default 300): reach=agent and nodes_from=agents take a condition whose heartbeat is older than two of these as stale (its agent stopped), not as the node's word
nodes_from = "inventory"  # which nodes a fleet run takes: inventory (the nodes file's hosts, else the cluster's GPU nodes), or agents (of those, only the ones whose node agent's condition is True: fix.py repairs where a gap is said, docs/agent.md)
node_pod_image = "docker.io/library/busybox:1.37"  # the cluster reach's Pod image and the repair's probe: any with a shell and nsenter, fully qualified (CRI-O refuses a short name it has no alias for); the lab imports one built from Debian's busybox-static
node_pod_namespace = "default"  # where gpuop makes its short-lived Pods (the cluster reach's reads: its Pod Security level must allow a privileged host-PID Pod; the repair's probes) and the repair's Lease

# Real nodes repaired (pyinfra nodes.py fix.py): one node at a time, from the audit's own judgment.
containerd_restart = "systemctl restart containerd"  # the command that restarts containerd on a node (k3s: systemctl restart k3s; RKE2: systemctl restart rke2-server or rke2-agent); a nodes file may set it per node
drain = True  # evict a node's Pods (PodDisruptionBudgets honoured) before its containerd restarts; false: only cordon, as teams that restart under running Pods do
drain_unmanaged = False  # true: delete Pods no controller owns (kubectl drain --force); false: such a Pod stops the node's drain, named
drain_delete_emptydir_data = False  # true: evict Pods with emptyDir volumes, their data deleted (kubectl drain --delete-emptydir-data); false: such a Pod stops the node's drain, named
drain_timeout_s = 300  # the drain's deadline: a budget that still blocks then leaves the node uncordoned untouched and stops the rollout
crio_restart = "systemctl restart crio"  # the command that restarts CRI-O on a node (never a reload: a SIGHUP's new runtimes reach its status, not its sandboxes, cri-o#10202); a nodes file may set it per node
restart_timeout_s = (
    120  # the deadline of each proof after the restart: CRI loads the handler, kubelet Ready, the probe Pod runs
)
repair_max_unavailable = 1  # how many nodes the repair takes out of service at once (in the order of their names); step 8's max_unavailable is the lab DaemonSet's
repair_max_failures = (
    0  # how many failed nodes the repair goes on past; one more stops it (the nodes not yet begun are untouched)
)
repair_lock_s = 60  # the fleet repair's lock (a Lease): renewed every third of this by a timer of its own; one not renewed for this long is a dead run's, taken over
