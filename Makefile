# Sluice. The two commands a newcomer needs: `make demo` and `make test`.
GO       ?= go
BIN      ?= bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The build date `sluice version` prints is the commit's time (or
# SOURCE_DATE_EPOCH when set), not the time of the build: the same source
# and toolchain give the same binary, and the same image digest.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
BUILD_DATE := $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS  := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(BUILD_DATE)
DEMO_ARGS ?=
CONFIG   ?= examples/sluice.yaml
STATICCHECK_VERSION ?= v0.8.2
VULNCHECK_VERSION ?= v1.9.0
# The steps of `make check`, in order: cheap checks first.
CHECKS   := fmt vet staticcheck test test-process tidy-check fuzz vulncheck
# The Go toolchain of every target. The machines' Go 1.26.8 has standard
# library vulnerabilities that Sluice's code reaches (make vulncheck), fixed
# in 1.26.9 and 1.26.10; go1.27.3 is the newer toolchain the module proxy
# serves, and the go command fetches it on first use. GOTOOLCHAIN=local
# make ... uses the machine's Go instead.
GOTOOLCHAIN ?= go1.27.3
export GOTOOLCHAIN

.PHONY: all build test test-process measure test-short worlds check fmt vet staticcheck tidy-check fuzz vulncheck run demo bench bench-go clean redis-server proxies cluster-demo engine engine-install

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sluice ./cmd/sluice
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sluice-bench ./cmd/sluice-bench

## test: the unit tier, the README's test command: every package with the
## race detector on, leaving out the process-level tests (make
## test-process) and the single-goroutine simulations; then adaptive's
## packages again without the race detector, where the simulations and the
## randomized worlds (300 seeds) run, in parallel. No binary, no
## redis-server.
test:
	SLUICE_TEST_TIER=unit $(GO) test -race -count=1 ./...
	SLUICE_TEST_TIER=unit $(GO) test -count=1 ./adaptive/...

## test-process: the process-level tier: the tests that start bin/sluice,
## bin/sluice-bench or redis-server, or run scenarios on real sockets for
## seconds (they call testutil.Process, which is how PROCESS_PKGS finds them), race
## detector on. The binaries are built once and shared through SLUICE_BIN
## and SLUICE_BENCH_BIN; the packages' unit tests run again beside them.
PROCESS_PKGS = $(sort $(patsubst %/,./%/,$(dir $(shell grep -rlF --include='*_test.go' 'testutil.Process' cmd proxy adaptive bench config feedback))))
test-process: build redis-server
	SLUICE_TEST_TIER=process SLUICE_BIN='$(CURDIR)/$(BIN)/sluice' SLUICE_BENCH_BIN='$(CURDIR)/$(BIN)/sluice-bench' \
		$(GO) test -race -count=1 $(PROCESS_PKGS)

## measure: the tests that measure rather than assert (testutil.Measurement),
## with their numbers logged, for BENCHMARKS.md.
measure:
	SLUICE_MEASURE=1 $(GO) test -count=1 -v -run 'TestSlowReaderCost$$' ./proxy/

## worlds: a survey of WORLDS randomized worlds (default 2000); the worlds
## that break an invariant are listed, not failed (make test fails on them).
WORLDS ?= 2000
worlds:
	SLUICE_WORLDS=$(WORLDS) SLUICE_WORLDS_REPORT=1 $(GO) test -count=1 -timeout 30m -run 'TestRandomWorlds$$' -v ./adaptive/ | grep -v '^=== '

test-short: redis-server
	$(GO) test -race -count=1 -short ./...

## redis-server: the cluster tests start a real redis-server on loopback;
## install Debian's package when it is missing, or fail saying so.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server not found: installing Debian's redis-server package"; \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) || { echo "apt-get install redis-server failed" >&2; exit 1; }; \
		else \
			echo "cannot install it here (needs apt-get as root): install redis-server (Redis 7) and run make test again" >&2; exit 1; \
		fi; }
	@redis-server --version

## proxies: the overhead run compares Sluice with nginx and HAProxy;
## install Debian's packages when they are missing, or fail saying so.
proxies:
	@missing=""; for p in nginx haproxy; do command -v $$p >/dev/null 2>&1 || [ -x /usr/sbin/$$p ] || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "not found:$$missing: installing Debian's packages"; \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) || { echo "apt-get install$$missing failed" >&2; exit 1; }; \
		else \
			echo "cannot install them here (needs apt-get as root): install$$missing and run make bench again" >&2; exit 1; \
		fi; \
	fi

## check: formatting, vet, staticcheck, both tiers of tests, go.mod
## tidiness, a short fuzz run and govulncheck, one after the other, each step timed. It
## stops at the first step that fails and exits non-zero.
check:
	@start=$$(date +%s); for step in $(CHECKS); do \
		t=$$(date +%s); echo "=== check: $$step"; \
		$(MAKE) --no-print-directory $$step || { rc=$$?; echo "=== check: $$step FAILED (exit $$rc) after $$(( $$(date +%s) - t ))s"; exit $$rc; }; \
		echo "=== check: $$step passed in $$(( $$(date +%s) - t ))s"; \
	done; echo "=== check: all passed ($(CHECKS)) in $$(( $$(date +%s) - start ))s"

