# VDL — the two commands a newcomer needs are `make run` and `make test`.
GO        ?= go
BIN       ?= bin
PKGS      := ./...
# Core packages run with the race detector.
RACE_PKGS := ./vfs/... ./storage/... ./raftnode/... ./kafka/... ./checker/... ./failpoints/...
TEST_TIMEOUT ?= 20m

.PHONY: all build test test-race run bench bench-storage bench-replication bench-e2e lint clean fuzz sim test-canaries

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

test: lint
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)
	$(GO) test -count=1 -race -timeout $(TEST_TIMEOUT) $$($(GO) list $(RACE_PKGS) 2>/dev/null)
	$(MAKE) --no-print-directory test-canaries

run: build
	$(BIN)/vdl dev

# Figures beside the machine's own limits, measured in the same run
# (docs/storage.md, docs/replication.md, docs/performance.md).
bench: bench-storage bench-replication bench-e2e

bench-storage:
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1s ./storage/

bench-replication:
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 10s -timeout 20m ./raftnode/clustertest/

# End-to-end: a local 3-process cluster, franz-go producers and consumers,
# beside the raw disk limit (docs/performance.md). VDL_BENCH_SECONDS (20),
# VDL_BENCH_PRODUCERS (4), VDL_BENCH_INFLIGHT (1), VDL_BENCH_DIR (a temp dir).
bench-e2e:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkE2E$$' -benchtime 1x -timeout 10m ./integration/

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

.PHONY: build-failpoint check-no-failpoint-rewrites test-failpoints bench-failpoints

build-failpoint:
	GO=$(GO) scripts/build-failpoint.sh $(FAILPOINT_BIN) $(FAILPOINT_PKGS)

# Every registered failpoint enabled on a running failpoint-build cluster,
# and the production build guarantee (no names, 404, same machine code).
test-failpoints:
	$(GO) test -count=1 -timeout 15m ./failpointtest/

# Produce MB/s of the production vdl with markers vs. the same tree with the
# markers removed (alternating runs, ratio). VDL_FPBENCH_SECONDS (10),
# VDL_FPBENCH_PRODUCERS (4), VDL_FPBENCH_ROUNDS (2).
bench-failpoints:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkProduceMarkers$$' -benchtime 1x -timeout 15m ./failpointtest/

# CI guard: no failpoint-ctl leftovers (stash files, binding files, rewritten
# markers) may be committed.
check-no-failpoint-rewrites:
	@bad=$$(git ls-files | grep -E '__failpoint_stash__|(^|/)binding__failpoint_binding__\.go$$'); \
	rw=$$(git grep -l -e '_curpkg_(' -- '*.go' 2>/dev/null); \
	if [ -n "$$bad$$rw" ]; then echo "failpoint rewrites are committed (run failpoint-ctl disable):"; echo "$$bad"; echo "$$rw"; exit 1; fi

lint: check-no-failpoint-rewrites

# --- Deterministic simulator (docs/simulation.md) ---
# make sim                  a batch of seeds (SEEDS=n, START=n, or BUDGET=10m)
# make sim SEED=n           replay one seed exactly, with a readable trace
# make sim CANARY=name      ... with a deliberately broken variant (a vdlcanary build)
# SIMARGS passes more flags (-sim.nodes=5 -sim.dcs=3 -sim.effects).
SEEDS  ?=
START  ?= 1
BUDGET ?=
CANARY ?=
SIMARGS ?=
SIMTAGS := $(if $(CANARY),-tags vdlcanary)
SIMCANARY := $(if $(CANARY),-sim.canary=$(CANARY))

sim:
ifdef SEED
	$(GO) test $(SIMTAGS) -count=1 -timeout 0 -run '^TestSim$$' ./simulator -v -args -sim.seed=$(SEED) $(SIMCANARY) $(SIMARGS)
else
	$(GO) test $(SIMTAGS) -count=1 -timeout 0 -run '^TestSimBatch$$' ./simulator -args -sim.start=$(START) \
		$(if $(SEEDS),-sim.seeds=$(SEEDS)) $(if $(BUDGET),-sim.budget=$(BUDGET)) $(SIMCANARY) $(SIMARGS)
endif

# Every canary must be caught by the check it targets (docs/testing.md).
test-canaries:
	$(GO) test -tags vdlcanary -count=1 -timeout $(TEST_TIMEOUT) -run 'TestCanar' ./simulator/
