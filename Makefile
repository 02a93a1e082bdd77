# assay-runner: `make demo` and `make test` set the machine up first (root).
# scripts/setup.sh checks every step before acting, so a second run is fast.

# The command `make demo` observes; change it here only. The OpenAI Agents SDK
# fixture under its policy (docs/sdk.md): the workdir becomes the command's cwd,
# so the fixture script is `../openai_agent.py`; the interpreter is given as an
# absolute path, because a command path with a slash is resolved against the workdir.
DEMO_WORKSPACE := fixtures/agent/workspace
DEMO_CMD ?= --policy fixtures/agent/policy.toml --workdir $(DEMO_WORKSPACE) \
	-- $(CURDIR)/$(VENV)/bin/python -B ../openai_agent.py

# Archives go where the runner puts them by default: root-owned, outside the
# workspace, so the command (the invoking user under sudo) cannot touch them.
DEMO_OUT := /var/lib/assay-runner/runs

VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup native demo test test-asan test-parallel lint schemas bench image image-smoke clean kernel-matrix \
	acceptance acceptance-prepare acceptance-gate acceptance-verify

setup:
	@bash scripts/setup.sh

# The four C pieces alone (ring consumer, normalizer accelerator, spool frame reader, fast client),
# rebuilt when older than their sources; `make setup` and the image build run the same script.
native: $(VENV)/bin/python
	@bash scripts/build_native.sh $(VENV)

# The fixture writes notes/ into the workspace: removed first, so every demo run starts the same.
# The runner prints its summary (what was touched and blocked, health) on stderr.
demo: setup
	rm -rf $(DEMO_WORKSPACE)/notes
	$(VENV)/bin/assay-runner run --out $(DEMO_OUT) --run-id demo --force $(DEMO_CMD)
	$(VENV)/bin/assay-runner validate $(DEMO_OUT)/demo.tar.gz

# Serial by default; `make test-parallel` runs the suite on two pytest-xdist workers, each
# test file on one worker (tests/README.md: why loadfile, and the measurements). PYTEST_ARGS
# is passed to both.
# `make test` ends with `make test-asan` (about 30 s more: docs/setup.md, "Sanitized C").
PYTEST_ARGS ?=
test: setup
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory test-asan

# The four C pieces built with ASan and UBSan into build/asan (never the checkout), and their
# twin, fuzz and Hypothesis suites run against those builds; any sanitizer finding fails.
test-asan: setup
	VENV=$(VENV) bash scripts/test_asan.sh

test-parallel: setup
	$(VENV)/bin/pytest -q -n 2 --dist loadfile $(PYTEST_ARGS)

# Acceptance gates (docs/acceptance.md): every gate three times, then the proof
# pack in $(ACCEPTANCE_OUT) is verified. Root. `assay-runner acceptance` tells
# a failed gate (exit 1) from one that could not run (exit 3); make exits 2 for both.
ACCEPTANCE_OUT ?= build/acceptance
GATES ?= all
GATE ?= all

acceptance: setup
	$(VENV)/bin/assay-runner acceptance --out $(ACCEPTANCE_OUT) --gates $(GATES)
	$(VENV)/bin/assay-runner acceptance verify $(ACCEPTANCE_OUT) --require-gates $(GATES)

# The steps of .github/workflows/delegated-acceptance.yml (after `make setup`):
# clean up, one gate per step (each rewrites the pack), then verify that every
# selected gate is in the pack and passed. tests/test_acceptance_workflow.py runs them.
acceptance-prepare:
	$(VENV)/bin/assay-runner acceptance prepare --out $(ACCEPTANCE_OUT)

acceptance-gate:
	$(VENV)/bin/assay-runner acceptance --out $(ACCEPTANCE_OUT) --gates $(GATE)

acceptance-verify:
	$(VENV)/bin/assay-runner acceptance verify $(ACCEPTANCE_OUT) --require-gates $(GATES)

# The kernel matrix (docs/kernels.md): doctor and kernel tests on the host's kernel and on
# Debian's 5.10, 6.1 and 6.12 booted in emulated guests (virtme-ng + qemu, fetched by
# scripts/guest_kernels.sh). MATRIX_TESTS: smoke, full, or pytest node ids.
MATRIX_KERNELS ?= host,debian-5.10,debian-6.1,debian-6.12
MATRIX_TESTS ?= full

kernel-matrix: setup
	$(PY) scripts/kernel_matrix.py --kernels $(MATRIX_KERNELS) --tests $(MATRIX_TESTS)

# Lint needs only the venv, not a ready kernel: no root once the venv exists. The import
# contracts are in pyproject.toml ([tool.importlinter]; docs/architecture.md, "Layers").
lint: $(VENV)/bin/ruff
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

# mypy over the directories pyproject.toml's [tool.mypy] names, tests included (strict on
# normalizer, spool, policy); its cache is .mypy_cache. tests/test_typecheck.py runs the same check in `make test`.
.PHONY: typecheck
typecheck: $(VENV)/bin/mypy
	$(VENV)/bin/mypy

schemas: setup
	$(PY) scripts/gen_schemas.py

bench: setup
	$(PY) -m bench.run

# The container image (docs/setup.md, "Containers"): needs a running docker
# daemon; the base is debootstrapped when absent. EXTRA_CA=host|PATH|none
# chooses the extra CA certificates (default host). Prints the image size.
IMAGE ?= assay-runner:latest
image:
	bash scripts/image.sh $(IMAGE)

# The image smoke test alone (it is also part of `make test`): starts dockerd
# when none runs, `make image`, then doctor and a validated run in the container.
image-smoke: setup
	$(VENV)/bin/pytest -q -m image tests/test_image.py

$(VENV)/bin/ruff $(VENV)/bin/mypy $(VENV)/bin/python:
	@bash scripts/setup.sh

# Generated files only; the venv stays (rm -rf .venv, then make setup, rebuilds it).
clean:
	rm -rf runs build bench/results .pytest_cache .ruff_cache .mypy_cache .setup-stamp* *.egg-info
	find . -path ./.venv -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
