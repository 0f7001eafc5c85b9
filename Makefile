# dsv41 - plain Makefile. `make` builds the library and the dsv41 program; `make test` runs the suite.
# `make sanitize` and `make tsan` build everything again under ASan+UBSan and ThreadSanitizer, each
# in its own folder under build/, and run the whole suite on those builds; `make test-amx` runs it on
# the amx kernel set's emulation of the AMX tiles.
CC      ?= gcc
CFLAGS  ?= -O2
# The flags the build needs are appended to any CFLAGS given on the command line, never replaced by
# them. -ffp-contract=off: the reference's rounding points assume no fused multiply-adds.
override CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -ffp-contract=off -Iinclude
# The library's folders are its layers (src/README.md); its files and the tests that call its
# internals see every folder's headers. The program, the server and the examples see include/
# only, so a reach into src/ from them is a compile error.
LAYERS  = base runtime kernels model text io lib tools
LIB_INC = -Isrc $(LAYERS:%=-Isrc/%)
LDLIBS  = -lpcre2-8 -lutf8proc -lm -lpthread
CLI_LDLIBS = -ledit
# the library is position independent (one set of objects serves the .so and the .a) and
# exports only what include/*.h declare
LIB_CFLAGS = -fPIC -fvisibility=hidden
# the objcopy of the compiler's own binutils (a cross compiler's knows its target)
OBJCOPY ?= $(shell $(CC) -print-prog-name=objcopy)
# where objects, the library and the test programs go, and the program itself
BUILD   ?= build
PROGRAM ?= dsv41

VERSION := $(shell sed -n 's/^\#define DSV41_VERSION "\(.*\)"/\1/p' include/dsv41.h)
SOMAJOR := $(firstword $(subst ., ,$(VERSION)))
SONAME  = libdsv41.so.$(SOMAJOR)
PREFIX  ?= /usr/local
BINDIR  = $(PREFIX)/bin
LIBDIR  = $(PREFIX)/lib
INCDIR  = $(PREFIX)/include
MANDIR  = $(PREFIX)/share/man

