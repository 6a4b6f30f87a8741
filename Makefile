# gpufleet: the collection gpufleet.cluster and the gpufleet command.
#   make test   installs what it needs and runs every test tier
#   make unit   the fast tier (pure Python, seconds), for constant use
#   make integration  real Docker engine and nodes (installs and starts the engine if needed)
#   make molecule     every host role's Molecule scenario (SCENARIO=docker for one)
#   make release      the release checks: collection tarball, Galaxy import, EE build context
#   make dist / make ee   the collection tarball / the execution environment image (docs/release.md)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BUILD := build
COLLECTION_DIR := $(BUILD)/ansible_collections/gpufleet/cluster
VERSION := $(shell sed -n 's/^version: *//p' galaxy.yml)
EE_TAG ?= gpufleet-ee:$(VERSION)
EE_RUNTIME ?= podman
ANSIBLE_TEST_PYTHON := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')

.PHONY: test demo demo-delete unit unit-all test-tools engine integration molecule molecule-hardware \
	sanity release lint changelog-lint venv collection dist ee clean

# Every tier, in two lanes side by side (scripts/test-tiers.sh) that share the CPU.
# Integration, the longest, has a lane of its own from the start: it waits on containers, SSH
# and polls for part of its time, which the other lane's work fills. The other lane runs the
# tiers that need no Docker engine, then Molecule, which keeps both cores busy on its own and
# so starts once that lane's lighter tiers are done, near integration's end (before, it came
# after integration in the first lane while the second sat idle: 2440 s in all at e43ace8).
# Each tier's output is printed whole when it ends, and the time each took at the end, pass or
# fail. A lane is tiers joined by commas: TIERS=unit-all,lint runs just those two.
TIERS := integration unit-all,sanity,release,lint,changelog-lint,molecule

test: venv
	@scripts/test-tiers.sh $(TIERS)
	@echo "all test tiers passed"

# The main job on the local default: a 2-node local cluster fleet, the fleet table, then a
# distributed task on it that prints each rank, the master's address and the MPI hostfile.
demo: venv engine
	$(BIN)/gpufleet apply -y -f inventories/demo/demo.dstack.yml
	$(BIN)/gpufleet fleet
	$(BIN)/gpufleet apply -y -f examples/hello.dstack.yml
	$(BIN)/gpufleet ps

demo-delete: venv
	$(BIN)/gpufleet delete -y -f inventories/demo/demo.dstack.yml

$(BIN)/activate: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(BIN)/activate

# The venv's Ansible finds this collection from any folder: ansible-core also looks for an
# ansible_collections/ folder in each sys.path entry (COLLECTIONS_SCAN_SYS_PATH), so a symlink
# in the venv's site-packages to this checkout is enough for `.venv/bin/ansible-playbook
# gpufleet.cluster.<playbook>`, ansible-doc and roles by FQCN, with no ANSIBLE_COLLECTIONS_PATH.
# Made once, and again when it points elsewhere; a real folder there (an install) is left alone.
venv: $(BIN)/activate
	@site=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	link=$$site/ansible_collections/gpufleet/cluster && \
	if [ -e "$$link" ] && [ ! -L "$$link" ]; then \
		echo "$$link is not a symlink: left as it is"; \
	elif [ "$$(readlink "$$link")" != "$(CURDIR)" ]; then \
		mkdir -p "$$(dirname "$$link")" && ln -sfn "$(CURDIR)" "$$link" && \
		echo "$$link -> $(CURDIR)"; \
	fi

# The fast tier, for constant use: everything but the multi-second stress and property tests
# and the tests against local cloud API doubles (unit-all runs those too).
unit: venv test-tools
	$(BIN)/python -m pytest -q -m "not slow and not cloud" tests/unit

unit-all: venv test-tools
	$(BIN)/python -m pytest -q tests/unit

# What the tests run for real besides Python: HAProxy, openssl and Pebble (installed from
# Debian's packages when missing).
test-tools:
	scripts/ensure-test-tools.sh

