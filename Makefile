# SimNPU: `make demo` and `make test` do all the set-up on a fresh machine (see README.md).
JOBS ?= 2
PY := .venv/bin/python
CPP_BUILD := build/cpp
CMAKE := .venv/bin/cmake

.PHONY: setup demo test test-cpp test-python bench sanitize-address sanitize-thread clean

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
