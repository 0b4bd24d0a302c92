# kvserve: `make run` serves the built-in model, `make test` runs every test.
# Both install missing Debian packages first (as root, or with sudo).

BUILD ?= build
JOBS ?= $(shell nproc)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CMAKE_FLAGS ?=
RUN_FLAGS ?=

DEPS := cmake make g++ pkg-config clang-format ccache mold \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  libabsl-dev libdnnl-dev ocl-icd-opencl-dev opencl-c-headers prometheus-cpp-dev \
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libxxhash-dev \
  libssl-dev openssl libboost-dev zlib1g-dev libpcre2-dev \
  python3-jinja2 python3-jsonschema curl iproute2

# Tracked and new (not ignored) C++ files that exist: a file deleted or moved
# but not yet committed is skipped, a new one is checked before its commit.
CXX_FILES = $(wildcard $(shell git ls-files --cached --others --exclude-standard \
  '*.cc' '*.h' '*.inc' 2>/dev/null))

.PHONY: all deps configure build run test format format-check debug asan clean \
  ops-deps ops-test container-deps container-test

all: build

# Installs only what is missing, so a warm machine never touches apt.
deps:
	@missing=$$(for p in $(DEPS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$missing; \
	fi

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/kvserve $(RUN_FLAGS)

# The everyday loop: an incremental release build and the unit and
# integration suites (no soak, ops, sanitizers, fuzzers or container), on
# every core.
SUITES = cd $(BUILD) && OMP_WAIT_POLICY=passive ctest --output-on-failure \
  -j $(JOBS) --timeout 900 -LE soak

.PHONY: check
check: build
	$(SUITES)

# Every test, as CI runs it (.ci/run adds the container): the build, the
# format check, the unit and integration suites, the 60 s load and fault
# suite (label soak, alone so that its timings are its own), ops, the TSan
# suite, the ASan + UBSan suite and a short run of every fuzzer (both on
# the clang sanitizer build, build-asan/). Each phase is timed
# (tests/phase_times.sh) and the table printed at the end, or at the phase
# that failed.
PHASES ?= $(CURDIR)/$(BUILD)/phase-times.txt
PHASE = @tests/phase_times.sh $(PHASES)
SUBMAKE = $(MAKE) --no-print-directory BUILD=$(BUILD)
test:
	@rm -f $(PHASES)
	$(PHASE) deps $(SUBMAKE) deps
	$(PHASE) build $(SUBMAKE) build
	$(PHASE) format $(SUBMAKE) format-check
	$(PHASE) suites sh -c '$(SUITES)'
	$(PHASE) soak sh -c 'cd $(BUILD) && OMP_WAIT_POLICY=passive ctest --output-on-failure -L soak'
	$(PHASE) ops $(SUBMAKE) ops-test
	$(PHASE) tsan $(SUBMAKE) tsan-test
	$(PHASE) asan-build $(SUBMAKE) asan-build
	$(PHASE) asan $(SUBMAKE) asan-test
	$(PHASE) fuzz $(SUBMAKE) fuzz-smoke
	@tests/phase_times.sh $(PHASES) --table

format:
	clang-format -i $(CXX_FILES)

format-check: deps
	@bad=$$(for f in $(CXX_FILES); do clang-format --dry-run --Werror $$f >/dev/null 2>&1 || echo $$f; done); \
	if [ -n "$$bad" ]; then echo "not clang-formatted (run make format):" $$bad; exit 1; fi

debug:
	$(MAKE) build BUILD=build-debug CMAKE_FLAGS=-DCMAKE_BUILD_TYPE=Debug

# --- Sanitizers (`make test` runs both after the normal suites) -------------
# asan-test: every unit and integration test, /avx2 copies included, on the
# clang ASan + UBSan build in build-asan/ (UB aborts; the servers the
# integration tests start are that build's kvserve; each test binary is one
# ctest test there). The same build holds the fuzzers (below): the libraries
# carry libFuzzer's coverage hooks, which the test binaries leave unused.
# tsan-test: the tests labelled tsan (tests/CMakeLists.txt) on a TSan build
# of only those binaries in build-tsan/, with one OpenMP thread. Debian's
# libgomp, Abseil and gRPC are not instrumented, so TSan cannot see their
# synchronization: the code it runs locks with std::mutex, and gRPC's
# threads are left to ASan and the soak.
.PHONY: asan-build asan-test tsan-test
SAN_BUILD ?= build-asan
SAN_ENV := OMP_WAIT_POLICY=passive UBSAN_OPTIONS=print_stacktrace=1
# allocator_may_return_null: a refused allocation returns null as in
# production (tests ask for impossible KV budgets); handle_sigbus=0: a test
# expects the kernel's SIGBUS for a truncated mapped model.
ASAN_ENV := $(SAN_ENV) \
  ASAN_OPTIONS=detect_stack_use_after_return=1:check_initialization_order=1:allocator_may_return_null=1:handle_sigbus=0 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp
TSAN_ENV := $(SAN_ENV) OMP_NUM_THREADS=1 TSAN_OPTIONS=second_deadlock_stack=1

asan: asan-test

asan-build: san-configure
	cmake --build $(SAN_BUILD) -j $(JOBS)

asan-test: asan-build
	cd $(SAN_BUILD) && $(ASAN_ENV) ctest --output-on-failure -j 2 -LE soak

tsan-test:
	$(MAKE) --no-print-directory configure BUILD=build-tsan \
	  CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSERVE_SANITIZE=thread"
	cmake --build build-tsan -j $(JOBS) --target kvserve_tsan_tests
	cd build-tsan && $(TSAN_ENV) ctest -L tsan --output-on-failure -j 2

clean:
	rm -rf $(BUILD)

# The load and fault suite (tests/soak/) for 10 minutes; `make soak-60s` is
# its 60 s version (ctest label soak). Prints its summary table; exit status
# = result.
.PHONY: soak soak-60s
soak: build
	cd $(BUILD) && OMP_WAIT_POLICY=passive ./kvserve_soak --duration=10m

soak-60s: build
	cd $(BUILD) && OMP_WAIT_POLICY=passive ctest -L soak --output-on-failure

# --- Fuzzing: libFuzzer targets (tests/fuzz/) --------------------------------
# The clang sanitizer build, build-asan/ (-DKVSERVE_FUZZ=ON: our libraries
# with libFuzzer's coverage instrumentation, ASan and UBSan). `make fuzz`
# runs each fuzzer FUZZ_SECONDS on its corpus (build-asan/fuzz/corpus/<name>,
# kept between runs) and prints executions and crashes per fuzzer and in
# total; `make fuzz-smoke` is the short run `make test` does. A crash's
# input is saved under build-asan/fuzz/artifacts/.
.PHONY: fuzz-deps san-configure fuzz-build fuzz fuzz-smoke
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 10
FUZZERS ?= gguf llama2c tokenizer_spm tokenizer_bpe utf8 session_log \
  kv_snapshot quant_blocks jinja gbnf json_schema reply_parser http_request \
  http_framing request_handlers
FUZZ_DEPS := clang libclang-rt-14-dev libomp-dev

fuzz-deps: deps
	$(call install_missing,$(FUZZ_DEPS))

$(SAN_BUILD)/CMakeCache.txt: | fuzz-deps
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_CXX_COMPILER=clang++ -DKVSERVE_FUZZ=ON

san-configure: fuzz-deps $(SAN_BUILD)/CMakeCache.txt

fuzz-build: san-configure
	cmake --build $(SAN_BUILD) -j $(JOBS) --target fuzzers

fuzz: fuzz-build
	tests/fuzz/run_fuzzers.sh $(SAN_BUILD) $(FUZZ_SECONDS) $(FUZZERS)

fuzz-smoke: fuzz-build
	tests/fuzz/run_fuzzers.sh $(SAN_BUILD) $(FUZZ_SMOKE_SECONDS) $(FUZZERS)

# --- Operations: deploy/ exercised by the real tools (tests/ops/) -----------
# Debian packages only these targets need. Services the packages would start
# on install are held back by a policy-rc.d (the tests start their own, on
# loopback). nodejs/npm come from Debian only when no node/npm is present.
OPS_DEPS := prometheus nginx-light python3-yaml ca-certificates
CONTAINER_DEPS := podman buildah runc debootstrap containernetworking-plugins \
  uidmap iptables

define install_missing
	@missing=$$(for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  policy=/usr/sbin/policy-rc.d; own_policy=; \
	  if [ ! -e $$policy ]; then \
	    printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee $$policy >/dev/null && \
	    $(SUDO) chmod +x $$policy && own_policy=1; \
	  fi; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
	    --no-install-recommends $$missing; rc=$$?; \
	  [ -z "$$own_policy" ] || $(SUDO) rm -f $$policy; \
	  exit $$rc; \
	fi
endef

ops-deps:
	$(call install_missing,$(OPS_DEPS) $(if $(shell command -v node && command -v npm),,nodejs npm))

# Prometheus + promtool, the Grafana dashboard, Kubernetes manifests, nginx
# router: `tests/ops/ops_test.sh BIN_DIR`.
ops-test: build ops-deps
	tests/ops/ops_test.sh $(BUILD)

container-deps:
	$(call install_missing,$(CONTAINER_DEPS))

# Builds the Dockerfile with podman and runs the image (slow: .ci/run calls
# it after `make test`).
container-test: build container-deps
	tests/ops/container_test.sh $(BUILD)