# A running Docker engine and debootstrap (installed from Debian's packages when missing).
engine:
	scripts/ensure-docker-engine.sh

# Real parts: the local backend's node image and nodes on this machine's Docker engine.
# INTEGRATION_JOBS test files at a time (pytest-xdist; whole files, so a module's fleet is made
# once, the longest files first: tests/integration/conftest.py). Each worker makes its own
# shared task fleet. INTEGRATION_JOBS=1 runs them one after another.
INTEGRATION_JOBS ?= 2
integration: venv engine test-tools
	$(BIN)/python -m pytest -q -n $(INTEGRATION_JOBS) --dist loadfile --no-loadscope-reorder \
		--durations=15 tests/integration

# The host roles' Molecule scenarios (extensions/molecule/*), each on its own containers,
# network and HTTP server, MOLECULE_JOBS of them at a time (2: a scenario spends much of its
# time waiting on its containers); `hardware` is left out: it needs real GPU machines
# (molecule-hardware). With more than one at a time, each scenario's output is printed whole
# when it ends (build/molecule/SCENARIO.log). Every scenario runs, also after one failed.
MOLECULE_ALL := $(filter-out hardware resources,$(notdir $(patsubst %/,%,$(dir \
	$(wildcard extensions/molecule/*/molecule.yml)))))
# The longest first (about 210, 180, 170, 150, 150, 115, 95 and 85 s alone on a 2-core machine,
# gateway's 170 s measured with other work on both cores; the others take 65-75 s), so that the
# two at a time end close together instead of one long scenario running alone at the end.
MOLECULE_LONGEST := gcp_gpudirect docker gateway firewall infiniband nvidia nccl_tests monitoring
MOLECULE_SCENARIOS := $(filter $(MOLECULE_ALL),$(MOLECULE_LONGEST)) \
	$(filter-out $(MOLECULE_LONGEST),$(MOLECULE_ALL))
SCENARIO ?= $(MOLECULE_SCENARIOS)
MOLECULE_JOBS ?= 2
# One scenario (SCENARIO=docker) streams its output as it goes.
molecule_jobs = $(if $(word 2,$(SCENARIO)),$(MOLECULE_JOBS),1)
MOLECULE_ENV = PATH=$(CURDIR)/$(BIN):$$PATH \
	ANSIBLE_COLLECTIONS_PATH=$$($(BIN)/python -c 'from gpufleet._collection import \
	collections_path; print(collections_path())')
# One scenario ($$1), its time appended to build/molecule-times; exit 1 when it failed.
define MOLECULE_ONE
s=$$1; log=$(BUILD)/molecule/$$s.log; start=$$(date +%s); \
if [ $(molecule_jobs) -le 1 ]; then \
	echo "== molecule scenario $$s"; \
	molecule test -s "$$s" 2>&1 | tee "$$log"; rc=$${PIPESTATUS[0]}; \
else \
	echo "== molecule scenario $$s started"; \
	molecule test -s "$$s" > "$$log" 2>&1; rc=$$?; \
fi; \
seconds=$$(( $$(date +%s) - start )); \
{ \
	flock 9; \
	if [ $(molecule_jobs) -gt 1 ]; then \
		echo "== molecule scenario $$s: output"; cat "$$log"; \
	fi; \
	echo "== molecule scenario $$s $$([ $$rc -eq 0 ] && echo passed || echo FAILED) in $${seconds}s"; \
	printf "%-16s %5ds%s\n" "$$s" "$$seconds" "$$([ $$rc -ne 0 ] && echo "  FAILED")" \
		>> $(BUILD)/molecule-times; \
} 9> $(BUILD)/molecule/.lock; \
[ $$rc -eq 0 ]
endef

# The Debian 12 test image is built (or found) once, before scenarios that each ask for it run
# side by side.
molecule: venv engine
	@mkdir -p $(BUILD)/molecule; : > $(BUILD)/molecule-times; \
	export $(MOLECULE_ENV); \
	image=$$($(BIN)/python tests/molecule/image.py) || exit 1; echo "== molecule image $$image"; \
	printf '%s\n' $(SCENARIO) | xargs -P $(molecule_jobs) -I{} bash -c '$(MOLECULE_ONE)' _ {}; \
	rc=$$?; sort -o $(BUILD)/molecule-times $(BUILD)/molecule-times; \
	[ $$rc -eq 0 ] || { echo "molecule: failed: $$(grep FAILED $(BUILD)/molecule-times \
		| cut -d' ' -f1 | tr '\n' ' ')"; exit 1; }

# Every role against real machines: GPUFLEET_HARDWARE_INVENTORY names an inventory of them.
molecule-hardware: venv
	@test -n "$$GPUFLEET_HARDWARE_INVENTORY" || \
		{ echo "set GPUFLEET_HARDWARE_INVENTORY to an inventory of GPU hosts"; exit 2; }
	$(MOLECULE_ENV) $(BIN)/molecule test -s hardware

# ansible-test needs the collection at .../ansible_collections/gpufleet/cluster: copy the files
# git knows about (tracked, or new and not ignored) into build/ and test that copy.
collection: venv
	rm -rf $(COLLECTION_DIR)
	mkdir -p $(COLLECTION_DIR)
	git ls-files -z --cached --others --exclude-standard | \
		while IFS= read -r -d '' f; do [ -e "$$f" ] && printf '%s\0' "$$f"; done | \
		tar --null -T - -cf - | tar -C $(COLLECTION_DIR) -xf -

# The copy gets its own (empty) git repository: otherwise ansible-test finds the checkout's .git
# above it, where build/ is ignored, and skips every file. pip_bootstrap.py caches the script
# ansible-test bootstraps pip with (a stand-in where only the package index can be reached).
sanity: collection
	git -C $(COLLECTION_DIR) init --quiet
	$(BIN)/python tests/sanity/pip_bootstrap.py install
	cd $(COLLECTION_DIR) && PATH=$(CURDIR)/$(BIN):$$PATH \
		ansible-test sanity --venv --python $(ANSIBLE_TEST_PYTHON) --color no

# What a release ships, checked on a temporary copy (tests/release): the collection tarball and
# its install, galaxy-importer on it, and ansible-builder's build context for the EE.
release: venv
	$(BIN)/python -m pytest -q tests/release

# The collection tarball for Galaxy / Automation Hub, built from the files git knows about.
dist: collection
	$(BIN)/ansible-galaxy collection build --force $(COLLECTION_DIR) --output-path $(BUILD)/dist

# The AWX/AAP execution environment (execution-environment.yml): needs podman (or
# EE_RUNTIME=docker) and the base image's registry.
ee: dist
	rm -rf $(BUILD)/ee
	mkdir -p $(BUILD)/ee
	cp $(BUILD)/dist/gpufleet-cluster-$(VERSION).tar.gz $(BUILD)/ee/gpufleet-cluster.tar.gz
	$(BIN)/ansible-builder build -f execution-environment.yml --context $(BUILD)/ee/context \
		--container-runtime $(EE_RUNTIME) -t $(EE_TAG) -v3

lint: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint --profile production

changelog-lint: venv
	$(BIN)/antsibull-changelog lint

# Benchmarks: ratios against a baseline measured in the same run (see bench/RESULTS.md).
# reapply_speed and repo_shipping need the Docker engine (they run `make engine` when `docker
# info` fails).
bench: venv
	$(BIN)/python bench/inventory_speed.py
	$(BIN)/python bench/reapply_speed.py
	$(BIN)/python bench/aws_calls.py
	$(BIN)/python bench/cloud_inventory.py
	$(BIN)/python bench/repo_shipping.py

clean:
	rm -rf $(BUILD) $(VENV) .pytest_cache .hypothesis tests/output
