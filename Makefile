# potato-training: build, test, demo, install.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR = $(DESTDIR)$(PREFIX)/bin
MANDIR = $(DESTDIR)$(PREFIX)/share/man
# The agents copied to remote hosts, one per architecture.
LIBDIR = $(DESTDIR)$(PREFIX)/lib/potato-training
GO ?= go
GOTEST_FLAGS ?= -count=1 -timeout 30m -parallel 4

CMDS = $(notdir $(wildcard cmd/*))
MAN1 = $(wildcard man/*.1)
MAN5 = $(wildcard man/*.5)

.PHONY: all build test lint man screenshots demo install uninstall clean

all: build

# potato-agent is also built for the Linux hosts an ssh or SLURM backend
# may be: the dispatch copies the one matching the host's uname -m.
AGENT_ARCHES = amd64 arm64
build:
	$(GO) build -o bin/ ./cmd/...
	for a in $(AGENT_ARCHES); do CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -o bin/linux-$$a/potato-agent ./cmd/potato-agent || exit 1; done

# The README's test command runs this: lint, then every test.
test: lint
	$(GO) test $(GOTEST_FLAGS) ./...

lint:
	@out=$$(gofmt -l cmd lib internal); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	mandoc -Tlint -Wwarning $(MAN1) $(MAN5)

# Rewrites the generated key table of man/potato-config.5.
man:
	$(GO) test ./lib/config -run TestManPageKeys -update

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
	rm -rf bin
