# The two commands a newcomer needs (README.md):
#   make run    install Debian dependencies, build, train the debug model
#   make test   install Debian dependencies, build, run the whole test suite
# Both are idempotent: packages already installed are not touched.

BUILD_DIR ?= build
JOBS ?= $(shell nproc)
# Debian packages the build, the tests and the default dataset need.
DEBIAN_PACKAGES := cmake ninja-build g++ pkg-config libopenblas-dev libtomlplusplus-dev \
	nlohmann-json3-dev libgtest-dev libomp-dev python3-torch python3-numpy fortunes

.PHONY: run test deps build clean bench

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

run: build
	$(BUILD_DIR)/remat train --config configs/llama3_debug.toml

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j 1 --timeout 900

bench: build
	/usr/bin/python3 bench/compare_pytorch.py

clean:
	rm -rf $(BUILD_DIR)
