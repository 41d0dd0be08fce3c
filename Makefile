# Thin front end over CMake. `make` builds build/strata; `make demo` trains the
# demo model; `make test` runs the whole CTest suite. Each first installs any
# missing Debian packages (scripts/deps.sh), or prints the command and stops.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# Debian's python3 (gets python3-torch); `python3` on PATH may be a pyenv shim.
PYTHON ?= /usr/bin/python3
BENCH_ARGS ?=
MAKEFLAGS += --no-print-directory

# `make install PREFIX=P` installs what `cmake --install build --prefix P` does
# (default /usr/local); `make uninstall` removes the files the last install
# listed in build/install_manifest.txt; `make deb` packs build/strata_<version>_amd64.deb.
PREFIX ?= /usr/local

.PHONY: all build deps demo test bench asan-test tsan-test clean fuzz fuzz-ci install uninstall deb

all: build

deps:
	@scripts/deps.sh

build: deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
	cmake --build build -j$(JOBS)

install: build
	cmake --install build --prefix $(PREFIX)

uninstall:
	cmake -DMANIFEST=build/install_manifest.txt -P cmake/uninstall.cmake

# cpack runs the install rules too, and would leave build/install_manifest.txt
# listing the package's /usr paths for `make uninstall` to remove: keep the
# manifest of the last `make install` instead.
deb: build
	@m=build/install_manifest.txt; [ -e $$m ] && cp -p $$m $$m.keep; \
	(cd build && cpack -G DEB); rc=$$?; \
	if [ -e $$m.keep ]; then mv $$m.keep $$m; else rm -f $$m; fi; exit $$rc

# `make python`: build, then copy the package strata (build/python/strata) into
# $(PYTHON)'s user site-packages (offline; override with PYTHON_SITE=DIR).
PYTHON_SITE ?= $(shell $(PYTHON) -c 'import site; print(site.getusersitepackages())')
.PHONY: python
python: build
	mkdir -p $(PYTHON_SITE) && cp -r build/python/strata $(PYTHON_SITE)/
	@echo "installed strata into $(PYTHON_SITE): $(PYTHON) -c 'import strata as tf'"

demo: build
	./build/strata train --model cnn --epochs 3 --batch-size 128

# `make demo-gpt`: the language-model demo. Its corpus is Debian's jargon-text (the
# Jargon File 4.4.7, public-domain English prose; scripts/deps.sh installs it),
# tokenized byte-level (vocab 256) into build/demo-gpt/jargon_{val,train}_000000.bin
# (`make demo-gpt-data` stops there), then the small GPT trained on the shards.
DEMO_GPT_CORPUS ?= /usr/share/doc/jargon-text/jargon.txt.gz
DEMO_GPT_DIR ?= build/demo-gpt
DEMO_GPT_ARGS ?=
.PHONY: demo-gpt demo-gpt-data
demo-gpt-data: build
	@mkdir -p $(DEMO_GPT_DIR)
	./build/strata tokenize $(DEMO_GPT_CORPUS) -o $(DEMO_GPT_DIR)/jargon

demo-gpt: demo-gpt-data
	./build/strata train --model gpt --vocab 256 --data '$(DEMO_GPT_DIR)/jargon_*.bin' $(DEMO_GPT_ARGS)

# The whole suite: the Release build's tests, then the same tests under
# AddressSanitizer + UndefinedBehaviorSanitizer, then the threaded ones under
# ThreadSanitizer. Only OpenMPI's own frames are suppressed (tests/tsan-mpi.supp,
# tests/lsan-mpi.supp), by the multi-worker tests that run under mpirun.
# valgrind and python3-torch are installed too (OpenMPI always is, by
# scripts/deps.sh), so the multi-worker, valgrind and PyTorch comparison tests
# run; where they cannot be (no root or sudo) the suite still runs and those
# tests skip, saying why.
test:
	@scripts/deps.sh --test || { echo "make test: valgrind / python3-torch not installed: their tests will skip" >&2; scripts/deps.sh; }
	@$(MAKE) build
	cd build && ctest --output-on-failure -j2
	@$(MAKE) --no-print-directory asan-test tsan-test fuzz-ci

bench:
	@scripts/deps.sh --bench
	@$(MAKE) build
	$(PYTHON) bench/bench.py $(BENCH_ARGS)

asan-test: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=ON
	cmake --build build-asan -j$(JOBS)
	cd build-asan && ctest --output-on-failure -j2

tsan-test: deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_TSAN=ON
	cmake --build build-tsan -j$(JOBS)
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  ctest --output-on-failure -j2 -L threaded

clean:
	rm -rf build build-asan build-tsan

# ---- Fuzzing (issue 7 item 2; RELIABILITY.md row T1) ----
# `make fuzz`: build the libFuzzer targets (tests/fuzz/*_fuzz.c) with clang into
# $(FUZZ_BUILD) and run each for FUZZ_SECONDS, two at a time, on a copy of its
# seed corpus + regression inputs (the committed corpus is never written).
# Fails if any target finds a crash, leak or timeout; the input is saved under
# $(FUZZ_BUILD)/crashes/ (commit it to tests/fuzz/regressions/<target>/, where
# test_fuzz_regressions replays it). `make fuzz-ci`: the same, 30 s each.
FUZZ_SECONDS ?= 600
FUZZ_BUILD ?= build-fuzz

fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_FUZZ=ON
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target fuzz_targets
	tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

fuzz-ci:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=30
