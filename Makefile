# molt — make help lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT     := $(abspath .)
BIN      := $(ROOT)/bin
SERVICES := selector patcher hookrunner podcycler statusagg
GO       ?= go
# Tools modules are built outside the workspace, each with its own pins.
TOOLGO   := GOWORK=off $(GO)

KUBE_BINS := $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kubectl
TOOL_BINS := $(BIN)/etcd $(KUBE_BINS) $(BIN)/kwok $(BIN)/nats $(BIN)/nats-server
MOLT_BINS := $(addprefix $(BIN)/,$(SERVICES)) $(BIN)/molt-local $(BIN)/molt-devnode $(BIN)/molt-bench

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_\/%-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Run it
.PHONY: up down status
up: tools build ## start the local stack in the background (control plane, NATS, the five services)
	@$(BIN)/molt-local up

down: ## stop exactly what `make up` started
	@if [ -x $(BIN)/molt-local ]; then $(BIN)/molt-local down; else echo "nothing to stop (bin/molt-local is missing)"; fi

status: ## say what the local stack runs
	@if [ -x $(BIN)/molt-local ]; then $(BIN)/molt-local status; else echo "not running (bin/molt-local is missing)"; fi

##@ Build
.PHONY: tools build
tools: $(TOOL_BINS) ## build the control plane, kwok and the nats CLI from pinned modules (skips what is built)

build: ## build molt's services, the kubectl molt plugin and local-stack commands into bin/ (Go's cache skips unchanged work)
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(foreach s,$(SERVICES),molt.dev/services/$(s)) molt.dev/dev/cmd/molt-local molt.dev/dev/cmd/molt-devnode molt.dev/dev/cmd/molt-devruntime molt.dev/dev/cmd/molt-bench molt.dev/kubectl-molt

# kubectl finds a plugin as an executable named kubectl-<name> on PATH.
PLUGIN_DIR ?= $(firstword $(foreach d,/usr/local/bin $(HOME)/.local/bin,$(if $(shell test -w $(d) && echo y),$(d))) $(HOME)/.local/bin)
.PHONY: install-plugin
install-plugin: ## build kubectl-molt and install it into PLUGIN_DIR (default /usr/local/bin if writable, else ~/.local/bin), so `kubectl molt` works
	@mkdir -p $(BIN) "$(PLUGIN_DIR)"
	$(GO) build -o $(BIN)/kubectl-molt molt.dev/kubectl-molt
	install -m 0755 $(BIN)/kubectl-molt "$(PLUGIN_DIR)/kubectl-molt"
	@case ":$$PATH:" in *":$(PLUGIN_DIR):"*) echo "installed $(PLUGIN_DIR)/kubectl-molt: try \`kubectl molt --help\`";; *) echo "installed $(PLUGIN_DIR)/kubectl-molt, but $(PLUGIN_DIR) is not on PATH: export PATH=$(PLUGIN_DIR):\$$PATH";; esac

$(BIN)/kube-apiserver: tools/kube/go.mod tools/kube/go.sum
	cd tools/kube && $(TOOLGO) build -o $@ k8s.io/kubernetes/cmd/kube-apiserver
$(BIN)/kube-controller-manager: tools/kube/go.mod tools/kube/go.sum
	cd tools/kube && $(TOOLGO) build -o $@ k8s.io/kubernetes/cmd/kube-controller-manager
$(BIN)/kube-scheduler: tools/kube/go.mod tools/kube/go.sum
	cd tools/kube && $(TOOLGO) build -o $@ k8s.io/kubernetes/cmd/kube-scheduler
$(BIN)/kubectl: tools/kube/go.mod tools/kube/go.sum
	cd tools/kube && $(TOOLGO) build -o $@ k8s.io/kubernetes/cmd/kubectl
$(BIN)/etcd: tools/etcd/go.mod tools/etcd/go.sum tools/etcd/main.go
	cd tools/etcd && $(TOOLGO) build -o $@ .
$(BIN)/kwok: tools/kwok/go.mod tools/kwok/go.sum
	cd tools/kwok && $(TOOLGO) build -o $@ sigs.k8s.io/kwok/cmd/kwok
$(BIN)/nats: tools/nats/go.mod tools/nats/go.sum
	cd tools/nats && $(TOOLGO) build -o $@ github.com/nats-io/natscli/nats
# The NATS server of the local stack is the same version the tests embed.
$(BIN)/nats-server: dev/go.mod dev/go.sum
	$(GO) build -o $@ github.com/nats-io/nats-server/v2

##@ Develop
.PHONY: generate verify vet test test-rules test-deploy test-tmux test-unit bench bench-faults
generate: ## regenerate deepcopy, clients, informers, listers, CRDs and protobuf code
	hack/update-codegen.sh
	hack/update-proto.sh

verify: ## fail if generated code, CRDs or protobuf code are stale
	hack/verify-codegen.sh
	hack/update-proto.sh --verify

