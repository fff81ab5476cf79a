# mooncake-p2p — the two commands of the README:
#   make run    set up, build and start a local cluster from conf/
#   make test   set up, build and run every test suite (CI runs this)
SHELL := /bin/bash
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
RELEASE_BUILD ?= build-release-nordma
BENCH_BUILD ?= build-release
JOBS ?= $(shell nproc)
# The unit suites the TSan stage runs: the concurrency-heavy libraries.
TSAN_TESTS ?= runtime rpc_unit transfer_unit tiered store_client master_metadata
# Warnings are errors in the project's own builds (not in a user's or a
# distribution's: meson.build does not force werror).
SETUP_FLAGS = -Dwerror=true
# The extra test builds below are unity builds (meson's default 4 sources per
# compiled file): they are built cold in CI and never edited in, and a unity
# build parses the heavy headers (asio, Cap'n Proto) a quarter as often. The
# main build, the one you edit in, is not.
TEST_BUILD_FLAGS = $(SETUP_FLAGS) -Dunity=on
TARGETS = python3 scripts/test-targets.py
# The sanitizer build is clang's (ASan + UBSan + libFuzzer's coverage): the
# unit suites and the fuzz targets share it.
ASAN_SETUP = CC=clang CXX=clang++ meson setup $(ASAN_BUILD) --buildtype=debug $(TEST_BUILD_FLAGS) \
  -Db_sanitize=address,undefined -Db_lundef=false -Dbench=false -Dfuzz=enabled
SAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

.PHONY: all deps build test check format fuzz test-asan test-tsan test-release test-rdma test-soak run bench install clean soak

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) --buildtype=debugoptimized $(SETUP_FLAGS)

build: deps $(BUILD)/build.ninja
	meson compile -C $(BUILD) -j $(JOBS)

# Fast developer loop: unit + integration suites of the main build.
check: build
	meson test -C $(BUILD) --suite unit --suite integration --suite python --suite style --print-errorlogs --num-processes 2

# Formats every C++ file with .clang-format (`make check` fails on unformatted files).
format:
	@bash scripts/check-format.sh --fix

# The README's test command: every stage below in order, each stage's wall
# time, a summary table; fails when any stage failed (scripts/test-all.sh).
test: deps
	@bash scripts/test-all.sh check test-asan test-tsan test-release test-rdma test-soak

# The extra builds compile only what their tests need (scripts/test-targets.py),
# never the apps, examples or benchmarks they do not run.
test-asan: deps
	@[ -f $(ASAN_BUILD)/build.ninja ] || $(ASAN_SETUP)
	t=$$($(TARGETS) $(ASAN_BUILD) --suite unit --suite fuzz) && ninja -C $(ASAN_BUILD) -j $(JOBS) $$t
	$(SAN_ENV) meson test -C $(ASAN_BUILD) --no-rebuild --suite unit --suite fuzz --print-errorlogs \
	  --num-processes 2 --timeout-multiplier 3

# make fuzz [SECONDS=N]: every libFuzzer target for N seconds (default 60),
# growing a working corpus in $(ASAN_BUILD)/fuzz-work/NAME from the committed
# one; crashes land in $(ASAN_BUILD)/fuzz-work/artifacts (README "Fuzzing").
SECONDS ?= 60
fuzz: deps
	@[ -f $(ASAN_BUILD)/build.ninja ] || $(ASAN_SETUP)
	t=$$($(TARGETS) $(ASAN_BUILD) --suite fuzz) && ninja -C $(ASAN_BUILD) -j $(JOBS) $$t
	$(SAN_ENV) bash scripts/fuzz.sh $(ASAN_BUILD) $(SECONDS)

# ThreadSanitizer on the unit suites of the concurrency-heavy libraries.
test-tsan: deps
	@[ -f $(TSAN_BUILD)/build.ninja ] || meson setup $(TSAN_BUILD) --buildtype=debugoptimized $(TEST_BUILD_FLAGS) \
	  -Db_sanitize=thread -Db_lundef=false -Dbench=false
	t=$$($(TARGETS) $(TSAN_BUILD) $(TSAN_TESTS)) && ninja -C $(TSAN_BUILD) -j $(JOBS) $$t
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  meson test -C $(TSAN_BUILD) --no-rebuild --print-errorlogs --num-processes 2 --timeout-multiplier 4 \
	  $(TSAN_TESTS)

# One build that is both the release build (-O3, NDEBUG, the blocking check
# off) and the no-libibverbs build (-Drdma=disabled): its unit suites.
test-release: deps
	@[ -f $(RELEASE_BUILD)/build.ninja ] || meson setup $(RELEASE_BUILD) --buildtype=release $(TEST_BUILD_FLAGS) \
	  -Drdma=disabled -Dbench=false
	t=$$($(TARGETS) $(RELEASE_BUILD) --suite unit) && ninja -C $(RELEASE_BUILD) -j $(JOBS) $$t
	meson test -C $(RELEASE_BUILD) --no-rebuild --suite unit --print-errorlogs --num-processes 2

# The rdma suite inside the Soft-RoCE VM (scripts/rxe-vm.sh) on the main build.
test-rdma: build
	@bash scripts/test-rdma.sh $(BUILD)

# make soak [MINUTES=N] [SEED=S] [QUICK=1]: the chaos soak (root; test/soak/README.md): a master and
# four nodes in network namespaces under workload and a seeded fault schedule; report, RSS CSV/plot
# and logs in $(BUILD)/soak/<date>-seed<S>/; fails on any invariant violation. QUICK=1: the
# 2-minute deterministic run (seed 1, every fault kind once or more).
MINUTES ?= 10
soak: build
	/usr/bin/python3 test/soak/analyze_selftest.py >/dev/null
	/usr/bin/python3 scripts/soak.py --build $(BUILD) $(if $(QUICK),--quick,--minutes $(MINUTES)) $(if $(SEED),--seed $(SEED))

# The short deterministic chaos soak (QUICK=1: seed 1, ~2 minutes, every fault kind; HA masters on etcd when installed).
test-soak: build
	@$(MAKE) --no-print-directory soak QUICK=1

# make run [HA=1]: a local cluster from conf/ (HA=1: etcd and two masters with leader election).
run: build
	@HA=$(HA) bash scripts/run-cluster.sh $(BUILD)

# make bench [QUICK=1]: optimised build in $(BENCH_BUILD), every benchmark program,
# report + plots in bench/results/<date>-<commit>/ (bench/README.md).
bench: deps
	@QUICK=$(QUICK) BENCH_BUILD=$(BENCH_BUILD) JOBS=$(JOBS) bash scripts/bench.sh

# make install [PREFIX=/usr/local] [DESTDIR=...]: the libraries (static), the
# public headers, mooncake-p2p.pc, the three binaries, the example configs
# (<sysconfdir>/mooncake) and the systemd units (<prefix>/lib/systemd/system).
# A build configured with another prefix is reconfigured to PREFIX.
PREFIX ?= /usr/local
install: build
	meson configure $(BUILD) --prefix=$(PREFIX)
	meson install -C $(BUILD) $(if $(DESTDIR),--destdir $(DESTDIR))

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(RELEASE_BUILD) $(BENCH_BUILD)
