# potato-training: build, test, demo, install.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR = $(DESTDIR)$(PREFIX)/bin
MANDIR = $(DESTDIR)$(PREFIX)/share/man
# The agents copied to remote hosts, one per architecture.
LIBDIR = $(DESTDIR)$(PREFIX)/lib/potato-training
GO ?= go
# -timeout is a guard against a hang, not a speed target: lib/trainer/hf's
# real fine-tunes (five trainers on four backends) take near half an hour
# on 2 cores.
GOTEST_FLAGS ?= -count=1 -timeout 60m -parallel 4

CMDS = $(notdir $(wildcard cmd/*))
MAN1 = $(wildcard man/*.1)
MAN5 = $(wildcard man/*.5)

.PHONY: all build test testbin check lint man screenshots demo install uninstall clean dist

all: build

# potato-agent is also built for the Linux hosts an ssh or SLURM backend
# may be: the dispatch copies the one matching the host's uname -m.
AGENT_ARCHES = amd64 arm64
build:
	$(GO) build -o bin/ ./cmd/...
	for a in $(AGENT_ARCHES); do CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -o bin/linux-$$a/potato-agent ./cmd/potato-agent || exit 1; done

# The README's test command runs this: lint, then every test.
test: lint testbin
	POTATO_TEST_BIN=$(TESTBIN) $(GO) test $(GOTEST_FLAGS) ./...

# The binaries the tests run, with the potatotest tag's seams, built once
# for every test package (internal/testcli.Binaries).
TESTBIN = $(CURDIR)/.testbin
testbin:
	$(GO) build -tags potatotest -o $(TESTBIN)/ ./cmd/...

# The fast tier: every test but those that use a real service (the test
# sshd, SLURM, the released Potato, chromium) or run a real model (a
# fine-tune, or embed-logreg on the packaged encoder), each of which says
# so in its skip; the Python trainer's unit tests included. make test
# stays the whole suite. -parallel 4: most parallel tests wait on the
# processes they start, so more of them than cores keep the cores busy;
# -p 4 likewise for the packages (go test's default is one per core), as
# some of them mostly wait on timers (lib/server's slow peers, the agent's
# heartbeat). The packages that run longest are named first, so that go
# test starts them first instead of ending on them (it starts packages in
# the order given), and the test binaries are linked without DWARF
# (-ldflags=-w: a quarter of the linker's time; stack traces keep their
# file and line), since every run links all of them again.
#
# The tests' temporary files (and go test's own work directory) go to a
# directory of their own on /dev/shm where that is a RAM file system with
# 512 MiB free (a run peaks under 100 MiB), removed after: the tests create
# and delete tens of thousands of files, and on an ext4 /tmp creating their
# inodes and syncing them took a quarter of the fast tier's system time
# (36-41 s of CPU against 27-30 s, on 2 cores). Elsewhere TMPDIR is left
# as it is.
CHECK_FIRST = ./lib/trainer/hf ./cmd/potato-dispatch ./lib/server ./lib/agent
CHECK_TEST = POTATO_TEST_BIN=$(TESTBIN) $(GO) test -short -count=1 -ldflags=-w -parallel 4 -p 4 $(CHECK_FIRST) ./...
check: testbin
	@tmp=; \
	if [ "$$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && \
	   [ "$$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $$4 }')" -ge 524288 ] 2>/dev/null; then \
		tmp=$$(mktemp -d /dev/shm/potato-check.XXXXXX) || tmp=; \
	fi; \
	trap '[ -z "$$tmp" ] || rm -rf "$$tmp"' EXIT; trap 'exit 130' INT TERM; \
	echo "$(CHECK_TEST)$${tmp:+ (TMPDIR=$$tmp)}"; \
	TMPDIR=$${tmp:-$${TMPDIR:-/tmp}} $(CHECK_TEST)

lint:
	@out=$$(gofmt -l cmd lib internal); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	mandoc -Tlint -Wwarning $(MAN1) $(MAN5)

# Rewrites the generated key table of man/potato-config.5, and the
# trainer and kind tables of man/potato-config.5 and man/potato-agent.1.
man:
	$(GO) test ./lib/config -run TestManPageKeys -update
	$(GO) test ./lib/trainer -run TestManPageKindTable -update

# Writes the README's screenshots of the Training page into docs/, from the
# browser test (needs chromium and the test sshd of scripts/test-setup).
screenshots:
	mkdir -p docs
	$(GO) test -count=1 ./lib/server -run 'TestPageInBrowser|TestPageCancel|TestRunPageModel' -args -screenshots $(CURDIR)/docs

# The main job end to end on the example project: validate, check the
# local device, train the built-in trainer locally (the example's default
# backend is remote), write prelabels to examples/reviews/project.sqlite.
DEMO = examples/reviews/config.yaml
demo: build
	bin/potato validate $(DEMO) --strict
	bin/potato training check local $(DEMO) --trainer tfidf-logreg
	@id=$$(bin/potato training run $(DEMO) --trainer tfidf-logreg --schemas sentiment --backend local) && \
		bin/potato training status $(DEMO) $$id

install: build
	mkdir -p $(BINDIR) $(MANDIR)/man1 $(MANDIR)/man5
	for c in $(CMDS); do install -m 0755 bin/$$c $(BINDIR)/$$c; done
	for a in $(AGENT_ARCHES); do mkdir -p $(LIBDIR)/linux-$$a && install -m 0755 bin/linux-$$a/potato-agent $(LIBDIR)/linux-$$a/potato-agent; done
	install -m 0644 $(MAN1) $(MANDIR)/man1/
	install -m 0644 $(MAN5) $(MANDIR)/man5/

uninstall:
	for c in $(CMDS); do rm -f $(BINDIR)/$$c; done
	rm -rf $(LIBDIR)
	for m in $(notdir $(MAN1)); do rm -f $(MANDIR)/man1/$$m; done
	for m in $(notdir $(MAN5)); do rm -f $(MANDIR)/man5/$$m; done

clean:
	rm -rf bin .testbin

# make dist: for each platform of DIST_PLATFORMS, a tarball
# dist/potato-training-VERSION-OS-ARCH.tar.gz (the tree make install
# lays out, with install.sh) and a wheel whose scripts are the binaries
# (pip install dist/potato_training-...whl); then dist/SHA256SUMS. No cgo:
# the binaries are cross-compiled, static on Linux. The version is
# internal/cli's constant, the commit the checkout's HEAD ("-modified"
# after it when the tree has changes). The wheels are built by hatchling
# (packaging/, pinned in requirements/build.txt) in a virtual environment
# of their own, dist/.build-venv, made from $(DIST_PYTHON). The tarballs
# and the wheels are compressed side by side, which is most of the time
# once go build's cache is warm.
VERSION = $(shell sed -n 's/^const Version = "\(.*\)"$$/\1/p' internal/cli/cli.go)
COMMIT = $(shell git rev-parse HEAD 2>/dev/null)$(shell [ -n "$$(git status --porcelain 2>/dev/null)" ] && echo -modified)
DIST_PLATFORMS = linux-amd64 linux-arm64 darwin-amd64 darwin-arm64
DIST_LDFLAGS = -s -w -X potato-training/internal/cli.Commit=$(COMMIT)
DIST_PYTHON ?= python3
DIST_VENV = dist/.build-venv
SHA256SUM = $(shell command -v sha256sum >/dev/null 2>&1 && echo sha256sum || echo shasum -a 256)
dist:
	@[ -n "$(VERSION)" ] || { echo "no const Version in internal/cli/cli.go"; exit 1; }
	rm -rf dist/stage dist/*.tar.gz dist/*.whl dist/SHA256SUMS
	for p in $(DIST_PLATFORMS); do \
		CGO_ENABLED=0 GOOS=$${p%-*} GOARCH=$${p#*-} $(GO) build -trimpath -ldflags "$(DIST_LDFLAGS)" \
			-o dist/stage/potato-training-$(VERSION)-$$p/bin/ ./cmd/... || exit 1; \
	done
	for p in $(DIST_PLATFORMS); do \
		t=dist/stage/potato-training-$(VERSION)-$$p; \
		for a in $(AGENT_ARCHES); do mkdir -p $$t/lib/potato-training/linux-$$a && \
			cp -p dist/stage/potato-training-$(VERSION)-linux-$$a/bin/potato-agent $$t/lib/potato-training/linux-$$a/ || exit 1; done; \
		mkdir -p $$t/share/man/man1 $$t/share/man/man5 $$t/share/doc/potato-training && \
		cp $(MAN1) $$t/share/man/man1/ && cp $(MAN5) $$t/share/man/man5/ && \
		cp scripts/potato-agent.service scripts/potato-auto-retrain.cron $$t/share/doc/potato-training/ && \
		cp packaging/install.sh $$t/ || exit 1; \
	done
	@sum=$$($(SHA256SUM) requirements/build.txt | cut -d' ' -f1); \
	if [ "$$(cat $(DIST_VENV)/.requirements-sha256 2>/dev/null)" != "$$sum" ]; then \
		echo "making $(DIST_VENV) (requirements/build.txt)"; \
		rm -rf $(DIST_VENV) && $(DIST_PYTHON) -m venv $(DIST_VENV) && \
		$(DIST_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r requirements/build.txt && \
		echo "$$sum" > $(DIST_VENV)/.requirements-sha256 || exit 1; \
	fi
	pids=; for p in $(DIST_PLATFORMS); do \
		tar -C dist/stage -czf dist/potato-training-$(VERSION)-$$p.tar.gz potato-training-$(VERSION)-$$p & pids="$$pids $$!"; \
		POTATO_DIST_PLATFORM=$$p POTATO_DIST_TREE=$(CURDIR)/dist/stage/potato-training-$(VERSION)-$$p \
			$(DIST_VENV)/bin/pip wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps --no-index -w dist ./packaging & pids="$$pids $$!"; \
	done; \
	for pid in $$pids; do wait $$pid || exit 1; done
	cd dist && $(SHA256SUM) *.tar.gz *.whl > SHA256SUMS
	@echo "dist/: potato-training $(VERSION) (commit $(COMMIT)) for $(DIST_PLATFORMS)"
