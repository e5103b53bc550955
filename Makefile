# VDL — the two commands a newcomer needs are `make run` and `make test`.
GO        ?= go
BIN       ?= bin
PKGS      := ./...
# Core packages run with the race detector.
RACE_PKGS := ./vfs/... ./storage/... ./raftnode/... ./kafka/... ./checker/... ./failpoints/...
TEST_TIMEOUT ?= 20m

.PHONY: all build test test-race run bench lint clean fuzz

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

test: lint
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)
	$(GO) test -count=1 -race -timeout $(TEST_TIMEOUT) $$($(GO) list $(RACE_PKGS) 2>/dev/null)

run: build
	$(BIN)/vdl dev

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2x ./storage/...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "not gofmt'ed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

clean:
	rm -rf $(BIN)
	$(GO) clean -testcache

# --- Failpoint build (docs/failpoints.md) ---
# Instrumented binaries into bin/failpoint/: go build -tags failpoint
# -toolexec failpoint-toolexec, own GOCACHE under .cache/; sources untouched.
FAILPOINT_BIN  ?= $(BIN)/failpoint
FAILPOINT_PKGS ?= ./cmd/...

.PHONY: build-failpoint check-no-failpoint-rewrites

build-failpoint:
	GO=$(GO) scripts/build-failpoint.sh $(FAILPOINT_BIN) $(FAILPOINT_PKGS)

# CI guard: no failpoint-ctl leftovers (stash files, binding files, rewritten
# markers) may be committed.
check-no-failpoint-rewrites:
	@bad=$$(git ls-files | grep -E '__failpoint_stash__|(^|/)binding__failpoint_binding__\.go$$'); \
	rw=$$(git grep -l -e '_curpkg_(' -- '*.go' 2>/dev/null); \
	if [ -n "$$bad$$rw" ]; then echo "failpoint rewrites are committed (run failpoint-ctl disable):"; echo "$$bad"; echo "$$rw"; exit 1; fi

lint: check-no-failpoint-rewrites
