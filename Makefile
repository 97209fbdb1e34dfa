# Two entry points (see README): `make book` and `make test`. Both create .venv on first use.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Pinned CPU build of torch for machines without a GPU (local disk here; elsewhere pass
# TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cpu"). On a GPU machine pip picks a CUDA build.
TORCH_SPEC ?= torch==2.13.0
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo yes)


.PHONY: install lint check colab-stack execute test unit unit-other-cpu notebooks notebooks-gpu-profile ci-times book site-check bench bench-estimator bench-planner bench-stability fit-page gpu-check gpu-check-t4 gpu-measure clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
ifneq ($(HAS_GPU),yes)
	$(PY) -m pip install -q $(TORCH_SPEC)
endif
	$(PY) -m pip install -q -e ".[book,test]"
	touch $(STAMP)

install: $(STAMP)

# Lint the package, tests and scripts (120 columns); the notebooks' code as a page shows it (88 columns).
lint: install
	$(VENV)/bin/ruff check src tests scripts benchmarks
	$(VENV)/bin/ruff check --select E9,F book
	$(VENV)/bin/ruff format --check --line-length 88 book

# Two workers with one torch thread each keep both cores busy (much of the time is single-threaded Python: imports,
# kernel start-up, small tensors). On a 2-core Sapphire Rapids, two workers and each estimate made once per run
# (.ci/run's BERTMEM_ESTIMATE_CACHE): unit tests 503-537 s, notebooks 934-936 s, the dry run 214-219 s (fresh clones
# of two commits); without the shared estimates 627-732, 950-1,244 and 389-427 s; one process with two threads, an
# earlier commit: 1,047 s, 1,457 s and 591 s. JOBS=1 runs each in one process.
# Each stage writes every test's (notebook's) time to _build/ci-times/<stage>.json and prints the slowest files;
# `make ci-times` prints them together.
JOBS ?= 2
XDIST := $(if $(filter 1,$(JOBS)),,-n $(JOBS))
TIMED = PYTHONPATH=scripts $(PY) -m pytest -p ci_times --times-json _build/ci-times/$@.json
unit: install
	$(TIMED) $(XDIST) $(if $(XDIST),--dist worksteal) --durations=25 tests

# The tests that decide by the CPU's bf16 once more, with the other kind forced (tests/conftest.py's fixtures force
# each kind where a test needs one; here every other test runs as the other machine would see it).
OTHER_CPU_TESTS := tests/test_precision.py tests/test_loop.py tests/test_wording.py tests/test_bench_pairing.py \
	tests/test_demos.py tests/test_train.py
unit-other-cpu: install
	BERTMEM_CPU_BF16="$$($(PY) -c 'from bertmem.core.devices import other_cpu_bf16; print(other_cpu_bf16())')" \
		$(TIMED) $(XDIST) -q -m "not slow" --durations=10 $(OTHER_CPU_TESTS)

# The contributor's fast loop (under 3 minutes on 2 cores): lint, then every unit test not marked slow (each of
# those takes a second or more: real models, subprocesses, the site build). `make test` runs everything.
check: lint
	$(PY) -m pytest $(XDIST) -q -m "not slow" tests

# Whole notebooks to a worker (--dist loadfile: one kernel runs a notebook's cells in order), one thread per kernel,
# the longest first.
notebooks: install
	$(if $(XDIST),OMP_NUM_THREADS=1) $(TIMED) $(XDIST) $(if $(XDIST),--dist loadfile --notebooks-longest-first) --nbval-lax \
		--nbval-cell-timeout=1800 --nbval-sanitize-with nbval-sanitize.cfg book/

# Every notebook once more under the GPU profile, shrunk by BERTMEM_* overrides and run on the CPU (MiniLM,
# 16 examples, 64 tokens): a branch only the GPU profile takes cannot raise unseen (~6 min on 2 cores). It runs as
# the other kind of CPU (native bf16 or not, forced by BERTMEM_CPU_BF16), so one machine exercises both kinds;
# DRY_RUN_CPU_BF16=native runs it as this CPU is. Every chapter reads a generated 5-class skewed file instead of
# its own two-class data (the long-text runs keep IMDb): no chapter may assume two labels.
DRY_RUN_CPU_BF16 ?= other
notebooks-gpu-profile: install
	$(PY) scripts/gpu_check.py --dry-run --cpu-bf16 $(DRY_RUN_CPU_BF16) --classes 5 --jobs $(JOBS) \
		--output _build/gpu-profile-dry-run

test: lint unit notebooks notebooks-gpu-profile

