# mooncake-p2p — the two commands of the README:
#   make run    set up, build and start a local cluster from conf/
#   make test   set up, build and run every test suite (CI runs this)
SHELL := /bin/bash
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
BENCH_BUILD ?= build-release
JOBS ?= $(shell nproc)

.PHONY: all deps build test check test-asan test-tsan test-rdma run bench clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) --buildtype=debugoptimized

build: deps $(BUILD)/build.ninja
	meson compile -C $(BUILD) -j $(JOBS)

# Fast developer loop: unit + integration suites of the main build.
check: build
	meson test -C $(BUILD) --suite unit --suite integration --print-errorlogs --num-processes 2

# The README's test command: main build, every suite, then the ASan+UBSan unit
# suite, then the rdma suite inside a Soft-RoCE VM when one can boot.
test: check test-asan test-rdma

test-asan: deps
	@[ -f $(ASAN_BUILD)/build.ninja ] || meson setup $(ASAN_BUILD) --buildtype=debug \
	  -Db_sanitize=address,undefined -Db_lundef=false -Dbench=false
	meson compile -C $(ASAN_BUILD) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  meson test -C $(ASAN_BUILD) --suite unit --print-errorlogs --num-processes 2 --timeout-multiplier 3

test-tsan: deps
	@[ -f $(TSAN_BUILD)/build.ninja ] || meson setup $(TSAN_BUILD) --buildtype=debugoptimized \
	  -Db_sanitize=thread -Db_lundef=false -Dbench=false
	meson compile -C $(TSAN_BUILD) -j $(JOBS)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  meson test -C $(TSAN_BUILD) --suite unit --print-errorlogs --num-processes 1 --timeout-multiplier 4

test-rdma:
	@bash scripts/test-rdma.sh $(BUILD)

run: build
	@bash scripts/run-cluster.sh $(BUILD)

# make bench [QUICK=1]: optimised build in $(BENCH_BUILD), every benchmark program,
# report + plots in bench/results/<date>-<commit>/ (bench/README.md).
bench: deps
	@QUICK=$(QUICK) BENCH_BUILD=$(BENCH_BUILD) JOBS=$(JOBS) bash scripts/bench.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(BENCH_BUILD)
