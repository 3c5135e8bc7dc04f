# kite: the two commands a fresh machine needs are `make demo` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: all build image cluster-build cluster-up cluster-down tools lint unit-test test demo fmt clean bench bench-operator chaos upstream-compat test-compat

all: build

build:
	$(CARGO) build --locked

## The kite image, tagged with Cargo.toml's version (what config/manager runs), with
## whichever of docker, podman or buildah this machine has. Releases are built by
## .github/workflows/release.yml.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
IMAGE ?= ghcr.io/kite-dev/kite:$(VERSION)
image:
	@if command -v docker >/dev/null && docker info >/dev/null 2>&1; then \
	  docker build -t $(IMAGE) .; \
	elif command -v podman >/dev/null; then \
	  podman build -t $(IMAGE) .; \
	elif command -v buildah >/dev/null; then \
	  buildah bud -t $(IMAGE) .; \
	elif command -v docker >/dev/null; then \
	  echo "make image: docker is installed but its daemon does not answer (docker info), and neither podman nor buildah is installed" >&2; exit 1; \
	else \
	  echo "make image: no container engine: install docker, podman or buildah (or let .github/workflows/release.yml build it)" >&2; exit 1; \
	fi

## The local control plane (see tests/cluster/).
cluster-build:
	tests/cluster/build.sh >/dev/null

cluster-up:
	tests/cluster/up.sh

cluster-down:
	tests/cluster/down.sh

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

unit-test:
	$(CARGO) test --locked --lib --bins

## The Go tools the tests check config/ and the release workflow with (cached).
tools:
	tests/tools/build.sh promtool >/dev/null
	tests/tools/build.sh actionlint >/dev/null

## Everything: builds the control plane and tools if not cached, starts the control
## plane if not running, builds kite, checks formatting and lints, and runs unit and
## integration tests.
test: cluster-up tools build lint
	$(CARGO) test --locked --lib --bins --tests
	target/debug/kite test examples/

## The oldest supported Kubernetes minor (see the README's "Supported Kubernetes
## versions"); `make test` runs against the newest.
KUBE_OLDEST := 1.34
COMPAT_CLUSTER := KUBE_VERSION=$(KUBE_OLDEST) KITE_CLUSTER_DIR=$(CURDIR)/.cluster-compat KITE_CLUSTER_PORT_BASE=37000

## The integration suite (TESTS= filters it) against a cluster of the oldest supported
## minor, of its own (.cluster-compat, ports from 37000, beside the default one),
## stopped afterwards whatever the result. Not part of `make test`.
test-compat: tools build
	$(COMPAT_CLUSTER) tests/cluster/up.sh
	rc=0; \
	$(COMPAT_CLUSTER) $(CARGO) test --locked --test it -- $(TESTS) || rc=$$?; \
	$(COMPAT_CLUSTER) tests/cluster/down.sh; \
	exit $$rc

## Upstream Starkite's own tests/*_test.star under kite, from a checkout you give
## (nothing is fetched): a table per file, checked against the README's.
upstream-compat: build
	@test -n "$(UPSTREAM)" || { echo "usage: make upstream-compat UPSTREAM=/path/to/starkite [WRITE=1]"; exit 2; }
	python3 tests/upstream/compat.py --upstream "$(UPSTREAM)" --kite target/debug/kite $(if $(WRITE),--write)

## The seed's walkthrough: the max-replicas controller correcting a drifted deployment.
demo: cluster-up build
	examples/demo.sh

## Kite against a native kube-rs controller and the API server's limit (not part of
## `make test`; two rounds in ABBA order by default, about 16 minutes; KITE_BENCH_ROUNDS=1
## for one round in about 9). Targets are checked against the median of the rounds' ratios.
## The table is printed and kept in target/bench/, with the controllers' logs.
bench: cluster-up
	$(CARGO) build --release --locked
	$(CARGO) bench --locked --bench controllers

## One kite operator hosting 100, 500 and 1000 StarlarkControllers across 50 namespaces
## (plus 20 ClusterStarlarkControllers on Pods), then three sharded replicas (not part
## of `make test`; about 8 minutes, KITE_BENCH_SIZES=100,500 for less). The table is
## printed and kept in target/bench/operator.md, with the operators' logs.
## It installs the StarlarkController CRDs first (a fresh cluster has none).
bench-operator: cluster-up
	$(CARGO) build --release --locked
	KUBECONFIG=$${KITE_CLUSTER_DIR:-$(CURDIR)/.cluster}/kubeconfig kubectl apply --server-side -f crds/starlarkcontroller.yaml
	KUBECONFIG=$${KITE_CLUSTER_DIR:-$(CURDIR)/.cluster}/kubeconfig kubectl wait --for condition=established --timeout=60s -f crds/starlarkcontroller.yaml
	$(CARGO) bench --locked --bench operator

## Faults injected into the local cluster (a TCP fault proxy, SIGSTOP of kite): every
## fault test, the slow ones included (about 20 minutes); `make test` runs the fast ones.
chaos: cluster-up
	$(CARGO) test --locked --test it -- --include-ignored --nocapture chaos::
	$(CARGO) test --locked --test it -- --include-ignored --nocapture --test-threads=1 chaos_etcd::
	$(CARGO) test --locked --test apiserver -- --include-ignored --nocapture --test-threads=1 stall::
	$(CARGO) test --locked --test it -- --nocapture paused sigterm_with failed_on_delete
	$(CARGO) test --locked --test it -- --nocapture namespaced_children

fmt:
	$(CARGO) fmt

clean: cluster-down
	$(CARGO) clean