# gofmt from the toolchain that runs $(GO), so both agree on the format.
fmt:
	@out=$$("$$($(GO) env GOROOT)/bin/gofmt" -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

tidy-check:
	$(GO) mod tidy -diff

fuzz:
	$(GO) test -run NONE -fuzz FuzzSSE -fuzztime 15s -fuzzminimizetime 3s ./feedback/
	$(GO) test -run NONE -fuzz FuzzInspectRequest -fuzztime 10s -fuzzminimizetime 3s ./feedback/
	$(GO) test -run NONE -fuzz FuzzClassifyError -fuzztime 5s -fuzzminimizetime 3s ./feedback/
	$(GO) test -run NONE -fuzz FuzzRateLimitHeader -fuzztime 5s -fuzzminimizetime 3s ./feedback/
	$(GO) test -run NONE -fuzz FuzzParse -fuzztime 10s -fuzzminimizetime 3s ./config/
	$(GO) test -run NONE -fuzz FuzzUnambiguousPath -fuzztime 5s -fuzzminimizetime 3s ./proxy/
	$(GO) test -run NONE -fuzz FuzzChunkedBody -fuzztime 5s -fuzzminimizetime 3s ./proxy/

## vulncheck: govulncheck on every package; see .ci/vulncheck for where its
## database comes from when the public one cannot be reached.
vulncheck:
	GO='$(GO)' VULNCHECK_VERSION=$(VULNCHECK_VERSION) .ci/vulncheck

## run: the proxy with the example config.
run: build
	$(BIN)/sluice serve -config $(CONFIG)

## demo: a simulated provider behind Sluice under load, about a minute.
demo:
	$(GO) run ./cmd/sluice-bench demo $(DEMO_ARGS)

## cluster-demo: Redis, three Sluice replicas sharing one ceiling and a
## simulated provider; kills a replica mid-load (about 40 s). Other
## scenarios: make cluster-demo CLUSTER_ARGS='-scenario shared' (or
## freeze, redis-down, rate).
CLUSTER_ARGS ?=
cluster-demo: build redis-server
	$(BIN)/sluice-bench cluster -sluice $(BIN)/sluice $(CLUSTER_ARGS)

## engine: a real inference engine on this machine (bench/engine):
## llama.cpp through node-llama-cpp (npm, into $(ENGINE_DIR)) serving a
## model with SmolLM2-135M's shapes and seeded random weights, written by
## sluice-bench gguf; characterized from 1 to 64 users, then direct, fixed
## at its slots, aimd and gradient2 in front of it, two rounds (about 25
## minutes; ENGINE_USERS, ENGINE_ROUNDS and the like in engine.sh shorten it).
## Results and a Markdown report in $(ENGINE_DIR)/results. Skipped, saying
## why, without node, npm or the npm registry. engine-install only installs.
ENGINE_DIR ?= $(BIN)/engine
engine-install: build
	bench/engine/engine.sh install $(ENGINE_DIR) $(BIN)
engine: build
	bench/engine/engine.sh suite $(ENGINE_DIR) $(BIN)

## bench-go: micro-benchmarks (admission, parsers, handler).
bench-go:
	$(GO) test -run NONE -bench . -benchmem ./adaptive/ ./feedback/ ./proxy/

## bench: the randomized worlds' survey (make worlds), the measurements
## (make measure), the scenario suite (about 13 minutes) and overhead runs
## (about 4 minutes a round, 3 rounds) beside nginx and HAProxy; writes
## docs/bench/.
bench: build proxies worlds measure
	$(BIN)/sluice-bench scenarios -out docs/bench
	$(BIN)/sluice-bench overhead -nginx auto -haproxy auto -rounds 3 -out docs/bench

clean:
	rm -rf $(BIN)

# ---- Deploying: container image, Helm chart, alert rules (docs/deploy.md).
# The tools live in their own Go module, deploy/tools, so that Helm's and
# go-containerregistry's dependencies stay out of the proxy's module (its
# dependency graph and govulncheck). Each step below is one step of
# `make check`.
TOOLS       := deploy/tools
IMAGE_ARCH  ?= $(shell $(GO) env GOARCH)
IMAGE_VERSION ?= $(VERSION)
IMAGE_BIN_DIR ?= $(BIN)/image
IMAGE_OUT   ?= $(BIN)/sluice-image.tar
STATIC_DIR  := $(BIN)/static
CHECKS      += tools-lint rules-check image-check chart-check prometheus-check
CHART       := deploy/helm/sluice
CHART_ARGS  ?= --set replicaCount=3
# The build the image ships: static (CGO_ENABLED=0), -trimpath, and the
# build information from LDFLAGS rather than from git, so that the binary
# depends on the source and the toolchain only.
STATIC_BUILD = CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)'

