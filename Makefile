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
