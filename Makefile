# gpuop: every command a user or CI needs. `make test` is what CI runs.
SHELL := /bin/bash
VENV := .venv
LAB ?= gpuop-lab
PYTEST_ARGS ?=
include lab/versions.env
# The lab node's containerd: debian (the package's 1.6.20) or $(CONTAINERD2_VERSION) (built from its Go module).
CONTAINERD ?= debian
ifeq ($(CONTAINERD),debian)
CONTAINERD_DATA =
else ifeq ($(CONTAINERD),$(CONTAINERD2_VERSION))
CONTAINERD_DATA = --data containerd_binary=$$(lab/build.sh containerd2)/containerd
else
$(error CONTAINERD=$(CONTAINERD): expected debian or $(CONTAINERD2_VERSION))
endif

.PHONY: setup deps containerd2 lab-up lab-down lab-status test unit run fix audit bench

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

deps:
	@lab/deps.sh

containerd2:
	lab/build.sh containerd2 >/dev/null

lab-up:
	@lab/lab.sh up $(LAB)

lab-down:
	lab/lab.sh down $(LAB)

lab-status:
	lab/lab.sh status $(LAB)

unit: setup
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

test: setup deps containerd2 lab-up
	$(VENV)/bin/pytest -q tests $(PYTEST_ARGS)

run: setup deps lab-up
	@$(VENV)/bin/pyinfra inventory.py deploy.py -y $(CONTAINERD_DATA)

fix: setup deps lab-up
	$(VENV)/bin/pyinfra inventory.py fix.py -y $(CONTAINERD_DATA)

audit: setup deps lab-up
	$(VENV)/bin/pyinfra inventory.py audit.py -y $(CONTAINERD_DATA)

bench: setup deps lab-up
	bench/lab_start.sh
	bench/rerun.sh
	bench/audit.sh
	bench/fix.sh
	$(VENV)/bin/python bench/roundtrips.py