# the library's sources: one folder per layer (a file in src/ itself builds, and `make layers`
# names it: it belongs in a layer)
LIB_SRC = $(wildcard src/*.c src/*/*.c)
# the kernel sets are the longest compiles by far (avx2.c: about two minutes under the sanitizers):
# listed first, and the library before the server's objects in the program's prerequisites, so
# that a parallel build starts them first and compiles the rest beside them instead of after
LIB_SRC := $(filter src/kernels/%,$(LIB_SRC)) $(filter-out src/kernels/%,$(LIB_SRC))
LIB_HDR = $(wildcard src/*.h src/*/*.h)
# dsv41.h for embedders, dsv41_dev.h for the developer tools, dsv41_dist.h for the transport
PUB_HDR = include/dsv41.h include/dsv41_dev.h include/dsv41_dist.h
LIB_OBJ = $(LIB_SRC:src/%.c=$(BUILD)/%.o) $(BUILD)/tiny_model.o
TESTS   = $(patsubst tests/%.c,$(BUILD)/%,$(wildcard tests/test_*.c))
EXAMPLES = $(patsubst examples/%.c,$(BUILD)/example_%,$(wildcard examples/*.c))

all: $(PROGRAM) $(BUILD)/libdsv41.so $(BUILD)/libdsv41.a

$(BUILD)/%.o: src/%.c $(LIB_HDR) $(PUB_HDR) | $(BUILD)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIB_INC) $(LIB_CFLAGS) -c $< -o $@

# A kernel set this CPU cannot run never executes in its test runs: under the sanitizers
# (make sanitize, make tsan) it is compiled without their instrumentation, which made avx512.c
# the costliest compile of CI on a CPU without AVX-512 (191 s of CPU under ASan+UBSan at -O2,
# 2026-12-07); a CPU with it keeps it instrumented
ifeq ($(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null || echo none),none)
$(BUILD)/kernels/avx512.o: override CFLAGS := $(filter-out -fsanitize=% -fno-sanitize-recover=%,$(CFLAGS))
endif

# the sampler's exp loop vectorizes only with the full vectorizer and no FP-trap ordering
# (neither changes a result: no fast-math, no contraction)
$(BUILD)/text/sampler.o: override CFLAGS += -O3 -fno-trapping-math

$(BUILD)/embed: tools/embed.c | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@

$(BUILD)/tiny_model.c: models/tiny.json $(BUILD)/embed
	$(BUILD)/embed $< tiny_model_json > $@.tmp && mv $@.tmp $@

$(BUILD)/tiny_model.o: $(BUILD)/tiny_model.c
	$(CC) $(CFLAGS) $(LIB_CFLAGS) -c $< -o $@

# The unit tests call internal functions: they link the objects as they are.
$(BUILD)/libdsv41_internal.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

# The static library is one relocatable object whose internal (hidden) names are made local,
# so that a program with its own linear() or json_free() links against it: only the dsv41_
# names are global, as in the shared library.
$(BUILD)/libdsv41.a: $(LIB_OBJ)
	$(CC) -r -nostdlib $^ -o $(BUILD)/dsv41_lib.o && $(OBJCOPY) --localize-hidden $(BUILD)/dsv41_lib.o
	rm -f $@ && ar rcs $@ $(BUILD)/dsv41_lib.o

$(BUILD)/libdsv41.so.$(VERSION): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) $^ $(LDLIBS) -o $@

$(BUILD)/libdsv41.so: $(BUILD)/libdsv41.so.$(VERSION)
	ln -sf libdsv41.so.$(VERSION) $(BUILD)/$(SONAME) && ln -sf $(SONAME) $@

# ---- the HTTP server (`dsv41 serve`): its own folder, linked into the program only; the chat
# page's files (server/ui/NAME.EXT) are embedded as the arrays ui_NAME_EXT
SERVER_SRC    = $(wildcard server/*.c)
SERVER_OBJ    = $(SERVER_SRC:server/%.c=$(BUILD)/server/%.o)
SERVER_UI     = $(patsubst server/ui/%,$(BUILD)/ui_%.c,$(wildcard server/ui/*))
SERVER_LDLIBS = -lmicrohttpd

$(BUILD)/ui_%.c: server/ui/% $(BUILD)/embed
	$(BUILD)/embed $< ui_$(subst .,_,$*) > $@.tmp && mv $@.tmp $@

# server/ sees include/ only; cli/ sees server/ too, for `dsv41 serve` (cli/serve.c)
$(BUILD)/server/%.o: server/%.c $(wildcard server/*.h) $(PUB_HDR) | $(BUILD)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(PROGRAM): $(BUILD)/libdsv41.a $(wildcard cli/*.c cli/*.h) $(SERVER_OBJ) $(SERVER_UI) $(wildcard server/*.h)
	$(CC) $(CFLAGS) -Icli -iquote server $(wildcard cli/*.c) $(SERVER_OBJ) $(SERVER_UI) $(BUILD)/libdsv41.a $(LDLIBS) $(CLI_LDLIBS) $(SERVER_LDLIBS) -o $@

# dsv41-mpi: the same program with the model split across MPI ranks (`make dsv41-mpi`, needs
# mpicc). mpi/main.c starts MPI and runs the command line on rank 0, so the CLI's main is
# compiled under another name; nothing else in cli/ knows about MPI.
MPICC ?= mpicc
CLI_SRC = $(wildcard cli/*.c)

$(BUILD)/mpi_cli_%.o: cli/%.c $(wildcard cli/*.h server/*.h) $(PUB_HDR) | $(BUILD)
	$(CC) $(CFLAGS) -iquote server -Dmain=dsv41_cli_main -c $< -o $@

dsv41-mpi: mpi/main.c mpi/transport.c mpi/transport.h $(CLI_SRC:cli/%.c=$(BUILD)/mpi_cli_%.o) $(SERVER_OBJ) $(SERVER_UI) $(wildcard server/*.h) $(BUILD)/libdsv41.a
	$(MPICC) $(CFLAGS) -Icli mpi/main.c mpi/transport.c $(CLI_SRC:cli/%.c=$(BUILD)/mpi_cli_%.o) $(SERVER_OBJ) $(SERVER_UI) $(BUILD)/libdsv41.a \
		$(LDLIBS) $(CLI_LDLIBS) $(SERVER_LDLIBS) -o $@

# speculative decoding over ranks, checked by tests/mpi.sh
$(BUILD)/mpi_draft: tests/mpi_draft.c mpi/transport.c mpi/transport.h $(BUILD)/libdsv41.a
	$(MPICC) $(CFLAGS) -Impi tests/mpi_draft.c mpi/transport.c $(BUILD)/libdsv41.a $(LDLIBS) -o $@

$(BUILD)/test_%: tests/test_%.c tests/testing.h $(BUILD)/libdsv41_internal.a
	$(CC) $(CFLAGS) $(LIB_INC) $< $(BUILD)/libdsv41_internal.a $(LDLIBS) -o $@

# every allocation of the library fails in turn: the allocator's entry points wrapped at link time
# for this one program (tests/test_oom.c), never a flag of the library
OOM_WRAP = -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=strdup

$(BUILD)/test_oom: tests/test_oom.c tests/testing.h $(BUILD)/libdsv41_internal.a
	$(CC) $(CFLAGS) $(LIB_INC) $< $(BUILD)/libdsv41_internal.a $(LDLIBS) $(OOM_WRAP) -o $@

# the server's reply shapes on replies the test writes (no model, no socket): its API sources
SERVER_API_SRC = server/api.c server/anthropic.c server/responses.c server/structured.c server/jbuf.c server/job.c server/sched.c

$(BUILD)/test_server: tests/test_server.c tests/testing.h $(SERVER_API_SRC) $(wildcard server/*.h) $(BUILD)/libdsv41_internal.a
	$(CC) $(CFLAGS) -iquote server $< $(SERVER_API_SRC) $(BUILD)/libdsv41_internal.a $(LDLIBS) -o $@

$(BUILD)/example_%: examples/%.c $(BUILD)/libdsv41.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdsv41.a $(LDLIBS) -o $@

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR) $(DESTDIR)$(MANDIR)/man1
	install -m 755 $(PROGRAM) $(DESTDIR)$(BINDIR)/dsv41
	install -m 644 $(BUILD)/libdsv41.a $(DESTDIR)$(LIBDIR)/libdsv41.a
	install -m 755 $(BUILD)/libdsv41.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libdsv41.so.$(VERSION)
	ln -sf libdsv41.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libdsv41.so
	install -m 644 $(PUB_HDR) $(DESTDIR)$(INCDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' dsv41.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/dsv41.pc
	install -m 644 docs/dsv41.1 $(DESTDIR)$(MANDIR)/man1/dsv41.1

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/dsv41 $(DESTDIR)$(LIBDIR)/libdsv41.a $(DESTDIR)$(LIBDIR)/libdsv41.so.$(VERSION) \
	      $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libdsv41.so $(PUB_HDR:include/%=$(DESTDIR)$(INCDIR)/%) \
	      $(DESTDIR)$(LIBDIR)/pkgconfig/dsv41.pc $(DESTDIR)$(MANDIR)/man1/dsv41.1

$(BUILD):
	mkdir -p $(BUILD)

# The NEON set on x86: the library and two tests cross-built for arm64, run under qemu-user by
# tests/neon.sh (needs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user). The tests use
# no tokenizer, so tests/arm64_stubs.c stands in for arm64 builds of PCRE2 and utf8proc; TEST_QEMU
# tells them they run emulated (tests/testing.h).
ARM_CC  = aarch64-linux-gnu-gcc
ARM_AR  = aarch64-linux-gnu-ar
ARM_OBJ = $(LIB_SRC:src/%.c=build/aarch64/%.o) build/aarch64/tiny_model.o

build/aarch64/%.o: src/%.c $(LIB_HDR) $(PUB_HDR) | build/aarch64
	@mkdir -p $(@D)
	$(ARM_CC) $(CFLAGS) $(LIB_INC) -c $< -o $@

build/aarch64/tiny_model.o: build/tiny_model.c | build/aarch64
	$(ARM_CC) $(CFLAGS) -c $< -o $@

build/aarch64/libdsv41.a: $(ARM_OBJ)
	rm -f $@ && $(ARM_AR) rcs $@ $^

build/aarch64/test_%: tests/test_%.c tests/testing.h tests/arm64_stubs.c build/aarch64/libdsv41.a
	$(ARM_CC) $(CFLAGS) -DTEST_QEMU $(LIB_INC) $< tests/arm64_stubs.c build/aarch64/libdsv41.a -lm -lpthread -o $@

build/aarch64:
	mkdir -p build/aarch64

# tests/run.sh starts them in this order, the longest first (neon.sh runs under qemu on one CPU),
# so that its lanes finish together
TEST_SCRIPTS = tests/serve_structured.sh tests/cli.sh tests/cli_text.sh tests/cli_chat.sh tests/cli_structured.sh tests/cli_input.sh tests/cli_guard.sh tests/layers.sh tests/serve.sh \
               tests/serve_text.sh tests/serve_agents.sh tests/serve_slots.sh tests/serve_long.sh tests/serve_draft.sh tests/load.sh tests/python.sh tests/install.sh tests/readme.sh tests/runner.sh tests/links.sh

# The npm packages the server's tests drive it with (openai, @anthropic-ai/sdk, zod, puppeteer-core)
# are the tests' own: installed from the lock file into the ignored tests/node/node_modules when
# missing or older than the lock, so that `make test` needs nothing the README's first line does
# not install. Without npm the server tests that need them say so and fail.
NODE_PACKAGES = tests/node/node_modules/.package-lock.json

$(NODE_PACKAGES): tests/node/package-lock.json tests/node/package.json
	if command -v npm >/dev/null; then npm ci --prefix tests/node --no-audit --no-fund; fi

test: all $(TESTS) $(EXAMPLES) $(NODE_PACKAGES) layers
	DSV41=./$(PROGRAM) tests/run.sh tests/neon.sh tests/cli_skeleton.sh $(TESTS) $(TEST_SCRIPTS)

# The layers keep one direction: no library object uses a symbol from a layer above its own, and
# the modules' graph has no cycle (tools/layers.sh, its table; tests/layers.sh proves it fails).
layers: $(LIB_OBJ)
	@tools/layers.sh $(filter-out $(BUILD)/tiny_model.o,$(LIB_OBJ))

# Any error report fails the run: UBSan stops at its first finding instead of carrying on. -O2,
# not -O1: every access is instrumented all the same, and the suite's forwards (the kernels) ran
# about 1.5x faster (test_spec: 64 s of CPU against 97, 2026-12-07), which pays for the longer
# compile many times over.
SANITIZE_FLAGS = -O2 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
TSAN_FLAGS = -O1 -g -fsanitize=thread

# (a test's time limit in tests/run.sh grows with the sanitizers' slowdown, unless one is given)
# Left out there, for CI's time: serve_long.sh (its 16,450-position state, copied, saved and
# loaded, runs under the sanitizers in test_long, and the server's paths to it in serve_slots.sh),
# and runner.sh and links.sh, which check tests/run.sh and the docs' links and run no build of
# ours. The structured-output tests ask one seed per case instead of 4 to 6 (DSV41_TEST_SEEDS):
# serve_structured.sh and cli_structured.sh still run every route, schema, grammar, client and
# --draft path once, and each sanitized reply on the real vocabulary costs seconds
SANITIZE_SKIP = tests/serve_long.sh tests/runner.sh tests/links.sh
sanitize:
	DSV41_TEST_SEEDS=$${DSV41_TEST_SEEDS:-1} DSV41_TEST_TIMEOUT=$${DSV41_TEST_TIMEOUT:-3600} $(MAKE) BUILD=build/asan PROGRAM=build/asan/dsv41 CFLAGS="$(SANITIZE_FLAGS)" \
	    TEST_SCRIPTS="$(filter-out $(SANITIZE_SKIP),$(TEST_SCRIPTS))" test

tsan:
	DSV41_TEST_TIMEOUT=$${DSV41_TEST_TIMEOUT:-3600} $(MAKE) BUILD=build/tsan PROGRAM=build/tsan/dsv41 CFLAGS="$(TSAN_FLAGS)" test

# The whole suite with the amx kernel set as every program's default, on a build where the
# emulation of the tile instructions replaces them (so a host with AMX tests the emulation too)
test-amx:
	DSV41_KERNELS=amx $(MAKE) BUILD=build/amx PROGRAM=build/amx/dsv41 CFLAGS="-O2 -DDSV41_AMX_EMULATE" test

# dsv41-mpi on 2 and 3 ranks of this host (Open MPI's mpirun)
test-mpi: dsv41 dsv41-mpi $(BUILD)/mpi_draft
	tests/mpi.sh

# ---- fuzzing: libFuzzer harnesses (tests/fuzz/fuzz_*.c) over the library built with clang,
# ASan and UBSan. `make fuzz-smoke` runs each for 10 s from seeds made of the shared data (CI);
# `tests/fuzz/run.sh SECONDS [HARNESS...]` runs them for as long as wanted (docs/TESTING.md).
FUZZ_CC      = clang
FUZZ_SAN     = -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS  = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -ffp-contract=off -Iinclude -g -O1 \
               -fno-omit-frame-pointer $(FUZZ_SAN)
FUZZ_LIB_OBJ = $(LIB_SRC:src/%.c=build/fuzz/%.o) build/fuzz/tiny_model.o
FUZZ_TARGETS = $(patsubst tests/fuzz/%.c,build/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))

build/fuzz/%.o: src/%.c $(LIB_HDR) $(PUB_HDR) | build/fuzz
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(LIB_INC) -fsanitize=fuzzer-no-link -c $< -o $@

# the SIMD kernel sets take minutes of CPU to compile under the sanitizers and only ever see
# shapes the loader checked: they are built uninstrumented here
build/fuzz/kernels/avx2.o build/fuzz/kernels/avx2_many.o build/fuzz/kernels/avx512.o build/fuzz/kernels/neon.o: FUZZ_SAN =

build/fuzz/tiny_model.o: build/tiny_model.c | build/fuzz
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

build/fuzz/libdsv41.a: $(FUZZ_LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h build/fuzz/libdsv41.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(LIB_INC) -fsanitize=fuzzer $< build/fuzz/libdsv41.a $(LDLIBS) -o $@

# the server's API layer and its jobs take requests and replies without HTTP or a scheduler
FUZZ_API_SRC = server/api.c server/anthropic.c server/responses.c server/structured.c server/jbuf.c server/job.c

build/fuzz/fuzz_api: tests/fuzz/fuzz_api.c tests/fuzz/fuzz.h $(FUZZ_API_SRC) $(wildcard server/*.h) build/fuzz/libdsv41.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -iquote server -fsanitize=fuzzer $< $(FUZZ_API_SRC) build/fuzz/libdsv41.a $(LDLIBS) -o $@

build/fuzz:
	mkdir -p build/fuzz

fuzz: $(FUZZ_TARGETS)

fuzz-smoke: dsv41 fuzz
	tests/fuzz/run.sh 10

clean:
	rm -rf build dsv41 dsv41-mpi

.PHONY: all test layers test-mpi test-amx sanitize tsan clean fuzz fuzz-smoke install uninstall
