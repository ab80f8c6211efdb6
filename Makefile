# nmstate-ippool Makefile. Every tool is built from a pinned Go module under
# hack/ into bin/; nothing is downloaded except through the Go module proxy.

LOCALBIN ?= $(CURDIR)/bin
ENVTEST_DIR ?= $(LOCALBIN)/k8s
export KUBEBUILDER_ASSETS ?= $(ENVTEST_DIR)

# The envtest control plane: built from source, once, into bin/k8s.
KUBE_VERSION ?= v1.34.3
KUBE_VERSION_PKG := k8s.io/component-base/version
KUBE_LDFLAGS := -X $(KUBE_VERSION_PKG).gitVersion=$(KUBE_VERSION) \
	-X $(KUBE_VERSION_PKG).gitMajor=1 -X $(KUBE_VERSION_PKG).gitMinor=34 \
	-X $(KUBE_VERSION_PKG).gitTreeState=clean

# The NNCP types come from kubernetes-nmstate; its CRD is generated from them.
UPSTREAM_API := github.com/nmstate/kubernetes-nmstate/api

CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
KUSTOMIZE ?= $(LOCALBIN)/kustomize
GINKGO ?= $(LOCALBIN)/ginkgo
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
KUBECTL ?= $(LOCALBIN)/kubectl
PROMTOOL ?= $(LOCALBIN)/promtool
KREW ?= $(LOCALBIN)/krew
VALIDATE_KREW ?= $(LOCALBIN)/validate-krew-manifest
HELM ?= $(LOCALBIN)/helm
OLM ?= $(LOCALBIN)/olm

GO_TEST_FLAGS ?= -race -count=1 -timeout 30m
# A count of inputs (Nx), not a duration: Go 1.26's fuzzing coordinator
# can fail a run that found nothing with "context deadline exceeded" when
# a duration ends (golang/go#75804, fixed in Go 1.27). 200000 inputs take
# 4 to 25 s per target here.
FUZZTIME ?= 200000x

.DEFAULT_GOAL := help
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) $(KUSTOMIZE) $(OLM) ## Generate the CRDs into deploy/crd, RBAC into deploy/rbac, the Helm chart's static templates and the OLM bundle from deploy/.
	$(CONTROLLER_GEN) crd paths=./api/... paths=$(UPSTREAM_API)/v1 output:crd:artifacts:config=deploy/crd
	rm -f deploy/crd/nmstate.io_nmstates.yaml # the operator's kind, not ours
	go run ./hack/range-order deploy/crd/nmstate.io_nodeippools.yaml # start before end, too long for a marker
	go run ./hack/nncp-crd deploy/crd/nmstate.io_nodenetworkconfigurationpolicies.yaml # v1beta1, and admission rules upstream's types carry no markers for
	go run ./hack/nncp-crd deploy/crd/nmstate.io_poolednodenetworkconfigurationpolicies.yaml # the same spec rules
	$(CONTROLLER_GEN) rbac:roleName=nmstate-ippool-handler paths=./controllers/handler/... paths=./controllers/nodestate/... paths=./internal/plumbing/metricsauth/... output:rbac:artifacts:config=deploy/rbac/handler
	$(CONTROLLER_GEN) rbac:roleName=nmstate-ippool-pool-controller paths=./controllers/pool/... paths=./controllers/claim/... paths=./controllers/companion/... paths=./controllers/enactment/... paths=./controllers/policy/... paths=./internal/plumbing/metricsauth/... output:rbac:artifacts:config=deploy/rbac/pool-controller
	go run ./hack/helmchart -kustomize $(KUSTOMIZE) # the chart's templates of everything but the workloads
	$(OLM) generate -kustomize $(KUSTOMIZE) -repo . # the OLM bundle of companion mode, deploy/olm/bundle

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate the DeepCopy methods of api/.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: fmt
fmt: ## Run gofmt on the tree.
	gofmt -s -w $$(git ls-files --cached --others --exclude-standard '*.go')

