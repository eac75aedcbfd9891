# Thin wrapper over CMake. The two commands the README starts with:
#   make demo   build, then run the main job on an embedded default
#   make test   build, then run every test (ctest)
# Others: make build | bench | install | test-sanitize | fuzz | mutate | format | clean
# (docs/building.md)
#
# Every target first runs scripts/install-deps.sh, which installs missing Debian packages
# (and says which; nothing when none is missing) so a fresh Debian 12 machine needs nothing
# done before.
#
# Builds are quiet: one line, the compiler's output kept in BUILD_DIR/build.log and shown
# (progress lines dropped) only when the build fails. VERBOSE=1 shows everything as it happens.

BUILD      ?= build/release
SAN_BUILD  ?= build/sanitize
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
# CI sets CI=true: warnings become errors there, and test_ort may not be skipped.
CI_FLAGS   := $(if $(CI),-DPH_WERROR=ON -DPH_REQUIRE_ORT=ON,-DPH_WERROR=OFF -DPH_REQUIRE_ORT=OFF)
# onnxruntime-node for test_ort, shared by both build configurations (never in the source tree)
ORT_DIR    ?= build/ort
ORT_FLAGS  := -DPH_ORT_DIR=$(abspath $(ORT_DIR))
FUZZ_SECONDS ?= 10

PREFIX     ?= /usr/local

.PHONY: all deps ort build demo test bench install test-sanitize fuzz mutate format clean

# $(call build_in,DIR): cmake --build DIR, quiet unless VERBOSE=1 (see above).
build_in = if [ "$(VERBOSE)" = 1 ]; then cmake --build $(1) -j $(JOBS); else \
	  printf 'building %s ... ' '$(1)'; \
	  if cmake --build $(1) -j $(JOBS) >'$(1)/build.log' 2>&1; then echo ok; else \
	    echo FAILED; \
	    grep -v -E '^\[ *[0-9]+%\]|make\[[0-9]+\]: (Entering|Leaving) directory' '$(1)/build.log'; \
	    echo "(the whole log: $(1)/build.log; VERBOSE=1 shows it as it happens)"; exit 1; \
	  fi; \
	fi
CONFIGURE_OUT = $(if $(filter 1,$(VERBOSE)),,>/dev/null)

all: build

deps:
	@scripts/install-deps.sh

# onnxruntime-node 1.30.0 (npm, pinned by tests/ort/package-lock.json) for test_ort, the ONNX
# Runtime cross-check of exported packages (docs/ort-check.md). Without the npm registry it says
# so and test_ort is skipped (a failure under CI=true); every other test still runs.
ort:
	@scripts/install-ort.sh $(ORT_DIR)

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CI_FLAGS) $(ORT_FLAGS) $(CONFIGURE_OUT)
	@$(call build_in,$(BUILD))

demo: build
	@$(BUILD)/pagedhybrid demo --work-dir $(BUILD)/demo

test: build ort
	@ctest --test-dir $(BUILD) --output-on-failure --no-tests=error -j $(JOBS)

# Benchmarks report against this machine's limits measured in the same run (bench/roofline.h).
bench: build
	@$(BUILD)/bench_threads
	@$(BUILD)/bench_dense

# The header, libpagedhybrid.so (the ph_* API only), libpagedhybrid.a, pagedhybrid.pc and the CLI
# under PREFIX (DESTDIR honoured); docs/embedding.md.
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# ASan + UBSan build of every test, with clang; the libFuzzer targets run FUZZ_SECONDS each.
test-sanitize: deps ort
	@CC=clang cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DPH_SANITIZE=ON -DPH_FUZZ=ON \
	  -DPH_FUZZ_SECONDS=$(FUZZ_SECONDS) $(CI_FLAGS) $(ORT_FLAGS) $(CONFIGURE_OUT)
	@$(call build_in,$(SAN_BUILD))
	@ctest --test-dir $(SAN_BUILD) --output-on-failure --no-tests=error -j $(JOBS)

# Mutation testing (docs/testing.md): each one-line mutation of scripts/mutations.txt applied
# in turn to a copy of the tree under build/mutate, rebuilt, and its tests run; exits 1 when one
# survives (the tests could not tell). make mutate M="M2 M3" runs only those.
mutate: deps
	@scripts/mutate.sh $(M)

# Longer fuzzing session: make fuzz FUZZ_SECONDS=600
fuzz: FUZZ_SECONDS = 300
fuzz: test-sanitize

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build
