# heed: the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Every module in the workspace, as package patterns.
PKGS = $(shell $(GO) list -m -f '{{.Dir}}/...')
DATA ?= .heed
NATS_LISTEN ?= 127.0.0.1:4222
# Fuzz budgets are execution counts, not durations: go1.26's fuzz
# coordinator can report a spurious "context deadline exceeded" when a
# -fuzztime duration ends while a worker is busy (golang/go#75804, fixed in
# go1.27). Each is about 10-15 s on 2 cores.
FUZZ_DECODE ?= 100000x
FUZZ_FASTSTAGE ?= 30000x
FUZZ_LOAD ?= 200000x
# heed --version: the version, commit and build date, stamped at link time
# (go build stamps no VCS data in a workspace build; without these heed
# falls back to what the build info holds).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
HEED_LDFLAGS = -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(BUILD_DATE)

.PHONY: all build run test test-fast doc-test unit vet fmt-check staticcheck modcheck fuzz bench chaos chaos-single cluster deps clean

all: build

## build: every binary into bin/
build:
	@mkdir -p bin
	$(GO) build -ldflags '$(HEED_LDFLAGS)' -o bin/heed ./tools/heed
	$(GO) build -o bin/heed-bench ./tools/bench
	$(GO) build -o bin/heed-indexer ./services/indexer/cmd/heed-indexer
	$(GO) build -o bin/heed-runner ./services/runner/cmd/heed-runner
	$(GO) build -o bin/heed-learner ./services/learner/cmd/heed-learner
	$(GO) build -o bin/heed-confirm-router ./services/confirm/cmd/heed-confirm-router
	$(GO) build -o bin/heed-healer ./services/healer/cmd/heed-healer
	$(GO) build -o bin/heed-escalator ./services/escalator/cmd/heed-escalator
	$(GO) build -o bin/heed-changesets ./services/changesets/cmd/heed-changesets
	$(GO) build -o bin/heed-loadgen ./tools/loadgen

## run: heed with an embedded NATS server and every service, data in $(DATA)
run: build
	./bin/heed up --data $(DATA) --nats-listen $(NATS_LISTEN) --tools skills/tools.yaml

## test: the whole suite, as CI runs it: every tier (fast, integration,
## long), vet, gofmt, staticcheck, modcheck and short fuzz runs
test: deps fmt-check vet staticcheck modcheck unit fuzz

## test-fast: the fast tier (unit and golden tests) and the integration
## tier (real embedded nats-server, heed as a process), without the long
## tier (the 1,000-run load test, the crash acceptance test, TestChaos,
## TestImmediateContinue: they skip under -short); about 45 s on 2 cores.
## Without -race, which takes it past a minute: make test runs -race.
test-fast: deps
	$(GO) test -short -count=1 -timeout 5m $(PKGS)

## doc-test: only the tests of the docs (part of test and test-fast): every
## command README.md and docs/*.md show, run against a real heed up, and
## every command, flag, path, test, identifier and YAML file they name
doc-test: deps
	$(GO) test -count=1 ./tools/internal/doctest
	$(GO) test -count=1 -run 'Docs|DocShows|DocRules|Interrupted|EventsDoc' ./tools/heed ./services/healer ./services/confirm ./events

deps:
	@./tools/ci/deps.sh

unit:
	$(GO) test -race -count=1 -timeout 12m $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

staticcheck:
	$(GO) run $(STATICCHECK) $(PKGS)

## modcheck: every module of go.work builds and vets on its own
## (GOWORK=off) and its go.mod and go.sum are tidy
modcheck:
	@GO=$(GO) ./tools/ci/modcheck.sh

## fuzz: a short run of every fuzz target (seed corpus in testdata/fuzz)
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=$(FUZZ_DECODE) ./events
	$(GO) test -run='^$$' -fuzz='^FuzzFastStage$$' -fuzztime=$(FUZZ_FASTSTAGE) ./events/internal/schemacheck
	$(GO) test -run='^$$' -fuzz='^FuzzLoad$$' -fuzztime=$(FUZZ_LOAD) ./lib/skill

## chaos: the chaos suite on the local 3-node cluster with every service
## its own process: 1,000 runs while a random service or node is killed
## (kill -9) every 1.5 s, at least 24 times, then a rolling restart of every
## service; prints the report (0 lost, 0 done twice, 0 stuck, replay equal).
## CI runs a short version (60 runs, 6 kills) within make test.
CHAOS_RUNS ?= 1000
CHAOS_KILLS ?= 24
CHAOS_SEED ?= random
chaos: deps
	set -o pipefail; HEED_CHAOS_CLUSTER_RUNS=$(CHAOS_RUNS) HEED_CHAOS_CLUSTER_KILLS=$(CHAOS_KILLS) HEED_CHAOS_SEED=$(CHAOS_SEED) $(GO) test -count=1 -timeout 60m -run '^TestClusterChaos$$' -v ./conformance 2>&1 | tee chaos.log | grep -E 'chaos report|kills in order|kill order seed|^(---|ok|FAIL|PASS)|_test.go:[0-9]+: [^-]' || { echo "the whole log: chaos.log"; exit 1; }

## chaos-single: kill -9 of heed up and of its one NATS server during runs,
## 5 trials of 300 runs (CI runs 1 trial of 100 within make test)
CHAOS_SINGLE_RUNS ?= 300
CHAOS_TRIALS ?= 5
chaos-single: deps
	set -o pipefail; HEED_CHAOS_RUNS=$(CHAOS_SINGLE_RUNS) HEED_CHAOS_TRIALS=$(CHAOS_TRIALS) $(GO) test -count=1 -timeout 60m -run '^TestChaos$$' -v ./conformance 2>&1 | grep -E 'chaos report|^(---|ok|FAIL|PASS)|_test.go'

## bench: throughput and latency against raw JetStream in the same run
bench: build
	./bin/heed-bench

## cluster: the local 3-node JetStream cluster with every service its own
## process (deploy/cluster/local.sh; stop it with deploy/cluster/local.sh stop)
cluster: build
	deploy/cluster/local.sh start
	deploy/cluster/local.sh services

clean:
	rm -rf bin
