#!/usr/bin/env bash
# Runs every test of the project. Installs what a fresh machine lacks first:
# Go modules (from the module proxy), the Debian packages the tests use, and
# for the trainers module libtensorflow, Fashion-MNIST and ONNX Runtime
# (trainers/setup.sh, cached in ~/.cache/switchml).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v ip >/dev/null || need_apt+=(iproute2)
command -v ethtool >/dev/null || need_apt+=(ethtool) # the BMv2 test turns off segmentation offload on its veth ports
command -v protoc >/dev/null || true # generated code is checked in; protoc is only for regeneration
command -v gcc >/dev/null || need_apt+=(gcc) # cgo: the C interface in capi/ and its C test
# The PyTorch backend's tests run on Debian's PyTorch (1.13, CPU, gloo).
/usr/bin/python3 -c 'import torch' 2>/dev/null || need_apt+=(python3-torch)
/usr/bin/python3 -m pytest --version >/dev/null 2>&1 || need_apt+=(python3-pytest)
if [[ ${#need_apt[@]} -gt 0 ]]; then
	if [[ $(id -u) -eq 0 ]]; then
		apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}" >&2
	else
		echo "test.sh: missing ${need_apt[*]} (not root, cannot install); tests that need them will skip" >&2
	fi
fi

# The P4 toolchain (p4c, BMv2, bf-p4c) sits beside the checkout in
# shared/tools/p4; its env.sh installs the Debian libraries it runs on. The
# tests prepare a runnable copy themselves (p4/p4tools) and skip the
# compiler and BMv2 tests, saying so, only where the toolchain is absent.
p4tools="${SWITCHML_P4_TOOLS:-$(cd .. && pwd)/shared/tools/p4}"
if [[ -f "$p4tools/env.sh" ]]; then
	echo "== P4 toolchain at $p4tools: installing its runtime libraries where missing"
	(source "$p4tools/env.sh" >&2)
else
	echo "== no P4 toolchain at $p4tools: the compiler and BMv2 tests will skip"
fi

echo "== go vet ./..."
go vet ./...
echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [[ -n "$bad" ]]; then echo "gofmt would change: $bad"; exit 1; fi

# staticcheck, pinned, from the module proxy (cached after the first run).
staticcheck=honnef.co/go/tools/cmd/staticcheck@v0.8.2
echo "== staticcheck ($staticcheck)"
go run "$staticcheck" ./...

echo "== go test -race ./... (library, switch, controller, CLI)"
go test -race -timeout 30m ./...

# The race detector makes allocation counts meaningless, so the tests that
# prove the per-packet paths allocate nothing run again without it.
echo "== allocation tests without -race"
go test -count=1 -run 'NoAllocs|AllocatesNothing|DoesNotGrow' ./switchml/... ./p4/... ./wire/... ./transport/...

# Each fuzz target for a few seconds: a smoke pass, not a campaign. Go's
# fuzzing coordinator can end a time-bounded run with a bare "context
# deadline exceeded" on a loaded machine, a race at the deadline with no
# failing input found; such a run is repeated once with a count-bounded
# budget, which has no deadline to race. A real finding prints "Failing
# input written" and fails at once.
echo "== fuzz smoke pass"
fuzz_smoke() {
	local pkg=$1 target=$2 out
	if out=$(go test -run '^$' -fuzz "^${target}\$" -fuzztime 3s "$pkg" 2>&1); then
		echo "$out" | tail -n 2
		return 0
	fi
	echo "$out"
	if grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input written' <<<"$out"; then
		echo "fuzz smoke: $target hit the fuzzing coordinator's deadline race; running it again for 2000 inputs"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime 2000x "$pkg"
		return
	fi
	return 1
}
while read -r pkg target; do
	fuzz_smoke "$pkg" "$target"
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
	for t in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //'); do echo "./$(dirname "${f#./}") $t"; done
done | sort -u)

# The C interface: libswitchml.so, its header checked against the one cgo
# generates, the C test program; then the PyTorch backend's tests (each
# rank a process, against gloo on the same inputs) on that library.
echo "== libswitchml (capi) and the PyTorch backend (python/)"
capi_build=$(mktemp -d)
go build -buildmode=c-shared -o "$capi_build/libswitchml.so" ./capi
gcc -fsyntax-only -Wall -Werror -Icapi -include "$capi_build/libswitchml.h" capi/ctest/abi_test.c
gcc -Wall -Werror -Icapi -o "$capi_build/abi_test" capi/ctest/abi_test.c -L"$capi_build" -lswitchml -lpthread -lm
LD_LIBRARY_PATH="$capi_build" "$capi_build/abi_test"
SWITCHML_LIBRARY="$capi_build/libswitchml.so" /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests
rm -rf "$capi_build"

if [[ "${SWITCHML_SKIP_TRAINERS:-}" != 1 ]]; then
	echo "== trainers (TensorFlow through graft)"
	eval "$(trainers/setup.sh)"
	(cd trainers && go vet ./... && go run "$staticcheck" ./... && go test -timeout 30m ./...)
fi
