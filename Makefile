# Obscura — build, generate, test.
#
#   make test      the test command (README, .ci/run): tools + generate check + vet + promtool rule tests + all tests
#   make rules-test  promtool check + unit tests of the alerting rules (charts/obscura/rules)
#   make chart-lint  kube-score on the chart's default render, allow-list with reasons (hack/chart-lint)
#   make tools     install pinned tools into ./bin (hack/tools.sh)
#   make generate  deepcopy, CRDs (crds/) and RBAC (config/rbac) with controller-gen; the user API's
#                  protobuf/gRPC code (services/proto) with buf, protoc-gen-go and protoc-gen-go-grpc
#   make lint      go vet + gofmt + staticcheck
#   make build     build every module's binaries

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

ROOT := $(shell pwd)
BIN := $(ROOT)/bin
MODULES := operators services e2e
PKGS := $(addprefix ./,$(addsuffix /...,$(MODULES)))
CONTROLLER_GEN := $(BIN)/controller-gen
BUF := $(BIN)/buf
# Generated code that generate-check compares against the committed files.
GENERATED := operators/api crds config/rbac charts/obscura/crds charts/obscura/files services/proto
# Tests find kube-apiserver/etcd (envtest), redis-server and envoy here.
export KUBEBUILDER_ASSETS := $(BIN)
export OBSCURA_BIN := $(BIN)
# The whole suite must fit CI's budget on a 2-core machine; a hung test fails instead of stalling.
GO_TEST_FLAGS ?= -count=1 -timeout 20m

.PHONY: help
help: ## show the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: tools
tools: ## install pinned tools into ./bin (kube-apiserver, etcd, nats-server, helm, controller-gen, kustomize, buf, protoc-gen-go(-grpc), staticcheck, promtool, vault, redis-server, envoy)
	@hack/tools.sh

.PHONY: generate
generate: ## regenerate deepcopy, CRDs, RBAC and the user API's protobuf code
	@hack/tools.sh controller-gen buf protoc-gen-go protoc-gen-go-grpc
	cd operators && $(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	cd operators && $(CONTROLLER_GEN) crd rbac:roleName=manager-role paths=./... \
		output:crd:artifacts:config=$(ROOT)/crds output:rbac:artifacts:config=$(ROOT)/config/rbac
	@hack/crds-kustomization.sh
	@# The chart installs the same CRDs and RBAC rules: copies, checked by generate-check.
	@mkdir -p charts/obscura/crds charts/obscura/files
	@rm -f charts/obscura/crds/*.yaml && cp crds/*.obscura.dev_*.yaml charts/obscura/crds/
	@cp config/rbac/role.yaml charts/obscura/files/manager-role.yaml
	@# User API: buf compiles services/proto with the pinned local plugins from ./bin (no network).
	cd services/proto && rm -f obscura/*/v1/*.pb.go && export PATH="$(BIN):$$PATH" && \
		$(BUF) lint && $(BUF) generate

.PHONY: generate-check
generate-check: generate ## fail if regenerating changes a committed file
	@if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
		echo "generated files are out of date; run 'make generate' and commit:"; \
		git status --porcelain -- $(GENERATED); git --no-pager diff --stat -- $(GENERATED); exit 1; fi
	@echo "generated files are up to date"

.PHONY: lint
lint: ## go vet, gofmt and staticcheck (pinned in hack/tools/staticcheck)
	go vet $(PKGS)
	@out=$$(gofmt -l operators services e2e); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@hack/tools.sh staticcheck
	$(BIN)/staticcheck $(PKGS)

.PHONY: build
build: ## build every binary
	go build $(PKGS)

.PHONY: rules-test
rules-test: ## check and unit-test the alerting rules with promtool (charts/obscura/rules, monitoring/tests)
	@hack/tools.sh promtool
	$(BIN)/promtool check rules charts/obscura/rules/*.yaml
	$(BIN)/promtool test rules monitoring/tests/*.test.yaml

.PHONY: chart-lint
chart-lint: ## kube-score on the chart's default render; every finding fixed or allowed with a reason (hack/chart-lint)
	@hack/tools.sh helm kube-score
	hack/chart-lint/run.sh

.PHONY: test
test: tools generate-check lint rules-test chart-lint ## the full test suite (what .ci/run runs)
	go test $(GO_TEST_FLAGS) $(PKGS)

.PHONY: test-short
test-short: ## unit tests only, no tool bootstrap
	go test -short $(GO_TEST_FLAGS) $(PKGS)

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME (default 30s) each
	@hack/fuzz.sh $${FUZZTIME:-30s}

.PHONY: clean
clean: ## remove built tools and caches of this checkout
	rm -rf $(BIN)

.PHONY: demo
demo: ## run the embedded demo (obscura demo): one process, embedded NATS, every system's roles, live rounds and an aggregation, summary (DEMO_FLAGS to tune)
	cd services && go run ./cmd/obscura demo $(DEMO_FLAGS)

.PHONY: cluster-up
cluster-up: ## start a real single-node Kubernetes cluster on 127.0.0.1 (root; docs/cluster.md; NODES=3: worker nodes in network namespaces, pod network, NetworkPolicies)
	@NODES=$(NODES) hack/cluster/cluster.sh up

.PHONY: cluster-down
cluster-down: ## stop the local cluster and remove every trace of it (CLUSTER_PURGE=1 also deletes hack/cluster/state)
	@hack/cluster/cluster.sh down $(if $(filter 1,$(CLUSTER_PURGE)),--purge)

.PHONY: cluster-status
cluster-status: ## health of the local cluster's components, its node and pods
	@hack/cluster/cluster.sh status

.PHONY: e2e-cluster
e2e-cluster: ## cluster e2e: cluster up, images, helm install, samples, load ×1/×4/×8/×1 with capacity classes and autoscaling asserted, upgrade, uninstall, cluster down (E2E_CLUSTER_MODE=smoke for the short one; NODES=3: the NetworkPolicy matrix on the multi-node cluster)
	@if [ "$(or $(NODES),1)" -ge 2 ]; then NODES=$(NODES) hack/cluster/e2e-nodes.sh; else hack/e2e-cluster.sh; fi

.PHONY: images
images: ## build every container image offline, reproducibly, into hack/images/out (docs/images.md; IMAGES_FLAGS, e.g. -force)
	@hack/images/images.sh build $(IMAGES_FLAGS)

.PHONY: images-import
images-import: ## import the built images into the running local cluster's containerd (fails if it is down)
	@hack/images/images.sh import
