# The two commands a newcomer needs (README.md):
#   make run    install Debian dependencies, build, train the debug model
#   make test   install Debian dependencies, build, run the whole test suite
#               (including `make fuzz` and `make asan`)
# Both are idempotent: packages already installed are not touched.

BUILD_DIR ?= build
FUZZ_DIR ?= build-fuzz
ASAN_DIR ?= build-asan
JOBS ?= $(shell nproc)
# How long `make fuzz` runs each of its 7 targets (tests/fuzz/README.md).
FUZZ_SECONDS ?= 15
# Debian packages the build, the tests and the default dataset need
# (clang-14 and libclang-rt-14-dev: libFuzzer and the sanitizers of `make fuzz`;
# clang-format-14: the format check of the tests and `make format`;
# libpcre2-dev: tokenizer.json regexes; python3-regex: the test's own byte-level BPE;
# libjemalloc2: the allocator of bench/compare_pytorch.py's tuned PyTorch baseline;
# libdnnl-dev: oneDNN, the bf16 GEMM on AVX512-BF16 CPUs; libxsmm-dev: another bf16 GEMM
# that bench/bf16_gemm_libraries.cc measures remat's against;
# g++ brings libasan and libubsan for `make asan`).
DEBIAN_PACKAGES := cmake ninja-build g++ pkg-config libopenblas-dev libtomlplusplus-dev \
	nlohmann-json3-dev libgtest-dev libomp-dev python3-torch python3-numpy fortunes \
	clang-14 libclang-rt-14-dev clang-format-14 libsentencepiece-dev python3-sentencepiece \
	libpcre2-dev python3-regex libopenmpi-dev openmpi-bin libjemalloc2 libdnnl-dev libxsmm-dev
# The sanitizers stop at the first report (the build also says
# -fno-sanitize-recover) and LeakSanitizer runs at exit.
SANITIZER_ENV := ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

.PHONY: run test deps build clean bench fuzz asan format

deps:
	@missing=$$(for p in $(DEBIAN_PACKAGES); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || echo $$p; \
	  done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y $$missing || \
	    { $$SUDO apt-get update && $$SUDO apt-get install -y $$missing; }; \
	fi

build: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Saves the weights at the end (outputs/checkpoint/step-100.safetensors) for
# `remat generate` (README "Generate text").
run: build
	$(BUILD_DIR)/remat train --config configs/llama3_debug.toml --checkpoint.enable true

# Everything: the unit, end-to-end and oracle tests, then the fuzzers, then
# the unit tests and short training runs under ASan + UBSan.
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j 1 --timeout 900
	$(MAKE) --no-print-directory fuzz
	$(MAKE) --no-print-directory asan

# libFuzzer harnesses of every input parser (tests/fuzz/), FUZZ_SECONDS each.
fuzz: deps
	cmake -S tests/fuzz -B $(FUZZ_DIR) -G Ninja -DCMAKE_CXX_COMPILER=clang++-14
	cmake --build $(FUZZ_DIR) -j $(JOBS)
	FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run_fuzzers.sh $(FUZZ_DIR)

# The unit tests, then both debug models in every AC mode, under ASan + UBSan.
# The per-GEMM-library reruns of the linear and fresh-gradient tests
# (kernels_linear_*, train_fresh_gradients_*: the same tests with
# REMAT_FP32_GEMM forced) run in the Release suite only; under ASan they
# took 3.5 of its 8 minutes and add no code the default run misses but the
# library wrappers, which the kernel tests in the default run reach too. So
# does BudgetSolver.SolvesTheLargestFlavors (over a minute under ASan): the
# solver's code on the largest models, which the other budget tests run on
# smaller ones.
asan: deps
	cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Asan
	cmake --build $(ASAN_DIR) -j $(JOBS)
	cd $(ASAN_DIR) && $(SANITIZER_ENV) ctest --output-on-failure -j 1 -L unit \
	    -E '^(kernels_linear|train_fresh_gradients)_|^BudgetSolver\.SolvesTheLargestFlavors$$' \
	    --timeout 900
	$(SANITIZER_ENV) /usr/bin/python3 tests/sanitize/train_ac_modes.py $(ASAN_DIR)/remat

bench: build
	/usr/bin/python3 bench/compare_pytorch.py

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_DIR) $(ASAN_DIR)

# Formats every C++ file as .clang-format says (the tests check it).
format: deps
	git ls-files 'src/*.cc' 'src/*.h' 'tests/*.cc' 'tests/*.h' | xargs clang-format-14 -i
