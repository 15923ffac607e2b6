# gpuop: every command a user or CI needs. `make test` is what CI runs.
SHELL := /bin/bash
VENV := .venv
LAB ?= gpuop-lab
PYTEST_ARGS ?=

.PHONY: setup deps lab-up lab-down lab-status test unit run audit bench

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

deps:
	lab/deps.sh

lab-up:
	lab/lab.sh up $(LAB)

lab-down:
	lab/lab.sh down $(LAB)

lab-status:
	lab/lab.sh status $(LAB)

unit: setup
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

test: setup deps lab-up
	$(VENV)/bin/pytest -q tests $(PYTEST_ARGS)

run: setup lab-up
	$(VENV)/bin/pyinfra inventory.py deploy.py -y

audit: setup lab-up
	$(VENV)/bin/pyinfra inventory.py audit.py -y

bench: setup deps lab-up
	bench/lab_start.sh
	bench/rerun.sh
	bench/audit.sh
	$(VENV)/bin/python bench/hosts.py
