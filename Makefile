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
CONTAINERD_DATA =
else ifneq ($(filter $(CONTAINERD),$(CONTAINERD_LIST)),)
CONTAINERD_DATA = --data containerd_binary=$$(lab/build.sh containerd $(CONTAINERD))/containerd
else
$(error CONTAINERD=$(CONTAINERD): expected debian, 1.6.20 or one of $(CONTAINERD_LIST))
endif

.PHONY: setup deps containerds nvidia-ctk kubelet lab-up lab-down lab-status test unit run fix audit bench

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

deps:
	@lab/deps.sh

containerds:
	lab/build.sh containerds

nvidia-ctk:
	lab/build.sh nvidia-ctk >/dev/null

kubelet:
	lab/build.sh kubelet >/dev/null

lab-up:
	@lab/lab.sh up $(LAB)

lab-down:
	lab/lab.sh down $(LAB)

lab-status:
	lab/lab.sh status $(LAB)

unit: setup
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

test: setup deps containerds nvidia-ctk kubelet lab-up
	$(VENV)/bin/pytest -q tests $(PYTEST_ARGS)

run: setup deps lab-up
	@$(VENV)/bin/pyinfra inventory.py deploy.py -y $(CONTAINERD_DATA)

fix: setup deps nvidia-ctk lab-up
	$(VENV)/bin/pyinfra inventory.py fix.py -y $(CONTAINERD_DATA) --data nvidia_ctk_binary=$$(lab/build.sh nvidia-ctk)/nvidia-ctk

audit: setup deps lab-up
	$(VENV)/bin/pyinfra inventory.py audit.py -y $(CONTAINERD_DATA)

bench: setup deps containerds lab-up
	bench/lab_start.sh
	bench/rerun.sh
	bench/audit.sh
	bench/fix.sh
	$(VENV)/bin/python bench/roundtrips.py
	$(VENV)/bin/python bench/nodes.py
