# airlock — see README.md. `make run` and `make test` are the two commands a
# new machine needs; `make tools` installs what the tests use.
GO        ?= go
GOBIN     := $(shell $(GO) env GOPATH)/bin
OPA_VERSION := $(shell $(GO) list -m -f '{{.Version}}' github.com/open-policy-agent/opa)
OPA       := $(GOBIN)/opa
REGO_DIRS := policies/lib presets
# Tests exec the opa CLI (signed-bundle test): find the one `make tools` installs.
export PATH := $(GOBIN):$(PATH)

.PHONY: build run test lint bench fuzz soak tools clean

build: bin/airlock

# The sandbox's own processes (init, command stage, reaper) as a small
# binary embedded in airlock (sandbox/stagebin): each starts in a few
# milliseconds instead of paying airlock's whole start.
STAGE := sandbox/stagebin/airlock-stage
# airlock itself is static too (CGO_ENABLED=0): a launcher run as root
# loads no shared objects (ld.so, libc's NSS modules for a user lookup),
# and starts ~1 ms sooner for it. User and group names come from
# /etc/passwd and /etc/group.

bin/airlock: $(shell find . -name '*.go' -o -name '*.rego' | grep -v _test.go) go.mod go.sum
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags=-s\ -w -o $(STAGE) ./sandbox/stagecmd
	CGO_ENABLED=0 $(GO) build -tags airlock_stage -o $@ ./cmd/airlock

# The demo pod (needs root): a gateway and a shim in their sandboxes behind
# the proxy, until Ctrl-C. `./bin/airlock demo` shows policy decisions only.
run: build
	./bin/airlock up $(RUN_ARGS)

# The real opa CLI, at the same version airlock embeds: the reviewers' tool.
$(OPA):
	$(GO) install github.com/open-policy-agent/opa@$(OPA_VERSION)

tools: $(OPA)

# vet for arm64 too (a supported platform): a system call only amd64 has
# fails there.
lint: build
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=linux GOARCH=arm64 $(GO) vet ./...
	./bin/airlock policy fmt -l --fail $(REGO_DIRS)

test: lint tools
	$(OPA) test $(REGO_DIRS)
	./bin/airlock policy test presets
	$(GO) test -race -count=1 ./...

# Hot paths as Go benchmarks (decision, identity lookup, leaf signing), then
# airlock side by side with direct, squid and tinyproxy on loopback, then (as
# root) the pod: demo boot to READY, crash to healthy, memory with 20 services.
bench: build
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 20000x ./policies/
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 300x ./proxy/... ./sandbox/ ./internal/events/
	$(GO) run ./integration/bench -airlock bin/airlock

# Each fuzz target for FUZZTIME, one after another; `make test` runs their
# checked-in seeds (testdata/fuzz/) as ordinary tests. A failing input is
# written under testdata/fuzz/ and fails the run.
FUZZTIME ?= 30s
# A new input is minimised for at most this long: one of the tunnel loop's
# runs takes milliseconds, and the default (60s) starves the search.
FUZZMINIMIZETIME ?= 5s
FUZZ_TARGETS := policies:FuzzCanonicalHost policies:FuzzCanonicalPath policies:FuzzDecideCanonical policies:FuzzAmbiguousPath \
	proxy:FuzzConnectTarget proxy:FuzzAuditLine proxy:FuzzInspectLoop supervisor/manifest:FuzzParse
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t#*:}; echo "== $$name ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) ./$$pkg/; \
	done

# 10,000 concurrent connections and a million requests through the real
# proxy on loopback: RSS, fds and goroutines before, at peak and after.
soak: build
	$(GO) run ./integration/soak -airlock bin/airlock

clean:
	rm -rf bin $(STAGE)
