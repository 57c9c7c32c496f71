# SimNPU: `make demo` and `make test` do all the set-up on a fresh machine (see README.md).
JOBS ?= 2
PY := .venv/bin/python
CPP_BUILD := build/cpp
CMAKE := .venv/bin/cmake

.PHONY: setup demo test test-cpp test-python test-sanitized bench sanitize-address sanitize-thread clean

setup:
	@JOBS=$(JOBS) bash scripts/setup.sh

demo: setup
	$(PY) examples/demo.py

test: setup test-cpp test-python

$(CPP_BUILD)/build.ninja: CMakeLists.txt
	$(CMAKE) -S . -B $(CPP_BUILD) -G Ninja -DCMAKE_MAKE_PROGRAM=$(CURDIR)/.venv/bin/ninja \
	  -DNPU_BUILD_TESTS=ON -DNPU_BUILD_BENCHMARKS=ON

test-cpp: setup $(CPP_BUILD)/build.ninja
	.venv/bin/ninja -C $(CPP_BUILD) -j $(JOBS)
	cd $(CPP_BUILD) && ../../.venv/bin/ctest -j $(JOBS) --output-on-failure

test-python: setup
	@if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then \
	  $(PY) -m pytest -q tests/python; \
	else echo "no Python tests yet"; fi

# The project's model, AMP, compile, NPU graph, stream and DDP/FSDP2 tests again under the stream
# sanitizer (TORCH_NPU_SANITIZER=1, docs/sanitizer.md): a report in the pytest process fails its
# test (tests/python/conftest.py); every process of the run, torchrun's ranks included, also
# appends its reports to one log, and a non-empty log fails the run.
SANITIZED_TESTS := test_models.py test_models_amp.py test_amp_kernels.py test_compile.py \
  test_compile_graph_policy.py test_npu_graphs.py test_npu_streams_events.py \
  test_distributed_training.py
SANITIZER_LOG := build/sanitizer-reports.log
test-sanitized: setup
	@mkdir -p build && rm -f $(SANITIZER_LOG)
	TORCH_NPU_SANITIZER=1 NPU_SIM_SANITIZER_LOG=$(CURDIR)/$(SANITIZER_LOG) \
	  $(PY) -m pytest -q $(addprefix tests/python/,$(SANITIZED_TESTS))
	@if [ -s $(SANITIZER_LOG) ]; then cat $(SANITIZER_LOG); \
	  echo "test-sanitized: the stream sanitizer reported (above, $(SANITIZER_LOG))"; exit 1; fi
	@echo "test-sanitized: no sanitizer report"

bench: setup $(CPP_BUILD)/build.ninja
	.venv/bin/ninja -C $(CPP_BUILD) -j $(JOBS)
	$(PY) benchmarks/ops_bench.py
	for b in $(CPP_BUILD)/benchmarks/*_bench; do $$b --benchmark_repetitions=5 \
	  --benchmark_report_aggregates_only=true; done

# The sanitizer builds: run the C++ suites under AddressSanitizer (+UBSan) or ThreadSanitizer.
# A static pattern rule: make skips implicit (pattern) rules for .PHONY targets, so a plain
# `sanitize-%:` rule never ran. Any report fails the run: UBSan is built with
# -fno-sanitize-recover=all (CMakeLists.txt), ASan stops at its first error, and TSan exits
# non-zero after a report.
SANITIZER_ENV := ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
sanitize-address sanitize-thread: sanitize-%: setup
	$(CMAKE) -S . -B build/$* -G Ninja -DCMAKE_MAKE_PROGRAM=$(CURDIR)/.venv/bin/ninja \
	  -DNPU_SANITIZER=$* -DNPU_BUILD_BENCHMARKS=OFF
	.venv/bin/ninja -C build/$* -j $(JOBS)
	cd build/$* && env $(SANITIZER_ENV) ../../.venv/bin/ctest -j $(JOBS) --output-on-failure

clean:
	rm -rf build