# CI's test stages as CI runs them, then where their time went: the 25 slowest tests, each notebook under nbval and
# under the dry run (`python scripts/ci_times.py report` prints the tables again without running anything).
ci-times: install
	rm -rf _build/estimate-cache  # each estimate made once in this run, as .ci/run does
	BERTMEM_ESTIMATE_CACHE=$(CURDIR)/_build/estimate-cache $(MAKE) unit unit-other-cpu notebooks notebooks-gpu-profile
	$(PY) scripts/ci_times.py report

# Re-executes the notebooks in place, as they are committed (NOTEBOOKS="book/03_mixed_precision.ipynb" for some).
execute: install
	$(PY) scripts/execute_notebooks.py $(NOTEBOOKS)

# Executes every notebook (cached in _build/.jupyter_cache) and fails on any error or Sphinx warning.
book: install
	$(VENV)/bin/jupyter-book build . --warningiserror --keep-going
	@echo "Site built: $(CURDIR)/_build/html/index.html"

# Sphinx build of the committed notebook outputs without executing them (fast; CI uses it).
site-check: install
	$(VENV)/bin/jupyter-book config sphinx . >/dev/null
	PYTHONPATH=book/_ext $(PY) -m sphinx -b html -W --keep-going -q -D nb_execution_mode=off . _build/site-check
	rm -f conf.py

# Colab's GPU image rebuilt here (Python 3.13, Colab's published versions, the CUDA build of torch on the CPU),
# bertmem installed on top as the notebooks' install cell does; fails if that replaces any of Colab's packages;
# then the unit tests and every notebook's GPU-profile dry run on it -> results/colab-stack.md
# (~15 min; several GB of downloads the first time).
colab-stack: install
	$(PY) scripts/colab_stack.py

clean:
	rm -rf _build $(VENV) conf.py

# Benchmarks print tables; numbers quoted in issues and notes come from here.
bench-estimator: install
	$(PY) benchmarks/estimator.py

# `bertmem plan` against real CPU steps (within 5 %) and its answers for a T4, an L4 and an A100 (~2 min).
bench-planner: install
	$(PY) benchmarks/planner.py

# The "Will it fit?" page's data from the planner: every checkpoint, length, precision and lever it offers
# -> book/_static/will_it_fit_data.js (26 min on 2 cores; prints its size and time).
fit-page: install
	$(PY) scripts/make_fit_page.py

# Chapter 5's live bench twice and once on another dataset: same story? time ratios within 10 %? (~50 min)
bench-stability: install
	$(PY) benchmarks/bench_stability.py

# On a machine with a CUDA GPU: every notebook under the GPU profile -> results/gpu/<gpu>.{json,md}
# (wall time, CUDA peak, the planner's estimate, versions). Refuses to run without a GPU.
gpu-check: install
	$(PY) scripts/gpu_check.py --output results/gpu

# The same on a bigger card as a T4 would run it, as far as a cap can: 15,360 MiB with the context, fp16,
# memory-efficient SDPA; the chapters that matter most for a T4 first.
gpu-check-t4: install
	$(PY) scripts/gpu_check.py --as-t4 --output results/gpu book/03_mixed_precision.ipynb \
		book/05_optimized_loop.ipynb book/08_below_the_floor.ipynb book/01_pain_points.ipynb \
		book/02_gradient_accumulation.ipynb book/09_beyond_512.ipynb

# On a machine with a CUDA GPU: the planner against the allocator (13 shapes), chapter 5's baseline against its
# recipe, the three loops' losses -> results/gpu/measured.json, then the planner's estimates beside the rows and
# results/gpu/measured.md (a few minutes on an H200; the committed run is src/bertmem/recorded/gpu-nvidia-h200.json).
# TOKENIZER: a folder with bert-base-uncased's WordPiece files (default: the MiniLM package's, the same vocabulary).
gpu-measure: install
	$(PY) scripts/gpu_measure.py --tokenizer "$${TOKENIZER:-$$($(PY) -c 'from bertmem.model.loading import packaged_minilm_path as p; print(p())')}" --output results/gpu/measured.json
	$(PY) scripts/gpu_measure.py --add-estimates results/gpu/measured.json

# Chapter 5's table: the article's four rows, checkpointing and LoRA on this machine's profile, three seeds, paired
# accuracy intervals (CPU: ~100 min on 2 cores; the committed src/bertmem/recorded/bench-cpu.json is one such run),
# plus the estimated bert-base table; writes results/bench/bench.{json,md} and keeps each finished (variant, seed)
# in results/bench/finished, so a rerun continues where a stop left it. BENCH_ARGS="--train-size 400" etc.
# The results table at full size on a large GPU: BERTMEM_PROFILE=full make bench (all of IMDb, 2 epochs, batch 32).
bench: install
	$(PY) -m bertmem bench --output-dir results/bench $(BENCH_ARGS)
