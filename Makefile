# memory-service: `make run` and `make test` install whatever is missing, then run.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
STAMP := $(VENV)/.installed

.PHONY: run test deps system-deps db protos lint-protos lint-imports bench bench-context bench-retrieval clean

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

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

deps: system-deps $(STAMP)

# Embedded PostgreSQL 17 + AGE + pgvector (common/tooling/embedded_db/, stdlib only): builds its rootfs once
# (debootstrap, ~45 s, ~700 MB under ~/.cache/memory-service), then starts it; idempotent.
db: deps
	$(PY) -m common.tooling.embedded_db up

# Regenerates the checked-in stubs under common/generated from protos/ (grpcio-tools + mypy-protobuf).
protos: $(STAMP)
	rm -rf common/generated/memory
	mkdir -p common/generated/memory/v1
	PATH=$(VENV)/bin:$$PATH $(PY) -m grpc_tools.protoc -I protos \
	  --python_out=common/generated --grpc_python_out=common/generated \
	  --mypy_out=common/generated --mypy_grpc_out=common/generated \
	  protos/memory/v1/*.proto
	touch common/generated/memory/__init__.py common/generated/memory/v1/__init__.py

# buf comes from the npm package @bufbuild/buf, installed into .tools/ on first use.
lint-protos:
	@test -x .tools/node_modules/.bin/buf || npm install --silent --prefix .tools @bufbuild/buf@1
	.tools/node_modules/.bin/buf lint

# The layers of ARCHITECTURE.md (import-linter contracts in pyproject.toml).
lint-imports: $(STAMP)
	$(VENV)/bin/lint-imports

run: db
	$(VENV)/bin/cb up

test: db lint-imports
	$(PY) -m pytest

bench: db
	$(PY) bench/run_bench.py

bench-context: db
	$(PY) bench/bench_context_quality.py

bench-retrieval: db
	$(PY) bench/bench_retrieval.py --presets documents,conversations,

clean:
	rm -rf $(VENV) .tools .pytest_cache
