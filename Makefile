# dsv41 - plain Makefile. `make` builds the library and the dsv41 program; `make test` runs the suite.
CC      ?= gcc
CFLAGS  ?= -O2
# -ffp-contract=off: the reference's rounding points assume no fused multiply-adds
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -ffp-contract=off -Iinclude -Isrc
LDLIBS  = -lpcre2-8 -lutf8proc -lm -lpthread
CLI_LDLIBS = -ledit
# the library is position independent (one set of objects serves the .so and the .a) and
# exports only what include/dsv41.h declares
LIB_CFLAGS = -fPIC -fvisibility=hidden
# the objcopy of the compiler's own binutils (a cross compiler's knows its target)
OBJCOPY ?= $(shell $(CC) -print-prog-name=objcopy)

VERSION := $(shell sed -n 's/^\#define DSV41_VERSION "\(.*\)"/\1/p' include/dsv41.h)
SOMAJOR := $(firstword $(subst ., ,$(VERSION)))
SONAME  = libdsv41.so.$(SOMAJOR)
PREFIX  ?= /usr/local
BINDIR  = $(PREFIX)/bin
LIBDIR  = $(PREFIX)/lib
INCDIR  = $(PREFIX)/include
MANDIR  = $(PREFIX)/share/man

LIB_SRC = $(wildcard src/*.c)
LIB_OBJ = $(LIB_SRC:src/%.c=build/%.o) build/tiny_model.o
TESTS   = $(patsubst tests/%.c,build/%,$(wildcard tests/test_*.c))
EXAMPLES = $(patsubst examples/%.c,build/example_%,$(wildcard examples/*.c))

all: dsv41 build/libdsv41.so build/libdsv41.a

build/%.o: src/%.c $(wildcard src/*.h) include/dsv41.h | build
	$(CC) $(CFLAGS) $(LIB_CFLAGS) -c $< -o $@

# the sampler's exp loop vectorizes only with the full vectorizer and no FP-trap ordering
# (neither changes a result: no fast-math, no contraction)
build/sampler.o: CFLAGS += -O3 -fno-trapping-math

build/embed: tools/embed.c | build
	$(CC) $(CFLAGS) $< -o $@

build/tiny_model.c: models/tiny.json build/embed
	build/embed $< tiny_model_json > $@.tmp && mv $@.tmp $@

build/tiny_model.o: build/tiny_model.c
	$(CC) $(CFLAGS) $(LIB_CFLAGS) -c $< -o $@

# The unit tests call internal functions: they link the objects as they are.
build/libdsv41_internal.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

# The static library is one relocatable object whose internal (hidden) names are made local,
# so that a program with its own linear() or json_free() links against it: only the dsv41_
# names are global, as in the shared library.
build/libdsv41.a: $(LIB_OBJ)
	$(CC) -r -nostdlib $^ -o build/dsv41_lib.o && $(OBJCOPY) --localize-hidden build/dsv41_lib.o
	rm -f $@ && ar rcs $@ build/dsv41_lib.o

build/libdsv41.so.$(VERSION): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) $^ $(LDLIBS) -o $@

build/libdsv41.so: build/libdsv41.so.$(VERSION)
	ln -sf libdsv41.so.$(VERSION) build/$(SONAME) && ln -sf $(SONAME) $@

# ---- the HTTP server (`dsv41 serve`): its own folder, linked into the program only; the chat
# page's files (server/ui/NAME.EXT) are embedded as the arrays ui_NAME_EXT
SERVER_SRC    = $(wildcard server/*.c)
SERVER_UI     = $(patsubst server/ui/%,build/ui_%.c,$(wildcard server/ui/*))
SERVER_LDLIBS = -lmicrohttpd

build/ui_%.c: server/ui/% build/embed
	build/embed $< ui_$(subst .,_,$*) > $@.tmp && mv $@.tmp $@

dsv41: $(wildcard cli/*.c cli/*.h) $(SERVER_SRC) $(SERVER_UI) $(wildcard server/*.h) build/libdsv41.a
	$(CC) $(CFLAGS) -Icli $(wildcard cli/*.c) $(SERVER_SRC) $(SERVER_UI) build/libdsv41.a $(LDLIBS) $(CLI_LDLIBS) $(SERVER_LDLIBS) -o $@

# dsv41-mpi: the same program with the model split across MPI ranks (`make dsv41-mpi`, needs
# mpicc). mpi/main.c starts MPI and runs the command line on rank 0, so the CLI's main is
# compiled under another name; nothing else in cli/ knows about MPI.
MPICC ?= mpicc
CLI_SRC = $(wildcard cli/*.c)

build/mpi_cli_%.o: cli/%.c $(wildcard cli/*.h) include/dsv41.h | build
	$(CC) $(CFLAGS) -Dmain=dsv41_cli_main -c $< -o $@

dsv41-mpi: mpi/main.c $(CLI_SRC:cli/%.c=build/mpi_cli_%.o) $(SERVER_SRC) $(SERVER_UI) $(wildcard server/*.h) build/libdsv41.a
	$(MPICC) $(CFLAGS) -Icli mpi/main.c $(CLI_SRC:cli/%.c=build/mpi_cli_%.o) $(SERVER_SRC) $(SERVER_UI) build/libdsv41.a \
		$(LDLIBS) $(CLI_LDLIBS) $(SERVER_LDLIBS) -o $@

build/test_%: tests/test_%.c tests/testing.h build/libdsv41_internal.a
	$(CC) $(CFLAGS) $< build/libdsv41_internal.a $(LDLIBS) -o $@

build/example_%: examples/%.c build/libdsv41.a
	$(CC) $(CFLAGS) $< build/libdsv41.a $(LDLIBS) -o $@

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR) $(DESTDIR)$(MANDIR)/man1
	install -m 755 dsv41 $(DESTDIR)$(BINDIR)/dsv41
	install -m 644 build/libdsv41.a $(DESTDIR)$(LIBDIR)/libdsv41.a
	install -m 755 build/libdsv41.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libdsv41.so.$(VERSION)
	ln -sf libdsv41.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libdsv41.so
	install -m 644 include/dsv41.h $(DESTDIR)$(INCDIR)/dsv41.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' dsv41.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/dsv41.pc
	install -m 644 docs/dsv41.1 $(DESTDIR)$(MANDIR)/man1/dsv41.1

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/dsv41 $(DESTDIR)$(LIBDIR)/libdsv41.a $(DESTDIR)$(LIBDIR)/libdsv41.so.$(VERSION) \
	      $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libdsv41.so $(DESTDIR)$(INCDIR)/dsv41.h \
	      $(DESTDIR)$(LIBDIR)/pkgconfig/dsv41.pc $(DESTDIR)$(MANDIR)/man1/dsv41.1

build:
	mkdir -p build

test: all $(TESTS) $(EXAMPLES)
	tests/run.sh $(TESTS)

# dsv41-mpi on 2 and 3 ranks of this host (Open MPI's mpirun)
test-mpi: dsv41 dsv41-mpi
	tests/mpi.sh

clean:
	rm -rf build dsv41 dsv41-mpi

.PHONY: all test test-mpi clean install uninstall