.PHONY: vet
vet: ## Run go vet (and on hack/olm, a module of its own).
	go vet ./...
	cd hack/olm && go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (and on hack/olm, a module of its own).
	$(GOLANGCI_LINT) run ./...
	cd hack/olm && $(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: $(CONTROLLER_GEN) $(KUSTOMIZE) $(OLM) ## Fail if `make manifests generate` or gofmt would change a file.
	hack/verify.sh

##@ Build

# The version the binaries report (--version, the build info metric, their
# start-up log line): "devel" unless given, as make release does. The
# commit is recorded whether or not Go's own VCS stamping is on.
VERSION ?=
VERSION_PKG := github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/version
GO_LDFLAGS := -X $(VERSION_PKG).version=$(VERSION) \
	-X $(VERSION_PKG).revision=$(shell git rev-parse HEAD 2>/dev/null) \
	-X $(VERSION_PKG).modified=$(shell git diff --quiet HEAD 2>/dev/null || echo true)

.PHONY: build
build: ## Build the binaries into bin/ (VERSION=v1.2.3 names their version).
	go build -ldflags "$(GO_LDFLAGS)" -o $(LOCALBIN)/ ./cmd/...

IMG_REGISTRY ?= ghcr.io/nmstate-ippool
IMG_TAG ?= latest

.PHONY: images
images: ## Build the handler and pool-controller images (needs a Docker engine).
	docker build --target handler -t $(IMG_REGISTRY)/handler:$(IMG_TAG) .
	docker build --target pool-controller -t $(IMG_REGISTRY)/pool-controller:$(IMG_TAG) .

IMAGES_DIR ?= $(LOCALBIN)/images

PLUGIN_VERSION ?=
PLUGIN_BASE_URL ?=

.PHONY: plugin-release
plugin-release: ## Build the kubectl plugin's release archives (every platform) and its krew manifest into dist/plugin: PLUGIN_VERSION=v0.1.0 [PLUGIN_BASE_URL=where they will be downloaded from].
	@test -n "$(PLUGIN_VERSION)" || { echo "set PLUGIN_VERSION, e.g. make plugin-release PLUGIN_VERSION=v0.1.0" >&2; exit 1; }
	go run ./hack/plugin-release --version $(PLUGIN_VERSION) --out dist/plugin $(if $(PLUGIN_BASE_URL),--base-url $(PLUGIN_BASE_URL))

.PHONY: images-local
images-local: ## Build the images of the local cluster's real nodes without Docker (go-containerregistry) into bin/images, and the registry that serves them to the nodes.
	@mkdir -p $(IMAGES_DIR)/bin
	CGO_ENABLED=0 go build -trimpath -ldflags "$(GO_LDFLAGS)" -o $(IMAGES_DIR)/bin/ ./cmd/handler ./cmd/pool-controller ./cmd/nmstatectl-sim
	cd hack/images && CGO_ENABLED=0 go build -trimpath -o $(IMAGES_DIR)/bin/pause ./pause
	cd hack/images && go build -o $(IMAGES_DIR)/images .  # it also serves them to the real nodes (localcluster up --kubelets)
	$(IMAGES_DIR)/images -bin $(IMAGES_DIR)/bin -out $(IMAGES_DIR)

.PHONY: peer-handler
peer-handler: ## Build kubernetes-nmstate's handler, unmodified, from ../shared/peers (PEERS_DIR) into bin/ (skipped when absent).
	hack/peer-handler.sh $(LOCALBIN)

INSTALL ?= default
REGISTRY ?=
TAG ?=
HANDLER_BASE ?=
ARCH ?= $(shell go env GOARCH)
PUSH_IMAGES ?= handler,pool-controller

.PHONY: install-manifests
install-manifests: $(KUSTOMIZE) ## Render an install (INSTALL=default, companion, ...) to stdout; with REGISTRY and TAG, naming the images make push pushed.
	@hack/install-manifests.sh $(KUSTOMIZE) $(INSTALL) $(REGISTRY) $(TAG)

.PHONY: push
push: ## Build the handler and pool-controller images without Docker and push them to any OCI registry: REGISTRY=host/path TAG=v0.1.0 HANDLER_BASE=an image with nmstatectl [ARCH=amd64] [PUSH_IMAGES=pool-controller for companion mode].
	@test -n "$(REGISTRY)" -a -n "$(TAG)" || { echo "set REGISTRY and TAG, e.g. make push REGISTRY=registry.example.com/nmstate-ippool TAG=v0.1.0 HANDLER_BASE=..." >&2; exit 1; }
	@mkdir -p $(IMAGES_DIR)/push-$(ARCH)
	CGO_ENABLED=0 GOOS=linux GOARCH=$(ARCH) go build -trimpath -ldflags "$(GO_LDFLAGS)" -o $(IMAGES_DIR)/push-$(ARCH)/ ./cmd/handler ./cmd/pool-controller
	cd hack/images && go run . -bin $(IMAGES_DIR)/push-$(ARCH) -push $(REGISTRY) -tag $(TAG) -handler-base "$(HANDLER_BASE)" -arch $(ARCH) -images $(PUSH_IMAGES)

.PHONY: release
release: $(KUSTOMIZE) $(HELM) ## Write the release VERSION=v1.2.3 into dist/release/VERSION: the install manifests and the Helm chart naming REGISTRY's images of that tag, the CRDs, the images as tarballs (the handler's with HANDLER_BASE), the kubectl plugin, SHA256SUMS.
	@test -n "$(VERSION)" || { echo "set VERSION, e.g. make release VERSION=v0.2.0 REGISTRY=registry.example.com/nmstate-ippool HANDLER_BASE=..." >&2; exit 1; }
	hack/release.sh $(KUSTOMIZE) $(HELM) $(VERSION) $(or $(REGISTRY),$(IMG_REGISTRY)) "$(HANDLER_BASE)" $(ARCH) "$(GO_LDFLAGS)"

RELEASE_TEST_VERSION ?= v0.0.0-ci
RELEASE_TEST_REGISTRY ?= registry.example.com/nmstate-ippool

.PHONY: test-release
test-release: ## Write a release (make release) and check it: its checksums, every install's images, the CRDs, the chart, the version its binaries report.
	$(MAKE) release VERSION=$(RELEASE_TEST_VERSION) REGISTRY=$(RELEASE_TEST_REGISTRY)
	go test -count=1 ./test/release/ -args -release $(CURDIR)/dist/release/$(RELEASE_TEST_VERSION) \
		-version $(RELEASE_TEST_VERSION) -registry $(RELEASE_TEST_REGISTRY)

.PHONY: test-images
test-images: ## Test the images' builder (hack/images): a push to a registry on localhost, read back, and its refusals.
	cd hack/images && go test -count=1 ./...

##@ Demo

.PHONY: demo
demo: ## Build everything, run a 3-node local cluster, assign, scale up and down, reset, tear down; REAL=1 on real nodes (root).
	REAL=$(REAL) hack/demo.sh

.PHONY: real-nodes
real-nodes: build node-packages node-assets images-local $(KUBECTL) ## Run a local cluster of KUBELETS (2) real nodes (root) in .local-real and install deploy/local on it.
	$(LOCALBIN)/localcluster up --kubelets $(KUBELETS) --dir $(REAL_NODES_DIR)
	$(LOCALBIN)/localcluster install --dir $(REAL_NODES_DIR)

KUBELETS ?= 2
REAL_NODES_DIR ?= .local-real

.PHONY: node-packages
node-packages: ## Install what real nodes need from Debian's packages (containerd, runc, CNI plugins, iptables, conntrack), if missing.
	hack/node-packages.sh

.PHONY: node-assets
node-assets: $(ENVTEST_DIR)/kubelet $(ENVTEST_DIR)/kube-proxy $(ENVTEST_DIR)/kube-controller-manager $(ENVTEST_DIR)/kube-scheduler ## Build kubelet, kube-proxy, kube-controller-manager and kube-scheduler into bin/k8s (once).

$(ENVTEST_DIR)/kubelet $(ENVTEST_DIR)/kube-proxy $(ENVTEST_DIR)/kube-controller-manager $(ENVTEST_DIR)/kube-scheduler: hack/kube-apiserver/go.mod
	@mkdir -p $(ENVTEST_DIR)
	@echo "building $(notdir $@) $(KUBE_VERSION) from source"
	cd hack/kube-apiserver && ../progress.sh "building $(notdir $@)" go build -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/$(notdir $@)

##@ Test

.PHONY: test
test: envtest-assets $(KUSTOMIZE) $(HELM) $(OLM) peer-handler ## Run unit tests, fuzz seeds, envtest suites, e2e, the suite beside kubernetes-nmstate's handler (when ../shared/peers is there; its cluster runs Kubernetes' garbage collector) and a short chaos run against a real API server (with -race).
	go test $(GO_TEST_FLAGS) ./...
	cd hack/olm && go test -count=1 ./...

.PHONY: test-alerts
test-alerts: $(PROMTOOL) ## Check the alerting rules (deploy/alerts) with promtool and run their unit tests.
	$(PROMTOOL) check rules deploy/alerts/rules.yaml
	cd deploy/alerts && $(PROMTOOL) test rules rules_test.yaml

.PHONY: test-krew
test-krew: $(KREW) $(VALIDATE_KREW) ## Validate the plugin's krew manifest with krew's own validation, and install a release built for this machine and windows/amd64 with krew.
	KREW_E2E=1 go test -count=1 -v ./hack/plugin-release/

.PHONY: test-e2e
test-e2e: envtest-assets ## Run the end-to-end workflows on a local cluster of real processes (part of make test too).
	go test -count=1 -timeout 20m ./test/e2e/ -args -ginkgo.v

# kustomize (deploy/testdata/infra-net with kubectl apply -k) or helm (the
# chart, deploy/helm/nmstate-ippool).
REAL_NODES_INSTALL ?= kustomize

.PHONY: test-real-nodes
test-real-nodes: build node-packages node-assets images-local $(KUBECTL) $(HELM) ## Run the e2e suite of the install on real nodes: kubelets, containerd, the DaemonSet and Deployment (root); REAL_NODES_INSTALL=helm installs the Helm chart, REAL_NODES_INSTALL=upgrade an earlier version, then upgrades and downgrades it.
	REAL_NODES_E2E=1 REAL_NODES_INSTALL=$(REAL_NODES_INSTALL) go test -count=1 -timeout 30m ./test/realnodes/ -args -ginkgo.v

CHAOS_DURATION ?= 10m
CHAOS_NODES ?= 20
CHAOS_COMPANION_NODES ?= 8
CHAOS_SEED ?= 0

.PHONY: chaos
chaos: envtest-assets peer-handler ## Run the chaos suites: our handler on CHAOS_NODES (20) nodes, then companion mode beside kubernetes-nmstate's handler on CHAOS_COMPANION_NODES (8), seeded faults for CHAOS_DURATION (10m) each; see docs/reliability.md.
	go test -count=1 -timeout 90m -v -run TestChaos ./test/chaos/ \
		-args -chaos.duration $(CHAOS_DURATION) -chaos.nodes $(CHAOS_NODES) -chaos.companion-nodes $(CHAOS_COMPANION_NODES) -chaos.seed $(CHAOS_SEED)

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 200000x: that many inputs; a duration such as 10s works too).
	@for target in $$(go test -list '^Fuzz' ./pkg/ippool/ | grep '^Fuzz'); do \
		echo "fuzzing $$target for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) ./pkg/ippool/; \
	done

