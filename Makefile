# attnd: one Makefile, no generated build system.
#
#   make run     install what is missing, build, start the service
#   make test    install what is missing, build, run every test
#   make asan    every test under AddressSanitizer + UBSan (build/asan/)
#   make tsan    the suites that start attnd, under ThreadSanitizer
#                (build/tsan/; a developer's tool, in neither test nor CI)
#   make tsan-core  the core's suites at several thread counts under
#                ThreadSanitizer, its OpenMP team seen through LLVM's libomp
#                and Archer (build/tsan-core/; a developer's tool, as tsan)
#   make coverage  line coverage of the suites, in build/cov/coverage/
#                (a developer's tool, as tsan)
#   make float-all every float32 through the JSON printer and back (a
#                developer's tool, as tsan)
#   make openapi-check  lint docs/openapi.json, run the integration suites
#                and validate every reply they got against it
#   make ui-test the page at / in Debian's chromium (tests/ui/)
#   make container-test  the image, compose and Kubernetes files, in podman
#   make cuda-check      the CUDA=1 build and its suites, where nvcc is
#   make cuda-image-test the image's CUDA variant, built and run in podman
#   make newcomer-test   `make test` and `make run` in a bare debian:bookworm
#   make all     build everything
#
# Libraries are found with pkg-config. The recipes that need them run in a
# sub-make, after tools/deps.sh has installed what was missing.

MAKEFLAGS += --no-builtin-rules
.SUFFIXES:

CC := gcc
# make CUDA=1: the core with its CUDA backend (core/cuda/, docs/cuda.md),
# built into build/cuda/ so that its objects never mix with the CPU-only
# build's. Without CUDA=1 nothing here needs nvcc.
CUDA ?=
ifeq ($(CUDA),1)
BUILD ?= build/cuda
endif
BUILD ?= build
SAN ?=

PKG_CORE := openblas
PKG_SERVER := libmicrohttpd jansson libuv gnutls zlib
PKG_TEST := check libcurl

OPT ?= -O2
# OpenMP: the core's team of threads for one request (core/forward.c), a
# layer's conversion (server/model/layers.c), and simd loops.
OPENMP := -fopenmp
# SAN=1: ASan and UBSan. SAN=thread: TSan, with OpenMP's simd loops only:
# libgomp is not instrumented, so TSan cannot see its barriers and would
# call each stage of a request a race with the one before. Without a team
# the core runs a request's stages on its worker alone (the same tasks, in
# order: the same results), and TSan sees the server's own threads, which
# are what it is for here; SAN=thread-omp below is for the team.
# (The other omp pragmas, ignored, are not worth a warning there.)
ifeq ($(SAN),thread)
  OPENMP := -fopenmp-simd -Wno-unknown-pragmas
endif
# SAN=thread-omp: TSan with the core's team, run by LLVM's OpenMP runtime
# (libomp, which has the GOMP_ entry points gcc's code calls) in place of
# libgomp, and with Archer, the OMPT tool that tells TSan of that runtime's
# barriers and handoffs (`make tsan-core` sets OMP_TOOL_LIBRARIES).
LLVM_LIBDIR ?= /usr/lib/llvm-14/lib
OPENMP_LIBS = $(OPENMP)
ifeq ($(SAN),thread-omp)
  OPENMP_LIBS = -L$(LLVM_LIBDIR) -Wl,-rpath,$(LLVM_LIBDIR) -lomp
endif
CFLAGS_COMMON = -std=c11 $(OPT) -g -Wall -Wextra -Werror -Wshadow \
  -Wstrict-prototypes -Wmissing-prototypes -D_GNU_SOURCE -MMD -MP \
  -Iinclude $(OPENMP)
ifeq ($(SAN),1)
  CFLAGS_COMMON += -fsanitize=address,undefined -fno-sanitize-recover=all \
    -fno-omit-frame-pointer
  LDFLAGS_SAN := -fsanitize=address,undefined
endif
# COV=1: gcc's --coverage, for `make coverage` (build/cov/); not in the
# tile kernels (core/kernel.c): counters in their inner loops, shared by
# the team's threads, made the slow requests some suites hold a worker
# with outlast their client's 30 s.
ifeq ($(COV),1)
  CFLAGS_COMMON += --coverage
  LDFLAGS_SAN += --coverage
  NO_COV_KERNEL := -fno-profile-arcs -fno-test-coverage
endif
ifneq ($(filter thread thread-omp,$(SAN)),)
  CFLAGS_COMMON += -fsanitize=thread -fno-omit-frame-pointer
  LDFLAGS_SAN := -fsanitize=thread
endif

# '=' so that pkg-config runs when a recipe needs it, after deps are in.
CFLAGS_CORE = $(CFLAGS_COMMON) $(shell pkg-config --cflags $(PKG_CORE))
LIBS_CORE = $(shell pkg-config --libs $(PKG_CORE)) $(LIBS_CUDA) -lm $(OPENMP_LIBS)
# The codec library (codec/) is named from the top ("codec/buf.h"); the
# server's rooms from server/ ("http/auth.h", "sched/request.h").
CFLAGS_CODEC = $(CFLAGS_CORE) -iquote . $(shell pkg-config --cflags zlib)
CFLAGS_SERVER = $(CFLAGS_CODEC) -iquote server \
  $(shell pkg-config --cflags $(PKG_SERVER))
LIBS_SERVER = $(shell pkg-config --libs $(PKG_SERVER)) $(LIBS_CORE)
# attnd-load: the core, the codec library, libcurl and jansson; no Check,
# and nothing of the server's.
CFLAGS_LOAD = $(CFLAGS_CODEC) $(shell pkg-config --cflags libcurl jansson)
LIBS_LOAD = $(shell pkg-config --libs libcurl jansson zlib) $(LIBS_CORE)
CFLAGS_TEST = $(CFLAGS_SERVER) $(shell pkg-config --cflags $(PKG_TEST))
LIBS_TEST = $(shell pkg-config --libs $(PKG_TEST)) $(LIBS_SERVER)

# The tile kernels are compiled once per instruction set and picked at run
# time, so one binary runs well on any x86-64. For any other target (arm64)
# only the generic kernel is built, vectorised for it by -O3, and
# core/backend.c never picks another there. The target is the compiler's,
# not this machine's, so that a cross compiler (tools/cross-check.sh) gets
# the kernels it can compile.
ISA_generic :=
ISA_avx2 := -mavx2 -mfma
ISA_avx512 := -mavx2 -mfma -mavx512f -mavx512bw -mavx512dq -mavx512vl
KERNEL_ISAS := generic $(if $(filter x86_64-%,\
  $(shell $(CC) -dumpmachine 2>/dev/null)),avx2 avx512)

