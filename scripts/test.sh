#!/usr/bin/env bash
# Runs every test of the project. Installs what a fresh machine lacks first:
# Go modules (from the module proxy), the Debian packages the tests use, and
# for the trainers module libtensorflow, Fashion-MNIST and ONNX Runtime
# (trainers/setup.sh, cached in ~/.cache/switchml).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v ip >/dev/null || need_apt+=(iproute2)
command -v protoc >/dev/null || true # generated code is checked in; protoc is only for regeneration
if [[ ${#need_apt[@]} -gt 0 ]]; then
	if [[ $(id -u) -eq 0 ]]; then
		apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}" >&2
	else
		echo "test.sh: missing ${need_apt[*]} (not root, cannot install); tests that need them will skip" >&2
	fi
fi

echo "== go vet ./..."
go vet ./...
echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [[ -n "$bad" ]]; then echo "gofmt would change: $bad"; exit 1; fi

echo "== go test -race ./... (library, switch, controller, CLI)"
go test -race -timeout 30m ./...

if [[ "${SWITCHML_SKIP_TRAINERS:-}" != 1 ]]; then
	echo "== trainers (TensorFlow through graft)"
	eval "$(trainers/setup.sh)"
	(cd trainers && go vet ./... && go test -timeout 30m ./...)
fi
