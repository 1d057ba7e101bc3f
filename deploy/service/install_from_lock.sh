#!/bin/sh
# Installs memory-service into a virtualenv the one way the image (deploy/service/Dockerfile), `make sbom`
# and tests/e2e/test_python_client_package.py do: every dependency from a lock with hashes (pip refuses
# anything unpinned or unhashed), then the client (clients/python) and the server built here as wheels
# with that environment's own setuptools and installed without dependencies, then `pip check`.
#
#   deploy/service/install_from_lock.sh VENV_PYTHON [LOCK] [WHEEL_DIR]
#
# LOCK defaults to requirements/service.txt; the wheels are kept in WHEEL_DIR when it is given.
# Run from anywhere: paths are taken from the repository root.
set -eu
# Absolute, not resolved: a venv's bin/python is a symlink to the base interpreter.
case $1 in /*) python=$1 ;; *) python=$PWD/$1 ;; esac
"$python" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' || {
  echo "install_from_lock.sh: $python is not a virtualenv's python" >&2
  exit 2
}
root=$(cd "$(dirname "$0")/../.." && pwd)
lock=$(realpath "${2:-$root/requirements/service.txt}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheels=${3:-$work/wheels}
mkdir -p "$wheels"
wheels=$(realpath "$wheels")

"$python" -m pip install -q --require-hashes -r "$root/requirements/pip.txt"
"$python" -m pip install -q --require-hashes -r "$lock"
# A copy of the sources: setuptools writes build/ and *.egg-info beside them, and a stale build/lib of an
# earlier build would end up in the wheel.
mkdir -p "$work/src/clients"
(cd "$root" && tar -cf - --exclude=__pycache__ --exclude='*.egg-info' --exclude=build \
  pyproject.toml README.md common ingest_service query_service memory_service_tools clients/python) | (cd "$work/src" && tar -xf -)
"$python" -m pip wheel -q --no-deps --no-build-isolation -w "$wheels" "$work/src/clients/python" "$work/src"
"$python" -m pip install -q --no-deps "$wheels"/memory_service_grpc_client-*.whl "$wheels"/memory_service-*.whl
"$python" -m pip check