.PHONY: static image image-check tools-lint prometheus rules-check chart-check chart-files chart-template prometheus-check

## static: bin/static/sluice and sluice-bench, built as the image's binary
## is, for this machine. The deploy checks run these: they test the build
## that ships, and share its compiled packages with `make image` (one
## compilation of the product for the four steps instead of two).
static:
	$(STATIC_BUILD) -o $(STATIC_DIR)/sluice ./cmd/sluice
	$(STATIC_BUILD) -o $(STATIC_DIR)/sluice-bench ./cmd/sluice-bench

## image: the container image as an OCI tarball (also a `docker save`
## archive), built without a Docker daemon or a base image: a static
## binary, user 65532, CA certificates, deploy/image/sluice.yaml at
## /etc/sluice/sluice.yaml. Same commit, same digest.
image:
	GOOS=linux GOARCH=$(IMAGE_ARCH) $(STATIC_BUILD) -o $(IMAGE_BIN_DIR)/sluice ./cmd/sluice
	cd $(TOOLS) && $(GO) run ./cmd/sluice-image -binary '$(CURDIR)/$(IMAGE_BIN_DIR)/sluice' \
		-config '$(CURDIR)/deploy/image/sluice.yaml' -version '$(IMAGE_VERSION)' -revision '$(COMMIT)' \
		-created '$(SOURCE_DATE_EPOCH)' -arch '$(IMAGE_ARCH)' -out '$(CURDIR)/$(IMAGE_OUT)'

## image-check: builds the image twice (the binary compiled into two
## directories, the image assembled by two processes), then the test
## compares the digests and opens the image: config, labels, files, and
## the binary it holds run (version, validate, serve as user 65532).
image-check:
	@$(MAKE) --no-print-directory image IMAGE_BIN_DIR=$(BIN)/image-a IMAGE_OUT=$(BIN)/image-a.tar
	@$(MAKE) --no-print-directory image IMAGE_BIN_DIR=$(BIN)/image-b IMAGE_OUT=$(BIN)/image-b.tar
	cd $(TOOLS) && SLUICE_IMAGE='$(CURDIR)/$(BIN)/image-a.tar' SLUICE_IMAGE_AGAIN='$(CURDIR)/$(BIN)/image-b.tar' \
		$(GO) test -count=1 -v ./image/

## tools-lint: gofmt is in `make fmt`; vet, staticcheck and go.mod
## tidiness for the deploy/tools module.
tools-lint:
	cd $(TOOLS) && $(GO) vet ./...
	cd $(TOOLS) && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd $(TOOLS) && $(GO) mod tidy -diff

## prometheus: the rule tests and the dashboard test run Debian's
## prometheus and promtool; install the package when they are missing, or
## fail saying so.
prometheus:
	@{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || { \
		echo "prometheus or promtool not found: installing Debian's prometheus package"; \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus) || { echo "apt-get install prometheus failed" >&2; exit 1; }; \
		else \
			echo "cannot install it here (needs apt-get as root): install prometheus and promtool (2.x) and run make again" >&2; exit 1; \
		fi; }
	@prometheus --version 2>&1 | head -1

## rules-check: promtool checks the alerting and recording rules and runs
## their unit tests.
rules-check: prometheus
	promtool check rules deploy/prometheus/sluice-rules.yaml
	promtool test rules deploy/prometheus/sluice-rules_test.yaml

## chart-files: the chart ships a copy of the rules for its PrometheusRule
## (Helm reads no file outside the chart); chart-check fails when it differs.
chart-files:
	cp deploy/prometheus/sluice-rules.yaml $(CHART)/files/sluice-rules.yaml

## chart-check: helm lint and helm template (Helm's Go packages, pinned in
## deploy/tools/go.mod) of the chart, and a test of the rendered objects:
## replicas, probes, env, volumes, PDB, monitors, Redis bundled, external
## or none, and every rendered config passes `sluice validate`.
chart-check: static
	cd $(TOOLS) && SLUICE_BIN='$(CURDIR)/$(STATIC_DIR)/sluice' $(GO) test -count=1 ./chart/

## chart-template: print the manifests the chart renders, like `helm
## template` (CHART_ARGS: -f FILE, --set K=V, -summary).
chart-template:
	@cd $(TOOLS) && $(GO) run ./cmd/sluice-chart template -chart '$(CURDIR)/$(CHART)' $(CHART_ARGS)

## prometheus-check: a real Prometheus (Debian's) scrapes three Sluice
## replicas (a Redis fleet, TLS, a degraded one) under load and evaluates
## the rules; every rule and dashboard expression must return data. About
## a minute. SLUICE_SKIP_PROMETHEUS=1 skips it locally; CI never sets it.
prometheus-check: static prometheus redis-server
	cd $(TOOLS) && SLUICE_BIN='$(CURDIR)/$(STATIC_DIR)/sluice' SLUICE_BENCH_BIN='$(CURDIR)/$(STATIC_DIR)/sluice-bench' \
		$(GO) test -count=1 -v -timeout 5m ./prometheus/
