# The two set-up commands of the README, plus what they share.
#   make train   trains the default CPU VMSST on NTREX-128 + Multi30k and
#                prints held-out retrieval accuracy (9 min on a fresh clone of an idle
#                2-core machine, install included: docs/results/main_job/).
#   make test    runs the whole test suite (what .ci/run calls; its time on a fresh
#                clone, against a 30-minute target, is in docs/results/tests/).
#   make test-fast  the `unit` tier only (pure, seconds each; no training run, no
#                subprocess, no TPU compile): the edit loop; its time here is in
#                docs/results/tests/. Tiers: tests/conftest.py, TIERS.
#   make test-tpu   every paper run compiled by the TPU compiler for its slice.
# Both create or reuse .venv/ and install the project into it from PyPI.

PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
# pytest-xdist on both cores, whole files per worker, longest first (why: above `test`).
PARALLEL := -n 2 --dist loadfile --no-loadscope-reorder --max-worker-restart=0

.PHONY: train test test-fast test-integration test-bench test-tpu test-core-jax-next bench

# The install: uv with pip's settings, pip if uv fails; Apache Beam without its declared
# protobuf < 7 (launch/install.py and setup.py's "cache" extra say why).
$(STAMP): setup.py launch/install.py
	$(PYTHON) launch/install.py $(VENV) test,tpu,cache
	touch $(STAMP)

train: $(STAMP)
	bash launch/local.sh $(ARGS)

# Eight forced CPU devices let the sharding tests build a 4 x 2 mesh; -n 2
# (pytest-xdist) runs on both cores: the subprocess and training tests dominate.
# --dist loadfile hands each worker whole test files, so a file's module fixtures (a
# trained model, an export, a run into the emulator's bucket) are built once, not once
# per worker; --no-loadscope-reorder keeps the order tests/conftest.py gives them, the
# longest files first (LONGEST_FIRST), so none of them starts last and runs alone.
# --max-worker-restart=0: a worker that dies (a signal from native code) fails its test
# and ends the run with xdist's report; with loadfile, a restarted worker is handed the
# same test again and the run hangs once every worker has died on it.
test: $(STAMP)
	XLA_FLAGS=--xla_force_host_platform_device_count=8 $(VENV)/bin/python -m pytest tests -q $(PARALLEL) --strict-markers -m "not tpu_all_runs" $(ARGS)

# The unit tier (tests/conftest.py assigns it to every test in no other tier, and
# fails a unit test that starts a process; --strict-markers makes a misspelt
# marker an error). Benchmark-harness tests are in tests/bench/.
test-fast: $(STAMP)
	XLA_FLAGS=--xla_force_host_platform_device_count=8 $(VENV)/bin/python -m pytest tests -q $(PARALLEL) --strict-markers -m unit $(ARGS)

# The integration tier: training runs, commands run as subprocesses, several processes.
test-integration: $(STAMP)
	XLA_FLAGS=--xla_force_host_platform_device_count=8 $(VENV)/bin/python -m pytest tests -q $(PARALLEL) --strict-markers -m "integration and not tpu" $(ARGS)

# The benchmark harness's own tests (bench/*.py), apart from the library's.
test-bench: $(STAMP)
	XLA_FLAGS=--xla_force_host_platform_device_count=8 $(VENV)/bin/python -m pytest tests/bench -q $(PARALLEL) --strict-markers $(ARGS)

# The TPU compiler's tier: every paper run compiled for the slice it names (and the
# command's own tests), on this machine through libtpu from PyPI (the `tpu` extra).
# `make test` runs all of it but the paper runs beyond a representative three
# (`tpu_all_runs`), each a compile of minutes on 2 cores, or seconds when the step
# lowers to the program its record in docs/results/tpu_compile/ was compiled from.
test-tpu: $(STAMP)
	$(VENV)/bin/python -m pytest tests -q $(PARALLEL) --strict-markers -m tpu $(ARGS)

# The JAX-only core (no TensorFlow, seqio or gin) on the JAX line accelerator images
# carry (0.11, whose wheels need Python >= 3.12), in a venv of its own. Not part of
# `make test`: it needs a Python 3.12 (PYTHON312=...) and about a minute of installs.
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) python3.12)
CORE_VENV := .venv-jax-next
CORE_TESTS := tests/without_tf/test_core_without_tf.py tests/model/test_xla_cpu.py tests/bench/test_accelerator_bench.py
test-core-jax-next:
	test -x $(CORE_VENV)/bin/python || $(PYTHON312) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/pip install --quiet "jax[cpu]>=0.11,<0.12" flax optax orbax-checkpoint absl-py pytest
	PYTHONPATH=. $(CORE_VENV)/bin/python -m pytest -q -p no:cacheprovider $(CORE_TESTS) $(ARGS)

bench: $(STAMP)
	$(VENV)/bin/pip install --quiet -e ".[bench]"
	$(VENV)/bin/python bench/run_all.py $(ARGS)
