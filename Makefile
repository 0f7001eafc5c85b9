# dsv41 - plain Makefile. `make` builds the library and the dsv41 program; `make test` runs the suite.
# `make sanitize` and `make tsan` build everything again under ASan+UBSan and ThreadSanitizer, each
# in its own folder under build/, and run the whole suite on those builds.
CC      ?= gcc
CFLAGS  ?= -O2
# The flags the build needs are appended to any CFLAGS given on the command line, never replaced by
# them. -ffp-contract=off: the reference's rounding points assume no fused multiply-adds.
override CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -ffp-contract=off -Iinclude -Isrc
LDLIBS  = -lpcre2-8 -lutf8proc -lm -lpthread
CLI_LDLIBS = -ledit
# where objects, the library and the test programs go, and the program itself
BUILD   ?= build
PROGRAM ?= dsv41

LIB_SRC = $(wildcard src/*.c)
LIB_OBJ = $(LIB_SRC:src/%.c=$(BUILD)/%.o) $(BUILD)/tiny_model.o
TESTS   = $(patsubst tests/%.c,$(BUILD)/%,$(wildcard tests/test_*.c))

all: $(PROGRAM)

$(BUILD)/%.o: src/%.c $(wildcard src/*.h) include/dsv41.h | $(BUILD)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/embed: tools/embed.c | $(BUILD)
	$(CC) $(CFLAGS) $< -o $@

$(BUILD)/tiny_model.c: models/tiny.json $(BUILD)/embed
	$(BUILD)/embed $< tiny_model_json > $@.tmp && mv $@.tmp $@

$(BUILD)/tiny_model.o: $(BUILD)/tiny_model.c
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libdsv41.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(PROGRAM): $(wildcard cli/*.c cli/*.h) $(BUILD)/libdsv41.a
	$(CC) $(CFLAGS) $(wildcard cli/*.c) $(BUILD)/libdsv41.a $(LDLIBS) $(CLI_LDLIBS) -o $@

# dsv41-mpi: the same program with the model split across MPI ranks (`make dsv41-mpi`, needs
# mpicc). mpi/main.c starts MPI and runs the command line on rank 0, so the CLI's main is
# compiled under another name; nothing else in cli/ knows about MPI.
MPICC ?= mpicc
CLI_SRC = $(wildcard cli/*.c)

$(BUILD)/mpi_cli_%.o: cli/%.c $(wildcard cli/*.h) include/dsv41.h | $(BUILD)
	$(CC) $(CFLAGS) -Dmain=dsv41_cli_main -c $< -o $@

dsv41-mpi: mpi/main.c $(CLI_SRC:cli/%.c=$(BUILD)/mpi_cli_%.o) $(BUILD)/libdsv41.a
	$(MPICC) $(CFLAGS) mpi/main.c $(CLI_SRC:cli/%.c=$(BUILD)/mpi_cli_%.o) $(BUILD)/libdsv41.a $(LDLIBS) $(CLI_LDLIBS) -o $@

$(BUILD)/test_%: tests/test_%.c tests/testing.h $(BUILD)/libdsv41.a
	$(CC) $(CFLAGS) $< $(BUILD)/libdsv41.a $(LDLIBS) -o $@

$(BUILD):
	mkdir -p $(BUILD)

test: $(PROGRAM) $(TESTS)
	DSV41=./$(PROGRAM) tests/run.sh $(TESTS)

# Any error report fails the run: UBSan stops at its first finding instead of carrying on.
SANITIZE_FLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
TSAN_FLAGS = -O1 -g -fsanitize=thread

sanitize:
	$(MAKE) BUILD=build/asan PROGRAM=build/asan/dsv41 CFLAGS="$(SANITIZE_FLAGS)" test

tsan:
	$(MAKE) BUILD=build/tsan PROGRAM=build/tsan/dsv41 CFLAGS="$(TSAN_FLAGS)" test

# dsv41-mpi on 2 and 3 ranks of this host (Open MPI's mpirun)
test-mpi: dsv41 dsv41-mpi
	tests/mpi.sh

clean:
	rm -rf build dsv41 dsv41-mpi

.PHONY: all test test-mpi sanitize tsan clean
