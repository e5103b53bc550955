# VDL — the two commands a newcomer needs are `make run` and `make test`.
GO        ?= go
BIN       ?= bin
PKGS      := ./...
# Core packages run with the race detector.
RACE_PKGS := ./vfs/... ./storage/... ./raftnode/... ./kafka/... ./checker/... ./failpoints/... ./internal/tlsbatch/...
TEST_TIMEOUT ?= 20m

.PHONY: all build test test-race run image campaign gate bench bench-storage bench-replication bench-e2e bench-tls bench-read bench-fetch bench-streams lint clean fuzz sim test-canaries

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

# The server image (deploy/Containerfile): a static binary on scratch.
IMAGE   ?= vdl
ENGINE  ?= $(shell command -v podman || command -v docker)
image:
	CGO_ENABLED=0 $(GO) build -trimpath -o deploy/vdl ./cmd/vdl
	$(ENGINE) build -f deploy/Containerfile -t $(IMAGE) .

# Figures beside the machine's own limits, measured in the same run
# (docs/storage.md, docs/replication.md, docs/performance.md).
bench: bench-fetch bench-read bench-storage bench-replication bench-e2e

bench-storage:
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1s ./storage/

bench-replication:
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 10s -timeout 20m ./raftnode/clustertest/
	$(GO) test -count=1 -run '^$$' -bench '^Benchmark(TLSAppends|EncodeAppend)$$' -benchtime 2s ./raftnode/transport/

# End-to-end: a local 3-process cluster, franz-go producers and consumers,
# beside the raw disk limit (docs/performance.md): BenchmarkProduceDefaults
# (default server config and franz-go producer: 4 clients against the
# 3-writer disk aggregate / 3, one client at half that load, end-to-end
# latency), then BenchmarkE2E (tuned, labelled). VDL_BENCH_SECONDS (15 and
# 20), VDL_BENCH_PRODUCERS (4, E2E), VDL_BENCH_INFLIGHT (1, E2E),
# VDL_BENCH_DIR (a temp dir).
# A campaign against real processes: make campaign NAME=kill_restart_leader
# (testcases/NAME.txt, jepsen-like/campaigns/NAME.txt or NAME.yaml, or
# jepsen-like/campaigns/extra/NAME.yaml). A report directory per run in
# reports/ (report.html, summary.json, history.jsonl; reports/index.html);
# CAMPAIGN_BIN=bin/failpoint/vdl (after make build-failpoint) for power
# losses; NET=loopback|netns|auto (auto: namespaces when root); DURATION=30m
# replaces every workload's duration (make gate too).
CAMPAIGN_BIN ?= $(BIN)/vdl
NET ?= auto
CAMPAIGN_FILE = $(firstword $(wildcard testcases/$(NAME).txt jepsen-like/campaigns/$(NAME).txt jepsen-like/campaigns/$(NAME).yaml jepsen-like/campaigns/extra/$(NAME).yaml))
campaign: build
	@test -n "$(CAMPAIGN_FILE)" || { echo "no campaign $(NAME) in testcases/ or jepsen-like/campaigns/"; exit 2; }
	$(BIN)/vdl-jepsen run --bin $(CAMPAIGN_BIN) --net $(NET) $(if $(DURATION),--duration $(DURATION)) --report data/campaigns/$(NAME).md $(CAMPAIGN_FILE)

# The release gate: every script of testcases/ and every script and YAML
# definition of jepsen-like/campaigns/ against the failpoint build; fails
# unless every one PASSes. Report: data/gate/report.md, and a directory
# per run in reports/.
gate: build build-failpoint
	$(BIN)/vdl-jepsen gate --bin $(FAILPOINT_BIN)/vdl --net $(NET) $(if $(DURATION),--duration $(DURATION)) --report data/gate/report.md

# Many idle streams beside 10 hot ones on a 3-server replica set (docs/operations.md,
# Sizing), and leaders returning to their preferred DC after it heals (docs/configserver.md):
# VDL_BENCH_STREAMS (1000), VDL_BENCH_QUIESCE=0 for the figures without quiescence.
bench-streams:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkPlanTransfers$$' -benchtime 1s ./configserver/
	$(GO) test -count=1 -run '^$$' -bench '^Benchmark(Streams|DCHeal)$$' -benchtime 1x -timeout 60m ./server/

bench-tls:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkTLS$$' -benchtime 1x -timeout 10m ./integration/

bench-e2e:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkProduceDefaults$$' -benchtime 1x -timeout 10m ./integration/
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkE2E$$' -benchtime 1x -timeout 10m ./integration/

# Reads on the default config (docs/performance.md): catch-up and tailing
# consume beside a cold read of the same segment files, the Kafka 0.10
# profile's consume beside its produce, a tailing consumer's latency idle
# and during a catch-up from the disk (no read budget, the default one, a
# paced one). VDL_BENCH_READ_MB (200), VDL_BENCH_ISO_ROUNDS (3),
# VDL_BENCH_LEGACY_MB (128), VDL_BENCH_PROFILE (a path: the leader's and
# the consumer's CPU profiles during the first read). Dropping the page
# cache needs root.
bench-read:
	$(GO) test -count=1 -run '^$$' -bench '^(BenchmarkReadDefaults|BenchmarkCatchUpStreams|BenchmarkKafka010|BenchmarkCatchUpIsolation)$$' -benchtime 1x -timeout 20m ./integration/

# Regression benchmarks of the fetch path: allocations and bytes copied per
# fetch, pooled reads, down-conversion throughput per core; and a segment's
# bytes sent from memory beside sendfile(2).
bench-fetch:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkFetchPath$$' -benchtime 2s ./kafka/
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkReadPooled$$' -benchtime 2s ./storage/
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkToMessageSet$$' -benchtime 1s ./kafka/records/
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkSendChunks$$' -benchtime 8x ./kafka/

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
