# Two promises: `make demo` and `make test` work on a fresh machine with only
# Python 3.11+ and the package registries.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint typecheck unit bench clean browser bwrap mutate cli-json evidence dist bypass

# pip -qq: errors only. With -q, setuptools' editable build prints a ten-line
# "Editable installation" note (its import finder for a flat layout) that reads like a
# failed install; a failure still stops make with pip's error.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -qq --upgrade pip
	$(BIN)/python -m pip install -qq -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/smf-assurance demo

lint: $(STAMP)
	$(BIN)/ruff check smf_assurance smf_tools tests
	$(BIN)/ruff format --check smf_assurance smf_tools tests

typecheck: $(STAMP)
	$(BIN)/mypy --strict smf_assurance smf_tools tests

# --durations=30: every run ends with its 30 slowest tests, so a slow newcomer is seen.
# TEST_JOBS processes (pytest-xdist), each test file whole in one of them (--dist
# loadfile: a module's fixtures are made once, as in one process); TEST_JOBS=0 runs
# the suite in this process. Three on two cores: a third of the suite's time is spent
# waiting on real runtimes (their start-up, retry back-off and timers), not computing.
TEST_JOBS ?= 3
unit: $(STAMP)
	$(BIN)/pytest -n $(TEST_JOBS) --dist loadfile --cov --cov-branch --cov-report=term --cov-fail-under=90 --durations=30

# The console's browser tests drive Debian's chromium with its chromedriver (no
# browser download); install them when missing, and fail here when that cannot be done.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) || \
	  { echo "make browser: cannot install chromium and chromium-driver (Debian packages, needs root); the console's browser tests need them" >&2; exit 1; }

# `smf-assurance runtime run` confines a runtime with Debian's bubblewrap at /usr/bin/bwrap
# (docs/CONFINEMENT.md); install it when missing, and fail here when that cannot be done.
bwrap:
	@test -x /usr/bin/bwrap || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) || \
	  { echo "make bwrap: cannot install bubblewrap (Debian package, needs root); smf-assurance runtime run and its tests need /usr/bin/bwrap" >&2; exit 1; }

test: lint typecheck browser bwrap openclaw-unit unit

# Mutation testing of the trust core (issue 18, docs/MUTATION.md): tens of minutes on
# two cores, so not part of `make test` (its smoke, a handful of security-critical
# mutants, is: tests/tools/test_mutation_tool.py). MUTATE_ARGS="--module dsse --save"
# runs one module and keeps its figures for docs/MUTATION.md, MUTATE_ARGS=--list lists
# the mutants.
mutate: $(STAMP)
	$(BIN)/python -m smf_tools.mutation $(MUTATE_ARGS)

# The bypass matrix as one suite (issue 24): every case of docs/bypass.toml, its tests run
# once, one row per case (surface, expected, observed); fails when a row did not pass.
# The runtime rows need the pinned Hermes and OpenClaw; not part of `make test`.
bypass: $(STAMP)
	$(BIN)/python -m smf_tools.candidate.bypass

# The benchmarks (docs/PERFORMANCE.md), on the team's command line (smf_tools/, not in the
# wheel): `make bench` runs the evaluator, bus and output series; ARGS picks others,
# e.g. `make bench ARGS=--bus` or `make bench ARGS="--cluster --json"`.
bench: $(STAMP)
	$(BIN)/python -m smf_tools bench $(ARGS)

# docs/CLI-JSON.md from the declared --json types of smf-assurance
# (smf_assurance/ops/cli/cli_json.py, issue 22), and docs/TOOLS-JSON.md from those of the
# team's `python -m smf_tools` (smf_tools/cli_json.py); tests/cli/test_cli_json.py fails
# when one is stale.
cli-json: $(STAMP)
	$(BIN)/python -m smf_assurance.ops.cli.cli_json
	$(BIN)/python -m smf_tools.cli_json

# docs/EVIDENCE.md's claim table from docs/claims.toml and the tests' claim markers
# (smf_tools/candidate/evidence.py, issue 24); tests/tools/test_candidate_evidence.py
# fails when it is stale.
evidence: $(STAMP)
	$(BIN)/python -m smf_tools.candidate.evidence

# The three distributions (issue 21): the gate's wheel and sdist, the Hermes adapter wheel
# (smf-assurance-hermes) and the OpenClaw plugin tarball, each checked, into dist/ with
# their sha256 digests (smf_tools/dist.py; docs/HERMES.md, docs/OPENCLAW.md).
dist: $(STAMP)
	$(BIN)/python -m smf_tools.dist --out dist

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .coverage

# The OpenClaw plugin (smf_assurance/adapters/openclaw, TypeScript, issue 10): the pinned Node 24
# into the per-user cache when missing (scripts/node.sh, from the npm registry),
# npm ci when package-lock.json changed, tsc (dist/ is built here, never committed),
# then Node's own test runner on the compiled JavaScript.
.PHONY: openclaw-unit
openclaw-unit:
	smf_assurance/adapters/openclaw/scripts/build.sh >/dev/null
	cd smf_assurance/adapters/openclaw && PATH="$$(scripts/node.sh):$$PATH" node --test 'dist-test/**/*.test.js'
