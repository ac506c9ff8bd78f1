# Sluice. The two commands a newcomer needs: `make demo` and `make test`.
GO       ?= go
BIN      ?= bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
DEMO_ARGS ?=
CONFIG   ?= examples/sluice.yaml
STATICCHECK_VERSION ?= v0.8.2

.PHONY: all build test test-short check fmt vet staticcheck tidy-check fuzz run demo bench bench-go clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sluice ./cmd/sluice
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sluice-bench ./cmd/sluice-bench

## test: every package, race detector on, no cache.
test:
	$(GO) test -race -count=1 ./...

test-short:
	$(GO) test -race -count=1 -short ./...

## check: formatting, vet, staticcheck, tests, go.mod tidiness and a short fuzz run.
check: fmt vet staticcheck test tidy-check fuzz

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

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
	$(GO) test -run NONE -fuzz FuzzParse -fuzztime 10s -fuzzminimizetime 3s ./config/

## run: the proxy with the example config.
run: build
	$(BIN)/sluice serve -config $(CONFIG)

## demo: a simulated provider behind Sluice under load, about a minute.
demo:
	$(GO) run ./cmd/sluice-bench demo $(DEMO_ARGS)

## bench-go: micro-benchmarks (admission, parsers, handler).
bench-go:
	$(GO) test -run NONE -bench . -benchmem ./adaptive/ ./feedback/ ./proxy/

## bench: the scenario suite (about 8 minutes) and overhead runs (about 2
## minutes); writes docs/bench/. nginx is compared when it is installed.
bench: build
	$(BIN)/sluice-bench scenarios -out docs/bench
	$(BIN)/sluice-bench overhead -nginx auto -out docs/bench

clean:
	rm -rf $(BIN)
