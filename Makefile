# `make gate`: the offline gate, on a machine that has run scripts/setup once: ruff, the import
# contracts, mypy, and every test that needs no model server, no download and no root (what it
# leaves out, and why, is tests/left-out.json, which the flake's `tests` check reads too).
# `make offline-gate` runs it in a network namespace with only loopback (root), which proves
# the first claim. `make test` is everything: scripts/test, the README's command.
SHELL := /bin/bash
export PATH := $(HOME)/.local/bin:$(PATH)
# uv never reaches an index: the environment setup made is the one the gate runs in.
export UV_OFFLINE := 1
# Setup ran: a program it installs that is missing fails its test (tests/support/requires.py).
export BOXMAKER_SETUP_DONE := 1
export HYPOTHESIS_PROFILE ?= ci
UV := uv run --frozen

.PHONY: gate lint contracts types gate-tests gate-collect offline-gate test verify-device

gate: lint contracts types gate-tests

lint:
	$(UV) ruff check .

contracts:
	$(UV) lint-imports

types:
	$(UV) mypy

gate-tests:
	$(UV) pytest --left-out=gate $(PYTEST_ARGS)

# The gate's selection, collected only (tests/test_gate.py runs this with no network).
gate-collect:
	$(UV) pytest --left-out=gate --collect-only -q

offline-gate:
	scripts/offline $(MAKE) gate

test:
	scripts/test

# The inference contract on the owner's host: measured against the router of the deployed config
# (CONFIG=<path>; default: bxctl's, the host's /etc/boxmaker/config/boxmaker.toml), checked, and
# written to docs/inference-contract.md (docs/deploy.md). VERIFY_ARGS: bxctl verify-device's
# options, e.g. VERIFY_ARGS="--tool-trials 5".
verify-device:
	$(UV) bxctl verify-device $(if $(CONFIG),--config $(CONFIG)) $(VERIFY_ARGS)