vet: ## gofmt and go vet every module
	@unformatted="$$(git ls-files '*.go' | xargs "$$($(GO) env GOROOT)/bin/gofmt" -l)"; if [ -n "$$unformatted" ]; then echo "gofmt would change (run gofmt -w on them):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(foreach s,$(SERVICES),./services/$(s)/...) ./pkg/... ./dev/... ./cmd/kubectl-molt/... ./test/e2e/...
	@for m in tools/*/ test/deploy/; do (cd $$m && $(TOOLGO) vet ./... ) || exit 1; done

test: tools build verify vet test-rules test-deploy test-tmux ## run every unit and integration test (real control plane and NATS), the Prometheus rules' tests and the deploy files' tests
	$(GO) test -count=1 -timeout 45m ./pkg/... ./dev/... $(foreach s,$(SERVICES),./services/$(s)/...) ./cmd/kubectl-molt/... ./test/e2e/...

test-tmux: ## make sure Debian's tmux is installed (the kubectl molt status terminal test runs it)
	@hack/tmux.sh

BENCH_N      ?= 1000
BENCH_OUT    ?= bench-results.md
BENCH_SHAPES ?= 100pct,10pct,one,hook
BENCH_SCALE  ?= 0
BENCH_FLOOR  ?= 1
BENCH_HOOK_N ?= 50
bench: up ## time issue 12's shapes on the local stack (BENCH_SHAPES, BENCH_SCALE=1 adds 10k and replicas, BENCH_FLOOR=0) into BENCH_OUT
	$(BIN)/molt-bench --kubeconfig .molt/kubeconfig --pid-dir .molt/pids -n $(BENCH_N) --out $(BENCH_OUT) \
		--shapes=$(BENCH_SHAPES) --scale=$(if $(filter 1,$(BENCH_SCALE)),true,false) \
		--floor=$(if $(filter 0,$(BENCH_FLOOR)),false,true) --hook-n $(BENCH_HOOK_N)

FAULTS_N    ?= 300
FAULTS_OUT  ?= faults-results.md
FAULTS_WIPE ?= 0
bench-faults: up ## kill -9 molt's services and NATS in turn while FAULTS_N sandboxes upgrade with hooks, then check every invariant (FAULTS_WIPE=1 also removes NATS's store once) into FAULTS_OUT
	$(BIN)/molt-bench --kubeconfig .molt/kubeconfig --pid-dir .molt/pids --faults --faults-n $(FAULTS_N) --faults-out $(FAULTS_OUT) \
		--faults-wipe-nats=$(if $(filter 1,$(FAULTS_WIPE)),true,false)

test-rules: ## check deploy/prometheus/rules.yaml and run its promtool unit tests (installs Debian's prometheus if needed)
	@hack/prometheus.sh
	promtool check rules deploy/prometheus/rules.yaml
	cd deploy/prometheus && promtool test rules rules_test.yaml

test-deploy: ## decode the Grafana dashboard strictly and parse its queries, check the ServiceMonitors and that the PrometheusRule holds rules.yaml's groups, load docker-compose.yaml with compose-go, run deploy/nats as a 3-node cluster with its route password and the TLS component (test/deploy: its own module, outside go.work)
	cd test/deploy && $(TOOLGO) test -count=1 -skip '^TestComposeStack' ./...

test-unit: ## run the tests that need no control plane
	$(GO) test -count=1 -short ./pkg/events/... ./pkg/apis/... ./cmd/kubectl-molt/...

.PHONY: clean
clean: down ## stop the stack and remove bin/ and .molt/
	rm -rf $(BIN) .molt

##@ Images
IMAGES := $(SERVICES) molt-devruntime nats-server
.PHONY: images images-check docker-stop
images: ## build one image per service, molt-devruntime and nats-server (deploy/nats), FROM scratch (installs and starts Docker if needed)
	hack/docker.sh ensure
	GO="$(GO)" hack/build-images.sh $(foreach s,$(SERVICES),$(s)=molt.dev/services/$(s)) molt-devruntime=molt.dev/dev/cmd/molt-devruntime nats-server=github.com/nats-io/nats-server/v2

images-check: images $(BIN)/nats-server ## prove that each image starts and answers its probe
	hack/check-images.sh $(IMAGES)

docker-stop: ## stop the dockerd that `make images` started (by its pid)
	hack/docker.sh stop

##@ Docker Compose
# docker-compose.yaml's images besides `make images`': molt-compose (its
# one-shot jobs, and the health check of the images below), molt-devnode, and
# the control plane, kwok, NATS and Debian's prometheus as built binaries with
# the libraries they link.
COMPOSE_IMAGES := molt-compose=molt.dev/dev/cmd/molt-compose molt-devnode=molt.dev/dev/cmd/molt-devnode \
	$(foreach b,etcd kube-apiserver kube-controller-manager kube-scheduler kwok,$(b)=bin/$(b),with=molt-compose) \
	nats-compose=bin/nats-server,with=molt-compose prometheus=/usr/bin/prometheus,with=molt-compose
.PHONY: compose-images compose-test
compose-images: images $(TOOL_BINS) ## build every image of docker-compose.yaml, FROM scratch (installs Docker and Debian's prometheus if needed)
	@hack/prometheus.sh
	GO="$(GO)" hack/build-images.sh $(COMPOSE_IMAGES)

compose-test: ## make compose-images, docker compose up the whole stack, upgrade seed 000's basic example through it, check Prometheus and the dashboard's queries, then down -v (and stops the dockerd it started)
	GO="$(GO)" hack/compose-test.sh
