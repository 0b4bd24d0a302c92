# kvserve: `make run` serves the built-in model, `make test` runs every test.
# Both install missing Debian packages first (as root, or with sudo).

BUILD ?= build
JOBS ?= $(shell nproc)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CMAKE_FLAGS ?=
RUN_FLAGS ?=

DEPS := cmake make g++ pkg-config clang-format \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  libabsl-dev libdnnl-dev prometheus-cpp-dev \
  libgtest-dev libgmock-dev libbenchmark-dev

CXX_FILES = $(shell git ls-files '*.cc' '*.h' 2>/dev/null)

.PHONY: all deps configure build run test format format-check debug asan clean

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