.PHONY: bench
bench: ## Run the allocator benchmarks (see docs/benchmarks.md).
	go test -run '^$$' -bench . -benchmem ./pkg/ippool/

SCALE_NODES ?= 100,300,1000

.PHONY: bench-scale
bench-scale: envtest-assets ## Run the scale benchmark for SCALE_NODES (100,300,1000) nodes; see docs/benchmarks.md.
	go test -count=1 -timeout 180m -run '^$$' -bench Scale -benchtime 1x ./test/scale/ -args -scale.nodes $(SCALE_NODES)

CLAIMS ?= 1000
CLAIM_NODES ?= 0

.PHONY: bench-claims
bench-claims: envtest-assets ## Serve CLAIMS (1000) Cluster API IPAddressClaims from one NodeIPPool, on a cluster of CLAIM_NODES (0) Nodes with network states: pool writes and time per claim; see docs/benchmarks.md.
	go test -count=1 -timeout 60m -run '^$$' -bench Claims -benchtime 1x ./controllers/claim/ -args -claims.n $(CLAIMS) -claims.nodes $(CLAIM_NODES)

PEER_NODES ?= 25,100
PEER_RUNS ?= 3

.PHONY: bench-peer
bench-peer: envtest-assets peer-handler ## Roll the same policies out with kubernetes-nmstate's handler, ours, and companion mode (per-node policies) on local clusters of PEER_NODES (25,100) nodes; see docs/benchmarks.md.
	go test -count=1 -timeout 180m -run '^$$' -bench Peer -benchtime 1x ./test/peerbench/ \
		-args -peer.nodes $(PEER_NODES) -peer.runs $(PEER_RUNS)

