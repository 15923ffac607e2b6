# gpuop: every command a user or CI needs. `make test` is what CI runs.
SHELL := /bin/bash
VENV := .venv
LAB ?= gpuop-lab
PYTEST_ARGS ?=
include lab/versions.env
# The lab node's containerd: debian or 1.6.20 (Debian's package), or one of CONTAINERD_VERSIONS
# (lab/versions.env), built from its Go module on first use.
CONTAINERD ?= debian
CONTAINERD_LIST := $(subst ",,$(CONTAINERD_VERSIONS))
ifneq ($(filter $(CONTAINERD),debian 1.6.20),)
CONTAINERD_BIN = /usr/bin/containerd
CONTAINERD_DATA =
else ifneq ($(filter $(CONTAINERD),$(CONTAINERD_LIST)),)
CONTAINERD_BIN = $$(lab/build.sh containerd $(CONTAINERD))/containerd
CONTAINERD_DATA = --data containerd_binary=$(CONTAINERD_BIN)
else
$(error CONTAINERD=$(CONTAINERD): expected debian, 1.6.20 or one of $(CONTAINERD_LIST))
endif
# The GPU node: kwok (every lab node kwok's: the seed's lab) or kubelet (a real kubelet runs
# lab-node-0 on the lab containerd, in a namespace of its own: lab/kubeletnode.sh).
NODE ?= kwok
ifeq ($(NODE),real)
$(info NODE=real is now NODE=kubelet (the lab node a real kubelet runs); taken as NODE=kubelet)
override NODE := kubelet
endif
ifeq ($(NODE),kubelet)
NODE_ENV = LAB_KUBELET_NODE=lab-node-0 LAB_CONTAINERD=$(CONTAINERD_BIN)
NODE_DATA = --data kubelet_node=lab-node-0
else ifneq ($(NODE),kwok)
$(error NODE=$(NODE): expected kwok or kubelet)
endif
# REBOOT=true (with NODE=kubelet): after step 8, restart the node's containerd as a reboot would (reboot.txt).
REBOOT ?= false

.PHONY: setup deps lint binaries containerds nvidia-ctk kubelet lab-up lab-down lab-status test unit run fix audit bench gpu-kit gpu-proof

# Every module of the project compiled once here (changed ones only), since Python may be told
# not to write bytecode (PYTHONDONTWRITEBYTECODE): else every run compiles them again (~0.1 s a run).
setup: $(VENV)/.installed
	@$(VENV)/bin/python -m compileall -q -x '/\.venv/' .

# The project itself goes in editable (pyproject.toml): its connector's entry point, for pyinfra.
$(VENV)/.installed: requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

deps:
	@lab/deps.sh

# Every lab binary the tests need, built from Go modules (cached).
binaries:
	lab/build.sh all

containerds:
	lab/build.sh containerds

nvidia-ctk:
	lab/build.sh nvidia-ctk >/dev/null

# The GPU proof (docs/gpu-proof.md). Its kit as one file, to carry to a machine with a GPU:
gpu-kit:
	@lab/build.sh gpu-kit-archive
# On a machine with an NVIDIA GPU and its driver, as root: the proof and its table in GPU_PROOF_OUT;
# STAND_IN=true where no GPU is (the lab's stand-in GPU; what the test suite runs).
GPU_PROOF_OUT ?= out/gpu-proof
STAND_IN ?= false
gpu-proof: setup
	bench/gpu/proof.sh "$$(lab/build.sh gpu-kit)" $(GPU_PROOF_OUT) $(if $(filter true,$(STAND_IN)),--stand-in)

kubelet:
	lab/build.sh kubelet >/dev/null

lab-up:
	@$(NODE_ENV) lab/lab.sh up $(LAB)

lab-down:
	lab/lab.sh down $(LAB)
	$(BESIDE) lab/lab.sh down $(LAB)-beside
	$(RUNS) lab/lab.sh down $(LAB)-runs

lab-status:
	lab/lab.sh status $(LAB)

# The style (pyproject.toml's [tool.ruff]): formatted as ruff formats it, and nothing its linter
# flags. `make test` runs it before the suite; `ruff format .` and `ruff check --fix .` mend most.
lint: setup
	$(VENV)/bin/ruff format --check -q .
	$(VENV)/bin/ruff check -q .

unit: setup
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

# Four pytest lanes side by side, started at once. The lab's (marker lab: they share its cluster
# and its lock, the lab containerd's tests among them: they run no Pod), once the lab is up. The
# incident's runs (marker lab too: the playbook's drift and deploy tests and the lab repair's),
# which need only a lab cluster and no name of it and never take a lab down (a lab's down stops
# every lab daemon not started for another lab: the lab lane's too), on a third one ($(LAB)-runs,
# a kubeconfig of its own: their runs name its context, so its lock is its own), so that the lab's
# two halves wait on their clusters at once. Those that drive a lab of their own
# (marker beside: the kubelet node, the fleet's simulated nodes, whose Pods' cgroups on the host
# must not meet another module's) on a second lab cluster ($(LAB)-beside, likewise), one module at
# a time: the longest lane, and the one the others stay off: its cluster is made first (clusters
# are made one at a time: the others' wait for it), and the others run niced (the host's CPU goes
# to it first). And those that need no cluster (unit, the containerd version
# matrix, the harness's), once the runs' lane has ended (their CPU off the busy start, when three
# clusters come up and the beside lane's kubelet node starts): under a lab name of their
# own, so that no lab's down (tests/lab's) stops their daemons, and a kubeconfig that is not there.
# Each spends most of its time waiting on a cluster or a daemon.
# Each prints its 30 slowest durations; the others' output follows the lab's. (Exit 5, no
# test selected by PYTEST_ARGS, fails none.)
# Each its own short temporary root: a lab root's socket path has at most 108 bytes, and pytest's
# own numbered roots grow longer with every run on the machine (pytest-99, pytest-127...).
# Every lab binary is built beside the lanes from the start (niced: the lab's waits on the cluster
# stay on time); a test asks lab/build.sh for what it needs, which waits for that one binary (one
# build of each at a time) or builds it. So on a new machine the clusters' lanes start once the
# cluster is built, the tests that need every containerd last in each (marker every_containerd).
PYTEST := $(VENV)/bin/pytest -q -p no:cacheprovider --durations=30
BESIDE := GPUOP_LAB=$(LAB)-beside KUBECONFIG=$(HOME)/.kwok/$(LAB)-beside.kubeconfig
RUNS := GPUOP_LAB=$(LAB)-runs KUBECONFIG=$(HOME)/.kwok/$(LAB)-runs.kubeconfig
RUNS_TESTS := tests/playbook/test_drift.py tests/playbook/test_deploy.py tests/fix
ALONE := GPUOP_LAB=$(LAB)-alone KUBECONFIG=$(HOME)/.kwok/$(LAB)-alone.kubeconfig
# The lanes that leave the CPU to the one beside the lab's, the longest: they have minutes to spare.
OFF := nice -n 10
# The beside lane's cluster made before the others' (at most 10 minutes waited for).
BESIDE_FIRST = for i in $$(seq 600); do [ -e "$$logs/beside-up" ] && break; sleep 1; done
# The clusterless lane after the runs' (at most an hour waited for): off the busy start.
AFTER_RUNS = for i in $$(seq 3600); do [ -e "$$logs/runs-done" ] && break; sleep 1; done

test: setup deps lint
	@logs=$$(mktemp -d); trap 'rm -rf "$$logs"' EXIT; \
	nice -n 19 lab/build.sh all >"$$logs/builds" 2>&1 & builds=$$!; \
	{ $(AFTER_RUNS); $(ALONE) $(OFF) $(PYTEST) --basetemp=/tmp/gpuop-pytest-alone tests -m "not lab and not beside" $(PYTEST_ARGS); } >"$$logs/alone" 2>&1 & alone=$$!; \
	{ $(BESIDE) lab/lab.sh up $(LAB)-beside; up=$$?; touch "$$logs/beside-up"; [ $$up -eq 0 ] && $(BESIDE) $(PYTEST) --basetemp=/tmp/gpuop-pytest-beside tests -m beside $(PYTEST_ARGS); } >"$$logs/beside" 2>&1 & beside=$$!; \
	$(BESIDE_FIRST); \
	{ $(RUNS) $(OFF) lab/lab.sh up $(LAB)-runs && $(RUNS) $(OFF) $(PYTEST) --basetemp=/tmp/gpuop-pytest-runs $(RUNS_TESTS) -m lab $(PYTEST_ARGS); rc=$$?; touch "$$logs/runs-done"; exit $$rc; } >"$$logs/runs" 2>&1 & runs=$$!; \
	$(NODE_ENV) $(OFF) lab/lab.sh up $(LAB) || { kill $$builds $$alone $$beside $$runs; exit 1; }; \
	$(OFF) $(PYTEST) --basetemp=/tmp/gpuop-pytest-lab tests -m lab $(foreach t,$(RUNS_TESTS),--ignore=$(t)) $(PYTEST_ARGS); lab_rc=$$?; \
	wait $$runs; runs_rc=$$?; wait $$beside; beside_rc=$$?; wait $$alone; alone_rc=$$?; wait $$builds; built=$$?; \
	echo "--- the incident's runs, on a lab of their own ($(RUNS_TESTS)):"; cat "$$logs/runs"; \
	echo "--- the tests run beside the lab's, on a lab of their own:"; cat "$$logs/beside"; \
	echo "--- the tests that need no cluster:"; cat "$$logs/alone"; \
	echo "--- every lab binary, built beside them (lab/build.sh all):"; cat "$$logs/builds"; \
	for rc in $$lab_rc $$runs_rc $$beside_rc $$alone_rc; do [ $$rc -eq 0 -o $$rc -eq 5 ] || exit 1; done; [ $$built -eq 0 ]

run: setup deps lab-up
	@$(VENV)/bin/pyinfra inventory.py deploy.py -y $(CONTAINERD_DATA) $(NODE_DATA) --data reboot=$(REBOOT)

fix: setup deps nvidia-ctk lab-up
	$(VENV)/bin/pyinfra inventory.py fix.py -y $(CONTAINERD_DATA) $(NODE_DATA) --data nvidia_ctk_binary=$$(lab/build.sh nvidia-ctk)/nvidia-ctk

audit: setup deps lab-up
	$(VENV)/bin/pyinfra inventory.py audit.py -y $(CONTAINERD_DATA) $(NODE_DATA)

bench: setup deps binaries lab-up
	bench/lab_start.sh
	bench/rerun.sh
	bench/audit.sh
	bench/fix.sh
	$(VENV)/bin/python bench/roundtrips.py
	$(VENV)/bin/python bench/nodes.py
	bench/kubelet_node.sh
