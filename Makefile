# kvserve: `make run` serves the built-in model, `make test` runs every test.
# Both install missing Debian packages first (as root, or with sudo).

BUILD ?= build
JOBS ?= $(shell nproc)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CMAKE_FLAGS ?=
RUN_FLAGS ?=

DEPS := cmake make g++ pkg-config clang-format \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  libabsl-dev libdnnl-dev ocl-icd-opencl-dev opencl-c-headers prometheus-cpp-dev \
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libxxhash-dev \
  libssl-dev openssl libcpp-httplib-dev python3-jinja2 curl

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

test: build format-check
	cd $(BUILD) && OMP_WAIT_POLICY=passive ctest --output-on-failure -j 2 --timeout 900
	$(MAKE) --no-print-directory ops-test BUILD=$(BUILD)

format:
	clang-format -i $(CXX_FILES)

format-check: deps
	@bad=$$(for f in $(CXX_FILES); do clang-format --dry-run --Werror $$f >/dev/null 2>&1 || echo $$f; done); \
	if [ -n "$$bad" ]; then echo "not clang-formatted (run make format):" $$bad; exit 1; fi

debug:
	$(MAKE) build BUILD=build-debug CMAKE_FLAGS=-DCMAKE_BUILD_TYPE=Debug

asan:
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSERVE_SANITIZE=ON"

clean:
	rm -rf $(BUILD)

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