.PHONY: envtest-assets
envtest-assets: $(ENVTEST_DIR)/kube-apiserver $(ENVTEST_DIR)/etcd $(ENVTEST_DIR)/etcdctl $(ENVTEST_DIR)/kube-controller-manager ## Build kube-apiserver, etcd (with etcdctl and etcdutl, for the local cluster's snapshots) and kube-controller-manager (the local cluster's garbage collector and node lifecycle) into bin/k8s (once).

$(ENVTEST_DIR)/kube-apiserver: hack/kube-apiserver/go.mod
	@mkdir -p $(ENVTEST_DIR)
	@echo "building kube-apiserver $(KUBE_VERSION) from source (first time: about 5 minutes)"
	cd hack/kube-apiserver && ../progress.sh "building kube-apiserver" go build -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-apiserver

$(ENVTEST_DIR)/etcd: hack/etcd/go.mod hack/etcd/main.go
	@mkdir -p $(ENVTEST_DIR)
	@echo "building etcd from source"
	cd hack/etcd && ../progress.sh "building etcd" go build -o $@ .

$(ENVTEST_DIR)/etcdctl: hack/etcd/go.mod hack/etcd/tools.go
	@mkdir -p $(ENVTEST_DIR)
	cd hack/etcd && ../progress.sh "building etcdctl and etcdutl" go build -o $(ENVTEST_DIR)/ go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3

##@ Tools

.PHONY: kubectl
kubectl: $(KUBECTL) ## Build kubectl (the API server's version) into bin/ from the same pinned module.

$(KUBECTL): hack/kube-apiserver/go.mod
	@mkdir -p $(LOCALBIN)
	@echo "building kubectl $(KUBE_VERSION) from source (first time: a minute or two)"
	cd hack/kube-apiserver && ../progress.sh "building kubectl" go build -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kubectl

$(CONTROLLER_GEN): hack/tools/go.mod
	cd hack/tools && go build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(KUSTOMIZE): hack/tools/go.mod
	@cd hack/tools && go build -o $@ sigs.k8s.io/kustomize/kustomize/v5

$(GINKGO): hack/tools/go.mod
	cd hack/tools && go build -o $@ github.com/onsi/ginkgo/v2/ginkgo

# Without the service discoveries (remove_all_sd): rule checks need none,
# and they are most of Prometheus's build.
$(PROMTOOL): hack/promtool/go.mod
	cd hack/promtool && go build -tags remove_all_sd -o $@ github.com/prometheus/prometheus/cmd/promtool

# Helm's version, and the Kubernetes version it renders for without a
# cluster (helm template, lint): that of the client it is built with, as
# Helm's own Makefile sets them.
$(HELM): hack/helm/go.mod
	cd hack/helm && kube_minor=$$(go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2) && \
	../progress.sh "building helm" go build -o $@ -ldflags "-X helm.sh/helm/v3/internal/version.version=$$(go list -m -f '{{.Version}}' helm.sh/helm/v3) \
		-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$$kube_minor -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$$kube_minor" \
		helm.sh/helm/v3/cmd/helm

$(KREW) $(VALIDATE_KREW): hack/krew/go.mod
	cd hack/krew && go build -o $@ sigs.k8s.io/krew/cmd/$(notdir $@)

# hack/olm: the OLM bundle's generator and operator-framework's validation
# of it, in a module of its own (operator-framework/api's dependencies).
$(OLM): hack/olm/go.mod $(wildcard hack/olm/*.go)
	cd hack/olm && ../progress.sh "building hack/olm" go build -o $@ .

$(GOLANGCI_LINT): hack/golangci-lint/go.mod
	cd hack/golangci-lint && go build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: tools
tools: $(CONTROLLER_GEN) $(KUSTOMIZE) $(GINKGO) $(GOLANGCI_LINT) $(PROMTOOL) $(KREW) $(VALIDATE_KREW) $(HELM) $(OLM) ## Build every tool into bin/.