CORE_SRC := $(filter-out core/kernel.c,$(wildcard core/*.c))
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o) \
  $(foreach isa,$(KERNEL_ISAS),$(BUILD)/core/kernel_$(isa).o)

# The CUDA backend: core/cuda/*.cu by nvcc for the H100/H200 (sm_90a), in
# the same libattn.a, with cudart linked (rpath: CUDA_LIBDIR, unless it is
# a system directory). cuBLAS is loaded at run time once a device is found
# (core/cuda/forward.cu), by the soname of the cuBLAS headers it was built
# against: linking it would map about 150 MB into every process, GPU or not.
# Two layouts: NVIDIA's (/usr/local/cuda, libraries in lib64) and Debian's
# nvidia-cuda-toolkit (CUDA_HOME=/usr, nvcc in /usr/bin, libraries in the
# multiarch directory), which CUDA_LIBDIR finds; docker/Dockerfile's CUDA=1
# builds with the latter (CUDA 11.8: CUDA_ARCH=sm_90, which it knows).
ifeq ($(CUDA),1)
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc))
ifeq ($(NVCC),)
$(error CUDA=1: no nvcc in $(CUDA_HOME)/bin or on PATH (set CUDA_HOME or NVCC))
endif
ifeq ($(origin CUDA_LIBDIR),undefined)
CUDA_LIBDIR := $(firstword $(patsubst %/libcudart.so,%,$(wildcard \
  $(CUDA_HOME)/lib64/libcudart.so \
  $(CUDA_HOME)/lib/$(shell $(CC) -print-multiarch)/libcudart.so)) \
  $(CUDA_HOME)/lib64)
endif
CUDA_ARCH ?= sm_90a
# The host compiler nvcc runs (-ccbin), where its own choice is not one it
# supports: Debian's CUDA 11.8 takes gcc 11 at most, and finds bookworm's
# gcc 12 by default (CUDA_CCBIN=g++-11 there).
CUDA_CCBIN ?=
comma := ,
NVCCFLAGS = -std=c++17 -O3 -arch=$(CUDA_ARCH) -lineinfo -Iinclude \
  $(if $(CUDA_CCBIN),-ccbin $(CUDA_CCBIN)) \
  --Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror \
  -DATTN_CUDA_LIBDIR='"$(CUDA_LIBDIR)"' -DATTN_CUDA_ARCH='"$(CUDA_ARCH)"'
CUDA_SRC := $(wildcard core/cuda/*.cu)
CORE_OBJ += $(CUDA_SRC:%.cu=$(BUILD)/%.o)
CFLAGS_COMMON += -DATTN_HAVE_CUDA
LIBS_CUDA := -L$(CUDA_LIBDIR) \
  $(if $(filter /usr/lib/% /lib/%,$(CUDA_LIBDIR)/),,-Wl$(comma)-rpath$(comma)$(CUDA_LIBDIR)) \
  -lcudart -ldl -lstdc++
endif

SERVER_SRC := $(filter-out server/main.c,$(wildcard server/*.c server/*/*.c))
SERVER_OBJ := $(SERVER_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/assets.o

# The files attnd serves from its binary (server/http/assets.h), URL=FILE: C
# source written by tools/embed.c, one path for every BUILD as the demo
# layer's.
ASSETS := /openapi.json=docs/openapi.json \
  $(patsubst %,/=%,$(wildcard ui/index.html)) \
  $(foreach f,$(filter-out ui/index.html,$(wildcard ui/*)),/ui/$(notdir $(f))=$(f))
ASSETS_C := build/gen/assets.c

# The codec library (codec/): base64, numbers, the text buffer, the bulk
# scanner, content codings and the shared helpers. It includes no server
# header; the server, attnd-load, the benches and the tests all link it.
CODEC_SRC := $(wildcard codec/*.c)
CODEC_OBJ := $(CODEC_SRC:%.c=$(BUILD)/%.o)

# attnd-load: its library (everything but main.c) is also linked into the
# tests, which unit-test its histogram and generator.
LOAD_SRC := $(filter-out tools/load/main.c,$(wildcard tools/load/*.c))
LOAD_OBJ := $(LOAD_SRC:%.c=$(BUILD)/%.o)

TEST_SRC := $(wildcard tests/check_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_LIB_SRC := $(filter-out $(TEST_SRC),$(wildcard tests/*.c))
TEST_LIB_OBJ := $(TEST_LIB_SRC:%.c=$(BUILD)/%.o)

.PHONY: all build run test check asan deps clean format bench bench-small bench-compare compare cores-bundle device-bundle cuda-check cuda-check-suites \
  loadtest container-test cuda-image-test newcomer-test format-check fuzz openapi-lint openapi-check ui-test
.DEFAULT_GOAL := all

all: deps
	@$(MAKE) --no-print-directory build

BENCH_BIN := $(BUILD)/attn-bench $(BUILD)/codec-bench $(BUILD)/e2e-bench \
  $(BUILD)/decode-bench $(BUILD)/attn-cuda-bench
# The demo layer `make run` serves (tools/demo-layer.c): generated, never
# committed, the same bytes on every build, so one path for every BUILD
# (the docs' examples name it).
DEMO_LAYER := build/demo/demo.safetensors

build: $(BUILD)/attnd $(BUILD)/attnd-load $(BUILD)/attn-demo $(DEMO_LAYER) \
  $(BENCH_BIN) \
  $(TEST_BIN)

deps:
	@sh tools/deps.sh

run: deps
	@$(MAKE) --no-print-directory $(BUILD)/attnd $(DEMO_LAYER)
	./$(BUILD)/attnd --config config/attnd.conf --layers $(DEMO_LAYER)

# test, asan, cuda-check and fuzz compile what they run first, JOBS files at
# a time (the machine's cores), unless make was given -j of its own: CI
# calls them without -j, and one compiler at a time left a core idle for
# each of the tree's builds. The suites then run one at a time, as before.
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
PARALLEL = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(JOBS))

test: deps
	@$(MAKE) --no-print-directory $(PARALLEL) check-build
	@$(MAKE) --no-print-directory check

# Integration tests run the real server binary and the load tester. Every
# reply a suite gets through the harness's client is recorded into
# $(REPLIES_DIR)/<suite>.jsonl, and once the suites pass, validated against
# docs/openapi.json (tests/openapi/).
check: $(TEST_BIN) $(BUILD)/attnd $(BUILD)/attnd-load $(DEMO_LAYER)
	@$(RUN_SUITES) $(TEST_BIN)
	@sh tests/openapi/check.sh lint
	@sh tests/openapi/check.sh validate $(REPLIES_DIR)
	@$(UI_TEST)
# What check runs, compiled and nothing run (test and asan build it with
# -j first); each part of check below adds what it needs.
.PHONY: check-build cuda-check-build coverage-build
check-build: $(TEST_BIN) $(BUILD)/attnd $(BUILD)/attnd-load $(DEMO_LAYER)

# The page at / (ui/, docs/ui.md) in a real browser: Debian's chromium
# (tools/deps.sh ui), driven by puppeteer-core against the real server,
# with axe-core; screenshots and render times in build/ui/. `make test`
# runs it after the suites; `make asan` does not: the page's files are
# static, and the server paths its calls take are the suites' own.
UI_TEST = $(if $(SAN),,sh tests/ui/check.sh $(BUILD)/attnd)
ui-test: deps
	@$(MAKE) --no-print-directory $(BUILD)/attnd $(DEMO_LAYER)
	@sh tests/ui/check.sh $(BUILD)/attnd

# The API document: redocly lint (and its agreement with server/errors.h and
# server/config.c), then the integration suites, which start the server,
# with their replies recorded, then every reply validated against it. The
# npm packages go into build/openapi-node (tests/openapi/check.sh).
SERVER_TEST_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,\
  $(shell grep -l sh_server_start $(TEST_SRC)))
REPLIES_DIR := $(BUILD)/openapi/replies
# Under ASan (SAN=1) the suites that start no server run each in one
# process (CK_FORK=no): LeakSanitizer then looks once, when the suite
# exits, for what any of its tests leaked, where with Check's process per
# test it looked at every exit, 20 to 250 ms each: most of make asan's
# time (check_decode's 516 tests took 114 s, 7 s so). Check's timeouts do
# not apply there, and a crash ends the suite, which fails it.
NOFORK_SUITES = $(if $(filter 1,$(SAN)),\
  $(notdir $(filter-out $(SERVER_TEST_BIN),$(TEST_BIN))))
RUN_SUITES = rm -rf $(REPLIES_DIR) && mkdir -p $(REPLIES_DIR) && \
  ATTND_TEST_REPLIES_DIR=$(REPLIES_DIR) ATTND_BIN=$(BUILD)/attnd \
  ATTND_LOAD_BIN=$(BUILD)/attnd-load ATTND_TEST_NOFORK="$(NOFORK_SUITES)" \
  sh tools/run-tests.sh

openapi-lint:
	@sh tests/openapi/check.sh lint

openapi-check: deps
	@$(MAKE) --no-print-directory $(SERVER_TEST_BIN) $(BUILD)/attnd \
	  $(BUILD)/attnd-load $(DEMO_LAYER)
	@sh tests/openapi/check.sh lint
	@$(RUN_SUITES) $(SERVER_TEST_BIN)
	@sh tests/openapi/check.sh validate $(REPLIES_DIR)

# Benchmarks: medians and ratios measured in one run; never part of `test`.
# The last step writes them into docs/performance.md's generated section.
bench: deps
	@sh tools/deps.sh bench
	@$(MAKE) --no-print-directory $(BENCH_BIN) $(BUILD)/attnd $(DEMO_LAYER)
	@mkdir -p $(BUILD)/bench
	./$(BUILD)/attn-bench --csv $(BUILD)/bench/attn.csv
	./$(BUILD)/codec-bench --csv $(BUILD)/bench/codec.csv
	./$(BUILD)/e2e-bench --attnd $(BUILD)/attnd --csv $(BUILD)/bench/e2e.csv
	./$(BUILD)/decode-bench --attnd $(BUILD)/attnd --csv $(BUILD)/bench/decode.csv
	sh bench/wrk/small.sh $(BUILD)
	/usr/bin/python3 tools/perf-table.py $(BUILD)/bench docs/performance.md

# That step's script on hand-written CSVs (tests/perf-table/), in `check`.
.PHONY: perf-table-check
perf-table-check:
	@sh tests/perf-table/check.sh
check: perf-table-check

# Paths, `make` targets and attnd's names in the docs and comments that the
# tree no longer has (tests/refs/refs.py), after a planted tree of stale
# ones is caught; in `check`.
.PHONY: refs-check
refs-check:
	@sh tests/refs/check.sh
check: refs-check

# The device scripts (tools/device/session.sh, check.sh, cores.sh) run here
# from this build's programs, with no GPU and small shapes
# (tests/device/check.sh): a device session is rare and short. In `check`,
# not under ASan (the scripts, not the programs, are under test).
.PHONY: device-scripts-check
device-scripts-check: $(TEST_BIN) $(BUILD)/attnd $(BUILD)/attnd-load \
  $(BUILD)/attn-bench $(BUILD)/attn-cuda-bench
	@sh tests/device/check.sh $(BUILD)
ifneq ($(SAN),1)
check: device-scripts-check
check-build: $(BUILD)/attn-bench $(BUILD)/attn-cuda-bench
endif

# Flash version 3's kernel (core/cuda/flash_mma.cuh) run on the CPU by its
# own source and emulated warp instructions (tests/flash-emu/flash_emu.cc):
# g++ and CUDA's headers, no GPU, no nvcc. In `check` with CUDA=1.
FLASH_EMU_INC ?= $(or $(CUDA_HOME),/usr/local/cuda)/include
EMU_CXX = $(CXX) -std=c++20 -O1 -Wall -Wextra -Werror -Wno-attributes \
  -Wno-unknown-pragmas -Wno-missing-field-initializers \
  -I$(FLASH_EMU_INC) -Iinclude -Icore/cuda $(EMU_SAN)
# SAN=1: the emulators under ASan and UBSan as the C code is (tests/emu/emu.h
# tells ASan of its stack switches), with debug lines so that a report names
# the kernel's line.
ifeq ($(SAN),1)
  EMU_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all \
    -fno-omit-frame-pointer -g
endif
.PHONY: flash-emu-check
flash-emu-check: $(BUILD)/tests/flash_emu
	./$(BUILD)/tests/flash_emu
$(BUILD)/tests/flash_emu: tests/flash-emu/flash_emu.cc tests/emu/emu.h \
  core/cuda/kernels.h \
  $(wildcard core/cuda/*.cuh) include/attn/attn.h
	@mkdir -p $(@D)
	$(EMU_CXX) $< -o $@ -pthread
ifeq ($(CUDA),1)
check: flash-emu-check
endif

# The emulators' runtime (tests/emu/emu.h) checked by small kernels of its
# own (tests/emu/emu_selftest.cc): a missing barrier, a race either way, a
# shuffle, a deadlock and the atomics, and under ASan overruns of shared
# memory. In `check` and cuda-check with CUDA=1.
.PHONY: emu-selftest
emu-selftest: $(BUILD)/tests/emu_selftest
	./$(BUILD)/tests/emu_selftest
$(BUILD)/tests/emu_selftest: tests/emu/emu_selftest.cc tests/emu/emu.h
	@mkdir -p $(@D)
	$(EMU_CXX) $< -o $@
ifeq ($(CUDA),1)
check: emu-selftest
endif

# The reductions' kernels (core/cuda/reduce.cuh) run on the CPU the same
# way, against the float64 reference (tests/reduce-emu/reduce_emu.cc). In
# `check` and cuda-check with CUDA=1.
.PHONY: reduce-emu-check
reduce-emu-check: $(BUILD)/tests/reduce_emu
	./$(BUILD)/tests/reduce_emu
$(BUILD)/tests/reduce_emu: tests/reduce-emu/reduce_emu.cc tests/emu/emu.h \
  $(BUILD)/tests/ref.o core/cuda/kernels.h $(wildcard core/cuda/*.cuh) include/attn/attn.h
	@mkdir -p $(@D)
	$(EMU_CXX) -Itests $< $(BUILD)/tests/ref.o -o $@ -pthread -lm
ifeq ($(CUDA),1)
check: reduce-emu-check
endif

# Flash versions 1 and 4 on CUDA cores, one key range or split across
# blocks (core/cuda/flash_cores.cuh), and version 2 on WMMA
# (core/cuda/flash_wmma.cuh, WMMA's stand-ins in tests/emu/wmma.h), run on
# the CPU the same way, against two float64 references
# (tests/cores-emu/cores_emu.cc). In `check` and cuda-check with CUDA=1.
.PHONY: cores-emu-check
cores-emu-check: $(BUILD)/tests/cores_emu
	./$(BUILD)/tests/cores_emu
$(BUILD)/tests/cores_emu: tests/cores-emu/cores_emu.cc tests/emu/emu.h \
  tests/emu/wmma.h \
  $(BUILD)/tests/ref.o $(BUILD)/libattn.a core/cuda/kernels.h \
  $(wildcard core/cuda/*.cuh) include/attn/attn.h
	@mkdir -p $(@D)
	$(EMU_CXX) -Itests $< $(BUILD)/tests/ref.o $(BUILD)/libattn.a -o $@ \
	  -pthread $(LIBS_CORE)
ifeq ($(CUDA),1)
check: cores-emu-check
endif

# A kv cache's kernels in device memory (core/cuda/kv.cuh) run on the CPU
# the same way, against the CPU core's own pages, byte for byte
# (tests/kv-emu/kv_emu.cc). In `check` and cuda-check with CUDA=1.
.PHONY: kv-emu-check
kv-emu-check: $(BUILD)/tests/kv_emu
	./$(BUILD)/tests/kv_emu
$(BUILD)/tests/kv_emu: tests/kv-emu/kv_emu.cc tests/emu/emu.h \
  $(BUILD)/libattn.a core/cuda/kernels.h core/cuda/kv.cuh include/attn/attn.h
	@mkdir -p $(@D)
	$(EMU_CXX) $< $(BUILD)/libattn.a -o $@ -pthread $(LIBS_CORE)
ifeq ($(CUDA),1)
check: kv-emu-check
endif

EMU_BIN := $(foreach e,emu_selftest flash_emu reduce_emu cores_emu kv_emu,\
  $(BUILD)/tests/$(e))

# make asan (SAN=1) runs the emulators and their runtime's self-test under
# ASan and UBSan too, where CUDA's headers are (about 90 s on two cores);
# where they are not it leaves them out, as cuda-check does without nvcc.
ifeq ($(SAN),1)
ifneq ($(wildcard $(FLASH_EMU_INC)/cuda_runtime.h),)
check: emu-selftest flash-emu-check reduce-emu-check cores-emu-check \
  kv-emu-check
check-build: $(EMU_BIN)
endif
endif
ifeq ($(CUDA),1)
check-build: $(EMU_BIN)
endif

# Small requests alone (bench/wrk/small.sh): /healthz, a tiny
# /v1/attention and session steps under wrk, with their ratios.
bench-small: deps
	@sh tools/deps.sh bench
	@$(MAKE) --no-print-directory $(BUILD)/attnd $(DEMO_LAYER)
	sh bench/wrk/small.sh $(BUILD)

# Also times Debian's PyTorch nn.MultiheadAttention on the same shapes.
bench-compare: deps
	@/usr/bin/python3 -c 'import torch' 2>/dev/null || \
	  { [ "$$(id -u)" = 0 ] && apt-get install -y -qq python3-torch; } || \
	  { echo "bench-compare needs: sudo apt-get install -y python3-torch"; exit 1; }
	@$(MAKE) --no-print-directory $(BUILD)/attn-bench
	@mkdir -p $(BUILD)/bench
	./$(BUILD)/attn-bench --torch --csv $(BUILD)/bench/attn-compare.csv

# Resident layers (nn.MultiheadAttention, Llama-family with RoPE and GQA)
# served by attnd against float64 PyTorch references, at 1e-5 relative.
compare: deps
	@/usr/bin/python3 -c 'import torch' 2>/dev/null || \
	  { [ "$$(id -u)" = 0 ] && apt-get install -y -qq python3-torch; } || \
	  { echo "compare needs: sudo apt-get install -y python3-torch"; exit 1; }
	@$(MAKE) --no-print-directory $(BUILD)/attnd
	/usr/bin/python3 tools/compare/compare.py --attnd $(BUILD)/attnd \
	  --dir $(BUILD)/compare

# What tools/device/cores.sh runs on a machine without apt (issue 32):
# attn-bench, attnd and attnd-load (bin/) and their Debian libraries (lib/,
# ../shared/device/bundle.sh), stripped, in build/device/bundle.tar.gz
# (about 20 MB: unpacked, the 57 MB would not travel with the tree within
# the device's 64 MiB). Name build/device in the device call's carry;
# cores.sh unpacks it there.
BUNDLE ?= ../shared/device/bundle.sh
cores-bundle: deps
	@$(MAKE) --no-print-directory $(BUILD)/attn-bench $(BUILD)/attnd \
	  $(BUILD)/attnd-load
	@[ -f $(BUNDLE) ] || { echo "cores-bundle: no $(BUNDLE) (set BUNDLE=)"; exit 1; }
	rm -rf $(BUILD)/device $(BUILD)/device-stage
	mkdir -p $(BUILD)/device $(BUILD)/device-stage/bin
	cp $(BUILD)/attn-bench $(BUILD)/attnd $(BUILD)/attnd-load \
	  $(BUILD)/device-stage/bin/
	bash $(BUNDLE) $(BUILD)/device-stage $(BUILD)/device-stage/bin/*
	strip --strip-unneeded $(BUILD)/device-stage/bin/* $(BUILD)/device-stage/lib/*
	tar -C $(BUILD)/device-stage -czf $(BUILD)/device/bundle.tar.gz bin lib
	rm -rf $(BUILD)/device-stage
	@ls -l $(BUILD)/device/bundle.tar.gz

# A sweep of context lengths against a local attnd: CSV, JSON and an SVG
# plot in build/loadtest/.
loadtest: deps
	@$(MAKE) --no-print-directory $(BUILD)/attnd $(BUILD)/attnd-load
	sh tools/loadtest.sh $(BUILD)

# The container image, compose file and Kubernetes manifests, tested for
# real with podman and nginx (installs what it needs).
container-test: deps
	@$(MAKE) --no-print-directory $(BUILD)/attnd $(BUILD)/attnd-load
	sh docker/container-test.sh $(BUILD)

# The image's CUDA variant (docker/Dockerfile --build-arg CUDA=1, Debian's
# CUDA 11.8) built and run with podman here, without a GPU: attnd starts,
# /v1/info says why the GPU is not usable, requests compute on the CPU
# (docker/cuda-image-test.sh). Not in CI: the toolkit is about 2 GB.
cuda-image-test: deps
	@$(MAKE) --no-print-directory $(BUILD)/attnd $(DEMO_LAYER)
	sh docker/cuda-image-test.sh $(BUILD)

# The CUDA=1 build, where nvcc is (this machine, CI; a fresh Debian has
# none, and this then says so and passes): it compiles with -Werror, and
# the suites that know the backend pass in it without a GPU: check_cuda
# (its refusals, its GPU table on the CPU; its GPU cases where one is),
# the config's keys, the server's backend choice, /v1/info, metrics
# and health, by /v1 and OIP, and the layers' GPU bytes; and flash version 3's kernel and the
# reductions', the kv cache's and versions 1, 2 and 4's on the CPU (flash-emu-check,
# reduce-emu-check, kv-emu-check, cores-emu-check, above).
CUDA_SUITES = check_cuda check_config check_server check_oip_http \
  check_layer_api check_pinned
cuda-check: deps
	@if [ -x "$${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] || \
	    command -v nvcc >/dev/null; then \
	  $(MAKE) --no-print-directory CUDA=1 $(PARALLEL) cuda-check-build && \
	  $(MAKE) --no-print-directory CUDA=1 cuda-check-suites; \
	else \
	  echo "cuda-check: SKIP: no nvcc in \$$CUDA_HOME/bin or on PATH"; \
	fi

cuda-check-build: $(CUDA_SUITES:%=$(BUILD)/tests/%) $(BUILD)/attnd \
  $(BUILD)/attnd-load $(EMU_BIN)
cuda-check-suites: $(CUDA_SUITES:%=$(BUILD)/tests/%) $(BUILD)/attnd \
  $(BUILD)/attnd-load emu-selftest flash-emu-check reduce-emu-check \
  kv-emu-check cores-emu-check
	@[ "$(CUDA)" = 1 ] || { echo "run make cuda-check" >&2; exit 2; }
	@ATTND_BIN=$(BUILD)/attnd ATTND_LOAD_BIN=$(BUILD)/attnd-load \
	  sh tools/run-tests.sh $(CUDA_SUITES:%=$(BUILD)/tests/%)

# The README's `make test` and `make run`, as a newcomer runs them: in a
# bare debian:bookworm container with make, git and ca-certificates, on a
# clone of HEAD (docker/newcomer-test.sh; podman, as container-test).
newcomer-test:
	sh docker/newcomer-test.sh

asan: deps
	@$(MAKE) --no-print-directory BUILD=build/asan SAN=1 OPT=-O1 $(PARALLEL) \
	  check-build
	@$(MAKE) --no-print-directory BUILD=build/asan SAN=1 OPT=-O1 check

# ThreadSanitizer over the suites that start attnd, in build/tsan/ (SAN=
# thread: its core has no OpenMP team, see OPENMP above; `make tsan-core`
# is for the team). A developer's
# tool: in neither `test`, `asan` nor CI, which have no time for it. The
# servers' reports go to files, $(TSAN_LOGS)/log.<pid>, since the suites
# read their stderr; it fails when there is one: a race, or a crash of
# TSan's own (as in a thread it did not see start: tests/ use POSIX
# threads, since it does not intercept C11's thrd_create), less those that
# tests/tsan.supp names and explains. Suites whose bounds are on memory or
# pace may fail under it (its shadow memory, its slowness): their failures
# are printed, its reports are what it is for.
TSAN_LOGS = $(CURDIR)/$(BUILD)/tsan-logs
.PHONY: tsan tsan-check
tsan: deps
	@$(MAKE) --no-print-directory BUILD=build/tsan SAN=thread OPT=-O1 tsan-check
tsan-check: $(SERVER_TEST_BIN) $(BUILD)/attnd $(BUILD)/attnd-load \
  $(BUILD)/tests/attnd-pinned $(DEMO_LAYER)
	@rm -rf $(TSAN_LOGS) && mkdir -p $(TSAN_LOGS)
	@TSAN_OPTIONS="halt_on_error=0 exitcode=0 log_path=$(TSAN_LOGS)/log suppressions=$(CURDIR)/tests/tsan.supp" \
	  ATTND_BIN=$(BUILD)/attnd ATTND_LOAD_BIN=$(BUILD)/attnd-load \
	  sh tools/run-tests.sh $(SERVER_TEST_BIN) || true
	@n=$$(cat $(TSAN_LOGS)/log.* 2>/dev/null | grep -c -E '^WARNING: ThreadSanitizer|ERROR: ThreadSanitizer'); \
	  echo "tsan: $$n reports in $(TSAN_LOGS)"; [ "$$n" = 0 ]

# ThreadSanitizer over the core's OpenMP team, in build/tsan-core/ (SAN=
# thread-omp, see OPENMP above): the TCases that run the core at several
# thread counts (TSAN_CORE_RUNS, suite:tcase), every stage's parallel path
# among them (masks, GQA, windows, weights and their reductions, a paged
# cache, blocks cut short, fewer rows than threads), with Archer loaded
# (tools/deps.sh tsan-core installs it). Without Archer every stage would
# be reported as racing with the one before. The team's threads wait
# actively, so that they take a stage's tasks as it starts: TSan judges
# only the threads that did run a task, and waking ones under its slowness
# often left a small stage's tasks all to the first. It cannot see what
# uninstrumented code writes: OpenBLAS's products and libm's (the rope's
# sincos into a thread's scratch); the suites' bitwise checks across
# thread counts are what catch those. It fails on a report (in
# $(TSAN_LOGS)/log.<pid>) or a failed suite. A developer's tool, as tsan.
TSAN_CORE_RUNS := check_properties:determinism check_forward:exec \
  check_reduce:reference
.PHONY: tsan-core tsan-core-check
tsan-core: deps
	@sh tools/deps.sh tsan-core
	@$(MAKE) --no-print-directory BUILD=build/tsan-core SAN=thread-omp OPT=-O1 \
	  tsan-core-check
tsan-core-check: $(foreach r,$(TSAN_CORE_RUNS),$(BUILD)/tests/$(firstword \
  $(subst :, ,$(r))))
	@rm -rf $(TSAN_LOGS) && mkdir -p $(TSAN_LOGS)
	@ok=1; for r in $(TSAN_CORE_RUNS); do \
	  OMP_TOOL_LIBRARIES=$(LLVM_LIBDIR)/libarcher.so OMP_WAIT_POLICY=active \
	  TSAN_OPTIONS="ignore_noninstrumented_modules=1 halt_on_error=0 exitcode=0 log_path=$(TSAN_LOGS)/log" \
	  CK_RUN_CASE=$${r#*:} CK_TIMEOUT_MULTIPLIER=20 \
	  ./$(BUILD)/tests/$${r%%:*} || ok=0; done; \
	n=$$(cat $(TSAN_LOGS)/log.* 2>/dev/null | grep -c '^WARNING: ThreadSanitizer'); \
	  echo "tsan-core: $$n reports in $(TSAN_LOGS)"; [ "$$n" = 0 ] && [ $$ok = 1 ]

# Line coverage of the suites, in build/cov/ (COV=1): every Check suite
# runs once, the integration suites against build/cov/attnd, whose counts
# are written when it exits (SIGTERM's drain does; a server a test kills,
# or one past drain_timeout_s, adds none: tools/coverage.py says what else
# reads as never run); then tools/coverage.py writes build/cov/coverage/
# summary.txt (lines run per directory and file, the functions of server/,
# core/, codec/ and tools/load/ never called, the longest runs of lines
# never run) and each source annotated with its counts. -O1, not -O0: at
# -O0 the slow requests some suites hold a worker with outlast their
# client's 30 s (even so, check_sessions' test_waiting_steps_hold_memory
# may, on two cores: its server, killed, then adds no counts). Not the
# container, browser, fuzz or newcomer tests. A developer's tool, as tsan:
# a failed suite is named, and the report is still written. The objects
# keep the flags they were built with: rm -rf build/cov after changing
# them.
.PHONY: coverage coverage-check
coverage: deps
	@$(MAKE) --no-print-directory BUILD=build/cov COV=1 OPT=-O1 $(PARALLEL) \
	  coverage-build
	@$(MAKE) --no-print-directory BUILD=build/cov COV=1 OPT=-O1 coverage-check
coverage-build: $(TEST_BIN) $(BUILD)/attnd $(BUILD)/attnd-load \
  $(BUILD)/tests/attnd-pinned $(DEMO_LAYER)
coverage-check: coverage-build
	@find $(BUILD) -name '*.gcda' -delete
	@CK_TIMEOUT_MULTIPLIER=4 ATTND_BIN=$(BUILD)/attnd \
	  ATTND_LOAD_BIN=$(BUILD)/attnd-load sh tools/run-tests.sh $(TEST_BIN) || true
	@/usr/bin/python3 tools/coverage.py $(BUILD)

$(BUILD)/libattn.a: $(CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libattnd.a: $(SERVER_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libattnd-codec.a: $(CODEC_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/server/%.o: server/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_SERVER) -c $< -o $@

$(BUILD)/codec/%.o: codec/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_CODEC) -c $< -o $@

$(BUILD)/core/%.o: core/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_CORE) -c $< -o $@

$(BUILD)/core/kernel_%.o: core/kernel.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_CORE) -O3 -ffp-contract=fast $(ISA_$*) $(NO_COV_KERNEL) \
	  -DATTN_KERNEL_ISA=$* -c $< -o $@

$(BUILD)/core/cuda/%.o: core/cuda/%.cu core/cuda/kernels.h $(wildcard core/cuda/*.cuh) \
  include/attn/attn.h include/attn/error.h
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/tests/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_TEST) -iquote tools/load -c $< -o $@

$(BUILD)/libattnd-load.a: $(LOAD_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/attnd-load: $(BUILD)/tools/load/main.o $(BUILD)/libattnd-load.a $(BUILD)/libattnd-codec.a $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_SAN) $^ -o $@ $(LIBS_LOAD)

$(BUILD)/tools/load/%.o: tools/load/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_LOAD) -iquote tools/load -c $< -o $@

$(BUILD)/tests/check_%: $(BUILD)/tests/check_%.o $(TEST_LIB_OBJ) $(BUILD)/libattnd-load.a $(BUILD)/libattnd.a $(BUILD)/libattnd-codec.a $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_SAN) $(ALLOC_FAIL_WRAP) $^ -o $@ $(LIBS_TEST)

# check_decode makes the nth allocation fail (tests/alloc_fail.h).
$(BUILD)/tests/check_decode: ALLOC_FAIL_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=aligned_alloc
# check_scheduler fails the allocation of a job's node.
$(BUILD)/tests/check_scheduler: ALLOC_FAIL_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=aligned_alloc
# check_auth counts the allocations of a large key file.
$(BUILD)/tests/check_auth: ALLOC_FAIL_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=aligned_alloc
# check_codec makes getrandom fail (attnd_random_u64 has no weaker source).
$(BUILD)/tests/check_codec: ALLOC_FAIL_WRAP := -Wl,--wrap=getrandom
# check_http's intake case counts libmicrohttpd's header lookups, and its
# walks of a query's arguments; it makes an inline run end after its
# deadline, and takes the reply that would go to its connection.
$(BUILD)/tests/check_http: ALLOC_FAIL_WRAP := -Wl,--wrap=MHD_lookup_connection_value,--wrap=MHD_get_connection_values_n,--wrap=attnd_request_run,--wrap=MHD_queue_response


$(BUILD)/attnd: $(BUILD)/server/main.o $(BUILD)/libattnd.a $(BUILD)/libattnd-codec.a $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_SAN) $^ -o $@ $(LIBS_SERVER)

$(BUILD)/attn-bench: $(BUILD)/bench/attn_bench.o $(BUILD)/bench/bench.o $(BUILD)/libattnd.a $(BUILD)/libattnd-codec.a $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_SAN) $^ -o $@ $(LIBS_SERVER)

# The CUDA backend on issue 31's shapes (docs/cuda.md); says why and exits 1
# where the backend is unusable.
$(BUILD)/attn-cuda-bench: $(BUILD)/bench/cuda_bench.o $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_SAN) $^ -o $@ $(LIBS_CORE)

$(BUILD)/codec-bench: $(BUILD)/bench/codec_bench.o $(BUILD)/bench/bench.o $(BUILD)/libattnd.a $(BUILD)/libattnd-codec.a $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_SAN) $^ -o $@ $(LIBS_SERVER)

# The end-to-end bench drives a real server with bench/server.c (launcher
# and HTTP client); no test code, no Check. The tests' harness wraps the
# same launcher, so the tests link it too.
$(BUILD)/e2e-bench: $(BUILD)/bench/e2e_bench.o $(BUILD)/bench/bench.o $(BUILD)/bench/server.o $(BUILD)/libattnd.a $(BUILD)/libattnd-codec.a $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_SAN) $^ -o $@ $(LIBS_SERVER)
$(BUILD)/decode-bench: $(BUILD)/bench/decode_bench.o $(BUILD)/bench/bench.o $(BUILD)/bench/server.o $(BUILD)/libattnd.a $(BUILD)/libattnd-codec.a $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_SAN) $^ -o $@ $(LIBS_SERVER)
$(TEST_BIN): $(BUILD)/bench/server.o
# check_bench tests what the benchmark programs share (bench/bench.c).
$(BUILD)/tests/check_bench: $(BUILD)/bench/bench.o
# attnd with a pool of pinned memory made of ordinary memory
# (tests/pinned/), which check_pinned starts where there is no GPU.
$(BUILD)/tests/attnd-pinned: $(BUILD)/tests/pinned/attnd_pinned.o $(BUILD)/libattnd.a $(BUILD)/libattnd-codec.a $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_SAN) $^ -o $@ $(LIBS_SERVER)
$(BUILD)/tests/check_pinned: | $(BUILD)/tests/attnd-pinned

# Every float32 through the JSON printer and back (tests/floats/float_all.c):
# a developer's tool, as tsan (about 3 minutes on two cores), for a change
# to codec/number.c; check_codec samples a million of them.
.PHONY: float-all
float-all: $(BUILD)/tests/float-all
	./$(BUILD)/tests/float-all $(shell getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
$(BUILD)/tests/float-all: $(BUILD)/tests/floats/float_all.o $(BUILD)/libattnd-codec.a
	$(CC) $(LDFLAGS_SAN) $^ -o $@ -lm -pthread

$(BUILD)/bench/%.o: bench/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_TEST) -iquote tests -c $< -o $@

$(BUILD)/attn-demo: $(BUILD)/tools/attn-demo.o $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_SAN) $^ -o $@ $(LIBS_CORE)

$(BUILD)/tools/%.o: tools/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_SERVER) -c $< -o $@

$(BUILD)/demo-layer: $(BUILD)/tools/demo-layer.o $(BUILD)/libattnd.a \
  $(BUILD)/libattnd-codec.a $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_SAN) $^ -o $@ $(LIBS_SERVER)

# build/embed runs here, as a step of the build: a cross build
# (tools/cross-check.sh) names this machine's compiler as HOST_CC.
HOST_CC ?= $(CC)
build/embed: tools/embed.c
	@mkdir -p $(@D)
	$(HOST_CC) -std=c11 -O2 -Wall -Wextra -Werror $< -o $@

$(ASSETS_C): build/embed $(foreach a,$(ASSETS),$(lastword $(subst =, ,$(a))))
	@mkdir -p $(@D)
	./build/embed $@ $(ASSETS)

$(BUILD)/gen/assets.o: $(ASSETS_C)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_SERVER) -c $< -o $@

$(DEMO_LAYER): $(BUILD)/demo-layer
	@mkdir -p $(@D)
	./$(BUILD)/demo-layer $@

# Every C file of the tree, in .clang-format's style: `make format` applies
# it; `make format-check` (CI) fails, naming the files, where it would
# change anything. clang-format is Debian's (tools/deps.sh format).
FORMAT_SRC = $(wildcard include/attn/*.h core/*.[ch] core/*/*.[ch] \
  codec/*.[ch] server/*.[ch] server/*/*.[ch] tests/*.[ch] tests/fuzz/*.[ch] \
  tests/floats/*.c tests/pinned/*.c \
  tools/*.c tools/load/*.[ch] bench/*.[ch])
format:
	@sh tools/deps.sh format
	clang-format -i $(FORMAT_SRC)

format-check:
	@sh tools/deps.sh format
	@mkdir -p build
	@clang-format --dry-run -Werror $(FORMAT_SRC) 2>&1 | \
	  sed -n 's/^\([^ :]*\.[ch]\):[0-9]*:[0-9]*: error:.*/\1/p' | sort -u \
	  >build/format.txt || true
	@if [ -s build/format.txt ]; then \
	  echo "format-check: make format would change these files:"; \
	  cat build/format.txt; exit 1; fi
	@echo "format-check: $(words $(FORMAT_SRC)) files as .clang-format has them"

clean:
	rm -rf build

# ---- the device machine (docs/cuda.md, tools/device/check.sh) -----------
# `make device-bundle CUDA=1` gathers the CUDA build's GPU suites,
# attn-cuda-bench, attnd, attnd-load and attn-bench (debug info stripped)
# into bin/, the Debian libraries they load into lib/
# (../shared/device/bundle.sh), and what was built into BUILD-INFO, and
# packs them as $(DEVICE_BUNDLE)/bundle.tgz (its size: docs/cuda.md;
# unpacked they are past the device's 64 MiB carry limit). Carry
# $(DEVICE_BUNDLE); there,
# `bash tools/device/check.sh $(DEVICE_BUNDLE)` (issue 31) and
# `sh tools/device/cores.sh $(DEVICE_BUNDLE)` (issue 32) both run from it.
DEVICE_BUNDLE ?= .device-bundle
# the suites with GPU cases: check_cuda (the core), check_server's
# "protocol" case (cuda sessions), check_layer_api's "gpu" case (layers
# on the GPU) and check_pinned's "gpu" case (the pool pinned by CUDA)
DEVICE_TESTS = check_cuda check_server check_layer_api check_pinned
BUNDLE_SH ?= ../shared/device/bundle.sh
BUNDLE_TMP = $(BUILD)/device-bundle
.PHONY: device-bundle
device-bundle:
	@[ "$(CUDA)" = 1 ] || { echo "device-bundle: run make device-bundle CUDA=1" >&2; exit 2; }
	@[ -f $(BUNDLE_SH) ] || { echo "device-bundle: no $(BUNDLE_SH) (set BUNDLE_SH)" >&2; exit 2; }
	@$(MAKE) --no-print-directory $(DEVICE_TESTS:%=$(BUILD)/tests/%) \
	  $(BUILD)/attn-cuda-bench $(BUILD)/attnd $(BUILD)/attnd-load \
	  $(BUILD)/attn-bench
	rm -rf $(BUNDLE_TMP) $(DEVICE_BUNDLE)
	mkdir -p $(BUNDLE_TMP)/bin $(DEVICE_BUNDLE)
	cp $(DEVICE_TESTS:%=$(BUILD)/tests/%) $(BUILD)/attn-cuda-bench \
	  $(BUILD)/attnd $(BUILD)/attnd-load $(BUILD)/attn-bench $(BUNDLE_TMP)/bin/
	strip --strip-debug $(BUNDLE_TMP)/bin/*
	bash $(BUNDLE_SH) $(BUNDLE_TMP) $(BUNDLE_TMP)/bin/*
	# the device's own C++ runtime is newer: ours first would break torch
	rm -f $(BUNDLE_TMP)/lib/libstdc++.so.6 $(BUNDLE_TMP)/lib/libgcc_s.so.1
	{ git describe --always --dirty; date -u; $(NVCC) --version | tail -1; } \
	  > $(BUNDLE_TMP)/BUILD-INFO
	tar -C $(BUNDLE_TMP) -czf $(DEVICE_BUNDLE)/bundle.tgz bin lib BUILD-INFO
	@ls -l $(DEVICE_BUNDLE)/bundle.tgz

# ---- fuzzing: libFuzzer harnesses (tests/fuzz/), clang-14 -----------------
# `make fuzz` installs clang-14 and its runtimes (tools/deps.sh fuzz), builds
# every tests/fuzz/fuzz_<name>.c against the sources (attnd-load's too)
# compiled again with coverage, ASan and UBSan into build/fuzz/, and runs
# each for FUZZ_SECONDS on a copy of its seed corpus (tests/fuzz/run.sh).
# Any crash fails it.
# gcc's -Werror build is the warnings gate; clang's own warnings here (such
# as dead branches of constant tables) do not stop the fuzzers. The kernels
# use GCC vector built-ins, so they are built by gcc with the same
# sanitizers (both runtimes are compiler-rt's; clang's is linked).
FUZZ_SECONDS ?= 60
FUZZ_CC := clang-14
FUZZ_DIR := build/fuzz
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all \
  -fno-omit-frame-pointer
FUZZ_CFLAGS = $(filter-out -Werror $(OPT),$(CFLAGS_SERVER)) -O1 \
  -fsanitize=fuzzer-no-link $(FUZZ_SAN) -iquote tests -Wno-constant-conversion \
  $(shell pkg-config --cflags libcurl)
FUZZ_NAMES := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN := $(FUZZ_NAMES:%=$(FUZZ_DIR)/fuzz_%)
FUZZ_LIBS := $(FUZZ_DIR)/libfuzz-tests.a $(FUZZ_DIR)/libattnd-load.a \
  $(FUZZ_DIR)/libattnd.a $(FUZZ_DIR)/libattnd-codec.a $(FUZZ_DIR)/libattn.a
# Helpers the harnesses may call: tests/fuzz/*.c that are not harnesses, and
# the decode differential of tests/ (an archive: linked where referenced).
FUZZ_TEST_SRC := $(filter-out tests/fuzz/fuzz_%,$(wildcard tests/fuzz/*.c)) \
  $(wildcard tests/decode_diff.c)

fuzz:
	@sh tools/deps.sh fuzz
	@$(MAKE) --no-print-directory $(PARALLEL) $(FUZZ_BIN)
	@sh tests/fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_NAMES)

$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/tests/fuzz/fuzz_%.o $(FUZZ_LIBS)
	$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) $^ -o $@ $(LIBS_SERVER) \
	  $(shell pkg-config --libs libcurl)

$(FUZZ_DIR)/libattn.a: $(CORE_SRC:%.c=$(FUZZ_DIR)/%.o) \
  $(foreach isa,$(KERNEL_ISAS),$(FUZZ_DIR)/core/kernel_$(isa).o)
$(FUZZ_DIR)/libattnd.a: $(SERVER_SRC:%.c=$(FUZZ_DIR)/%.o) $(FUZZ_DIR)/gen/assets.o
$(FUZZ_DIR)/gen/assets.o: $(ASSETS_C)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@
$(FUZZ_DIR)/libattnd-codec.a: $(CODEC_SRC:%.c=$(FUZZ_DIR)/%.o)
# attnd-load's readers of replies (fuzz_load); the other harnesses link
# none of it
$(FUZZ_DIR)/libattnd-load.a: $(LOAD_SRC:%.c=$(FUZZ_DIR)/%.o)
$(FUZZ_DIR)/libfuzz-tests.a: $(FUZZ_TEST_SRC:%.c=$(FUZZ_DIR)/%.o)
$(FUZZ_LIBS):
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_DIR)/%.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_DIR)/core/kernel_%.o: core/kernel.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_CORE) -O3 -ffp-contract=fast $(ISA_$*) $(FUZZ_SAN) \
	  -DATTN_KERNEL_ISA=$* -c $< -o $@

# ---- install: libattn, attnd and attnd-load for other programs ------------
# `make install PREFIX=/usr/local [DESTDIR=/stage]` installs the core's
# headers (include/attn/), libattn.a, a shared libattn.so with the soname
# libattn.so.MAJOR (MAJOR from ATTN_VERSION in include/attn/attn.h), attn.pc
# for pkg-config, attnd and attnd-load, and a man page for each made from
# its --help (tools/man.sh; --help is made from the option tables), and
# for systemd the unit config/attnd.service.in with these paths filled in
# (into SYSTEMDUNITDIR) and config/attnd.conf as SYSCONFDIR/attnd/attnd.conf,
# which an install never overwrites (docs/deployment.md, systemd).
# `make uninstall` with the same variables removes what install put there,
# but for an attnd.conf that is no longer the one installed: the user's.
# The shared library's objects are the core's compiled again with -fPIC
# into $(BUILD)/pic/; the static build keeps its flags. `make test` (not
# `make asan`) installs into a temporary prefix and builds docs/api.md's
# example against it: tests/install/check.sh, which also runs the installed
# unit's attnd under strace against the unit's system call filter
# (tests/install/syscalls.sh).
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR = $(PREFIX)/bin
LIBDIR = $(PREFIX)/lib
INCLUDEDIR = $(PREFIX)/include
MAN1DIR = $(PREFIX)/share/man/man1
SYSCONFDIR = $(PREFIX)/etc
SYSTEMDUNITDIR = $(PREFIX)/lib/systemd/system
ATTN_VERSION := $(shell sed -n 's/^\#define ATTN_VERSION "\(.*\)"/\1/p' \
  include/attn/attn.h)
ATTN_MAJOR := $(firstword $(subst ., ,$(ATTN_VERSION)))
ATTN_SONAME := libattn.so.$(ATTN_MAJOR)
PIC_OBJ := $(CORE_OBJ:$(BUILD)/%=$(BUILD)/pic/%)
MAN_PAGES := $(BUILD)/man/attnd.1 $(BUILD)/man/attnd-load.1
INSTALL_HEADERS := $(wildcard include/attn/*.h)

.PHONY: install uninstall install-check

$(BUILD)/pic/core/%.o: core/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_CORE) -fPIC -c $< -o $@

$(BUILD)/pic/core/kernel_%.o: core/kernel.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_CORE) -fPIC -O3 -ffp-contract=fast $(ISA_$*) \
	  -DATTN_KERNEL_ISA=$* -c $< -o $@

$(BUILD)/pic/core/cuda/%.o: core/cuda/%.cu core/cuda/kernels.h $(wildcard core/cuda/*.cuh) \
  include/attn/attn.h include/attn/error.h
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fPIC -c $< -o $@

$(BUILD)/libattn.so.$(ATTN_VERSION): $(PIC_OBJ)
	$(CC) $(LDFLAGS_SAN) -shared -Wl,-soname,$(ATTN_SONAME) -Wl,--no-undefined \
	  $^ -o $@ $(LIBS_CORE)

$(BUILD)/man/attnd.1: $(BUILD)/attnd tools/man.sh
	@mkdir -p $(@D)
	./$(BUILD)/attnd --help | sh tools/man.sh attnd $(ATTN_VERSION) \
	  "a multi-head attention service over HTTP" > $@.tmp && mv $@.tmp $@

$(BUILD)/man/attnd-load.1: $(BUILD)/attnd-load tools/man.sh
	@mkdir -p $(@D)
	./$(BUILD)/attnd-load --help | sh tools/man.sh attnd-load \
	  $(ATTN_VERSION) "the load tester of attnd" > $@.tmp && mv $@.tmp $@

# attn.pc is written at install time: its prefix is PREFIX's.
install: $(BUILD)/libattn.a $(BUILD)/libattn.so.$(ATTN_VERSION) \
  $(BUILD)/attnd $(BUILD)/attnd-load $(MAN_PAGES)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig \
	  $(DESTDIR)$(INCLUDEDIR)/attn $(DESTDIR)$(MAN1DIR)
	install -m 644 $(INSTALL_HEADERS) $(DESTDIR)$(INCLUDEDIR)/attn/
	install -m 644 $(BUILD)/libattn.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(BUILD)/libattn.so.$(ATTN_VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libattn.so.$(ATTN_VERSION) $(DESTDIR)$(LIBDIR)/$(ATTN_SONAME)
	ln -sf $(ATTN_SONAME) $(DESTDIR)$(LIBDIR)/libattn.so
	install -m 755 $(BUILD)/attnd $(BUILD)/attnd-load $(DESTDIR)$(BINDIR)/
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(MAN1DIR)/
	install -d $(DESTDIR)$(SYSCONFDIR)/attnd $(DESTDIR)$(SYSTEMDUNITDIR)
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	  config/attnd.service.in > $(DESTDIR)$(SYSTEMDUNITDIR)/attnd.service
	chmod 644 $(DESTDIR)$(SYSTEMDUNITDIR)/attnd.service
	[ -e $(DESTDIR)$(SYSCONFDIR)/attnd/attnd.conf ] || \
	  install -m 644 config/attnd.conf $(DESTDIR)$(SYSCONFDIR)/attnd/attnd.conf
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' \
	  'includedir=$(INCLUDEDIR)' '' 'Name: attn' \
	  'Description: multi-head attention on the CPU, the core of attnd' \
	  'Version: $(ATTN_VERSION)' 'Requires.private: $(PKG_CORE)' \
	  'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lattn' \
	  'Libs.private: $(LIBS_CUDA) -lm -fopenmp' > $(DESTDIR)$(LIBDIR)/pkgconfig/attn.pc

uninstall:
	rm -f $(INSTALL_HEADERS:include/attn/%=$(DESTDIR)$(INCLUDEDIR)/attn/%) \
	  $(DESTDIR)$(LIBDIR)/libattn.a $(DESTDIR)$(LIBDIR)/libattn.so \
	  $(DESTDIR)$(LIBDIR)/$(ATTN_SONAME) \
	  $(DESTDIR)$(LIBDIR)/libattn.so.$(ATTN_VERSION) \
	  $(DESTDIR)$(LIBDIR)/pkgconfig/attn.pc \
	  $(DESTDIR)$(BINDIR)/attnd $(DESTDIR)$(BINDIR)/attnd-load \
	  $(MAN_PAGES:$(BUILD)/man/%=$(DESTDIR)$(MAN1DIR)/%) \
	  $(DESTDIR)$(SYSTEMDUNITDIR)/attnd.service
	! cmp -s config/attnd.conf $(DESTDIR)$(SYSCONFDIR)/attnd/attnd.conf || \
	  rm -f $(DESTDIR)$(SYSCONFDIR)/attnd/attnd.conf
	-rmdir $(DESTDIR)$(INCLUDEDIR)/attn $(DESTDIR)$(SYSCONFDIR)/attnd 2>/dev/null

install-check: $(BUILD)/libattn.a $(BUILD)/libattn.so.$(ATTN_VERSION) \
  $(BUILD)/attnd $(BUILD)/attnd-load $(MAN_PAGES) $(DEMO_LAYER)
	@MAKE="$(MAKE)" sh tests/install/check.sh $(BUILD)

# `make` builds all that install installs, so that `sudo make install`
# after it compiles nothing as root.
ifeq ($(SAN),)
check: install-check
check-build: $(BUILD)/libattn.so.$(ATTN_VERSION) $(MAN_PAGES)
build: $(BUILD)/libattn.so.$(ATTN_VERSION) $(MAN_PAGES)
endif
# ---- end of install -------------------------------------------------------

# The compiler's dependency files; not the arm64 tree of tools/cross-check.sh
# (build/cross/sysroot), whose etc/ has directories named *.d.
-include $(shell find $(BUILD) -name sysroot -prune -o -name '*.d' -type f \
  -print 2>/dev/null)
.SECONDARY:
