# memory-service: `make run` and `make test` install whatever is missing, then run.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
STAMP := $(VENV)/.installed

.PHONY: console-assets run test test-documents-data deps system-deps db protos lock sbom lint-protos lint-imports lint-python ts-client ts-package go-client bench bench-context bench-compile bench-scale bench-retrieval bench-titles docs docs-serve clean

# Debian packages the project needs on the host: debootstrap builds the embedded database's rootfs.
# python3-venv: Debian's python3 has no ensurepip without it, so `python3 -m venv` would fail.
system-deps:
	@missing=""; \
	{ test -x /usr/sbin/debootstrap || command -v debootstrap >/dev/null 2>&1; } || missing="$$missing debootstrap"; \
	{ test -x $(PY) || $(PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1; } || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# The environment comes from the lock requirements/dev.txt (hashes of every file pip may take; pip refuses
# anything unpinned or unhashed), then clients/python (memory-service-grpc-client: the Python client and the
# generated stubs) and the project, editable, without dependencies and built with the locked setuptools
# (--no-build-isolation: nothing is fetched to build them); `pip check` proves the lock covers them.
$(STAMP): pyproject.toml clients/python/pyproject.toml requirements/dev.txt requirements/pip.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes -r requirements/pip.txt
	$(PY) -m pip install -q --require-hashes -r requirements/dev.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e ./clients/python -e .
	$(PY) -m pip check
	@touch $(STAMP)

deps: system-deps $(STAMP)

# Embedded PostgreSQL 17 + AGE + pgvector (memory_service_tools/embedded_db/, stdlib only): builds its rootfs once
# (debootstrap, ~45 s, ~700 MB under ~/.cache/memory-service), then starts it; idempotent.
# Then a streaming replica of it on 127.0.0.1:55433 (pg_basebackup -R; the read-replica tests use it).
db: deps
	$(PY) -m memory_service_tools.embedded_db up
	$(PY) -m memory_service_tools.embedded_db up --replica

# Regenerates the checked-in stubs from protos/ (grpcio-tools + mypy-protobuf) into the client package:
# clients/python/src/memory_service_grpc_client/memory/v1 (`memory_service_grpc_client.memory.v1`). protoc
# names the proto files memory/v1/*.proto (their names in descriptors and reflection stay so) and writes
# the stubs' imports of each other as `memory.v1`: sed moves those imports and the module names under the
# client package.
STUBS := clients/python/src/memory_service_grpc_client
protos: $(STAMP)
	rm -rf $(STUBS)/memory
	mkdir -p $(STUBS)/memory/v1
	PATH=$(VENV)/bin:$$PATH $(PY) -m grpc_tools.protoc -I protos \
	  --python_out=$(STUBS) --grpc_python_out=$(STUBS) \
	  --mypy_out=$(STUBS) --mypy_grpc_out=$(STUBS) \
	  protos/memory/v1/*.proto
	sed -i -E -e 's/^from memory\.v1 import /from memory_service_grpc_client.memory.v1 import /' \
	  -e "s/BuildTopDescriptorsAndMessages\(DESCRIPTOR, 'memory\.v1\./BuildTopDescriptorsAndMessages(DESCRIPTOR, 'memory_service_grpc_client.memory.v1./" \
	  $(STUBS)/memory/v1/*.py $(STUBS)/memory/v1/*.pyi
	touch $(STUBS)/memory/__init__.py $(STUBS)/memory/v1/__init__.py

# The locks (requirements/*.txt, every pin with the hashes of its files): dev.txt = the project with its
# test, bench and docs extras (make deps, CI); service.txt = without the extras (the image, make sbom, the install
# test); client.txt = clients/python alone; each with pip and the build backend (requirements/build.in);
# tools.txt = uv and cyclonedx-bom (requirements/tools.in), installed into .tools/venv. `make lock`
# regenerates them with uv, keeping the pins that still fit (`make lock UPGRADE=1` takes the newest); the
# service and client locks are constrained by the dev lock, so a package has one version in all of them.
# The client is no pin of any lock: it is built from clients/python. tests/unit/test_dependency_locks.py
# fails when a pyproject.toml and the locks disagree.
TOOLS := .tools/venv
TOOLS_STAMP := $(TOOLS)/.installed
$(TOOLS_STAMP): requirements/tools.txt
	@test -x $(TOOLS)/bin/python || $(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install -q --require-hashes -r requirements/tools.txt
	@touch $(TOOLS_STAMP)

UV_COMPILE := $(TOOLS)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11 \
  --python-platform x86_64-unknown-linux-gnu --no-emit-package memory-service-grpc-client \
  --custom-compile-command "make lock" $(if $(UPGRADE),--upgrade)
lock: $(TOOLS_STAMP)
	$(UV_COMPILE) requirements/tools.in -o requirements/tools.txt
	$(UV_COMPILE) requirements/pip.in -c requirements/dev.txt -o requirements/pip.txt
	$(UV_COMPILE) pyproject.toml requirements/build.in --extra test --extra bench --extra docs -o requirements/dev.txt
	$(UV_COMPILE) pyproject.toml requirements/build.in -c requirements/dev.txt -o requirements/service.txt
	$(UV_COMPILE) clients/python/pyproject.toml requirements/build.in -c requirements/dev.txt -o requirements/client.txt

# The SBOM (CycloneDX JSON) of the service's Python environment: build/service-venv installed the way the
# image is (deploy/service/install_from_lock.sh with requirements/service.txt), read by cyclonedx-py.
SBOM_VENV := build/service-venv
sbom: $(TOOLS_STAMP)
	rm -rf $(SBOM_VENV)
	$(PYTHON) -m venv $(SBOM_VENV)
	deploy/service/install_from_lock.sh $(SBOM_VENV)/bin/python requirements/service.txt
	$(TOOLS)/bin/cyclonedx-py environment --pyproject pyproject.toml --output-reproducible --output-format JSON \
	  --output-file build/sbom.cdx.json $(SBOM_VENV)/bin/python
	@echo "sbom: build/sbom.cdx.json ($$($(PYTHON) -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["components"]))' build/sbom.cdx.json) components)"

# The console's browser assets (memory_service_tools/console/static/vendor, committed so the wheel and a
# fresh clone need no npm): htmx and cytoscape at the pinned versions, copied from their npm packages'
# dist folders with their licences; axe-core stays in .tools for the browser tests' accessibility check.
# CI runs this and fails when the committed files differ from the packages'.
CONSOLE_NPM := htmx.org@2.0.11 cytoscape@3.35.0 axe-core@4.14.1
CONSOLE_VENDOR := memory_service_tools/console/static/vendor
console-assets:
	@mkdir -p .tools/console && test -f .tools/console/package.json || echo '{"private": true}' > .tools/console/package.json
	npm install --silent --no-audit --no-fund --prefix .tools/console $(CONSOLE_NPM)
	cp .tools/console/node_modules/htmx.org/dist/htmx.min.js $(CONSOLE_VENDOR)/htmx.min.js
	cp .tools/console/node_modules/htmx.org/LICENSE $(CONSOLE_VENDOR)/LICENSE.htmx.org
	cp .tools/console/node_modules/cytoscape/dist/cytoscape.min.js $(CONSOLE_VENDOR)/cytoscape.min.js
	cp .tools/console/node_modules/cytoscape/LICENSE $(CONSOLE_VENDOR)/LICENSE.cytoscape

# buf comes from the npm package @bufbuild/buf, installed into .tools/ on first use.
lint-protos:
	@test -x .tools/node_modules/.bin/buf || npm install --silent --prefix .tools @bufbuild/buf@1
	.tools/node_modules/.bin/buf lint

# The TypeScript client (clients/typescript): npm packages (buf, ts-proto, typescript, @grpc/grpc-js),
# code generated by buf.gen.yaml into clients/typescript/src/gen, compiled with tsc --strict.
ts-client:
	cd clients/typescript && npm install --silent
	clients/typescript/node_modules/.bin/buf generate
	cd clients/typescript && node_modules/.bin/tsc -p tsconfig.json

# The TypeScript client as a package another project installs: `npm pack` of clients/typescript (built by
# ts-client) into .tools/ts-consumer, where the project clients/typescript/consumer installs the tarball
# (its dependencies come from the npm registry) and type-checks a call with tsc --strict.
ts-package: ts-client
	rm -rf .tools/ts-consumer && mkdir -p .tools/ts-consumer
	cd clients/typescript && npm pack --silent --pack-destination ../../.tools/ts-consumer
	cp clients/typescript/consumer/package.json clients/typescript/consumer/tsconfig.json clients/typescript/consumer/main.ts .tools/ts-consumer/
	cd .tools/ts-consumer && npm install --silent --no-audit --no-fund && node_modules/.bin/tsc -p tsconfig.json
	@echo "ts-package: .tools/ts-consumer installed $$(ls .tools/ts-consumer/*.tgz) and type-checked main.ts"

# The Go client (clients/go): Go 1.19 and the protoc-gen-go / protoc-gen-go-grpc plugins and the grpc and
# protobuf libraries are Debian packages (installed when missing; golang-github-golang-protobuf-1-5-dev, not
# the 1.3 one grpc pulls in, which cannot decode APIv2 messages); code generated by buf.gen.go.yaml into
# clients/go/gen, built in GOPATH mode against /usr/share/gocode (no module downloads) with clients/go/cmd/check.
GO_DEBS := golang-go protoc-gen-go protoc-gen-go-grpc golang-google-grpc-dev golang-google-protobuf-dev golang-github-golang-protobuf-1-5-dev
GO_PATH := $(CURDIR)/.tools/gopath
go-client:
	@missing=""; for pkg in $(GO_DEBS); do dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then echo "installing$$missing (apt-get)"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; fi
	@test -x .tools/node_modules/.bin/buf || npm install --silent --prefix .tools @bufbuild/buf@1
	rm -rf clients/go/gen
	.tools/node_modules/.bin/buf generate --template buf.gen.go.yaml
	mkdir -p $(GO_PATH)/src && ln -sfn $(CURDIR)/clients/go $(GO_PATH)/src/memoryservice
	cd $(GO_PATH)/src/memoryservice && GO111MODULE=off GOPATH=$(GO_PATH):/usr/share/gocode GOCACHE=$(CURDIR)/.tools/gocache \
	  go build -o $(CURDIR)/clients/go/bin/check ./cmd/check
	cd $(GO_PATH)/src/memoryservice && GO111MODULE=off GOPATH=$(GO_PATH):/usr/share/gocode GOCACHE=$(CURDIR)/.tools/gocache \
	  go build -o $(CURDIR)/clients/go/bin/watchsuperseded ./cmd/watchsuperseded

# The import layers of docs/explanation/architecture.md (import-linter contracts in pyproject.toml).
lint-imports: $(STAMP)
	$(VENV)/bin/lint-imports

# Pyflakes, syntax-level errors and one import per line ([tool.ruff.lint] in pyproject.toml; ruff from the lock).
lint-python: $(STAMP)
	$(VENV)/bin/ruff check .

# `cb up` starts the embedded database itself (not `db`), so Ctrl-C stops the database it started.
run: deps
	$(VENV)/bin/cb up

# The real documents of tests/e2e/test_real_pdfs.py and test_real_mail.py: PDF books from Debian's
# documentation packages and CPython's e-mail test messages (Debian packages, installed when missing).
DOC_DEBS := debian-history maint-guide libpython3.11-testsuite
test-documents-data:
	@missing=""; for pkg in $(DOC_DEBS); do dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then echo "installing$$missing (apt-get)"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; fi

test: db lint-imports lint-python test-documents-data
	$(PY) -m pytest

bench: db
	$(PY) bench/run_bench.py

bench-context: db
	$(PY) bench/bench_context_quality.py

bench-compile: db
	$(PY) bench/bench_compile_cost.py $(if $(BASELINE),--baseline-root $(BASELINE))

bench-scale: db
	$(PY) bench/bench_scale.py

bench-retrieval: db
	$(PY) bench/bench_retrieval.py --presets documents,conversations,

bench-titles: db
	$(PY) bench/bench_title_search.py --presets documents,conversations

# The documentation site (mkdocs.yml, docs/): `make docs` builds it into site/ (--strict: a broken link or
# a generated page that fails stops the build); `make docs-serve` serves it at http://127.0.0.1:8000.
docs: $(STAMP)
	DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

DOCS_ADDR ?= 127.0.0.1:8000
docs-serve: $(STAMP)
	DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr $(DOCS_ADDR)

clean:
	rm -rf $(VENV) site .tools build .pytest_cache clients/typescript/node_modules clients/typescript/dist clients/typescript/src/gen clients/go/gen clients/go/bin
