#!/usr/bin/env bash
# Runs the timing-sensitive tests (the embedded fabric, the session, the
# controller, the ring, the fallback and fault tests of the CLI, and the
# PyTorch backend's tests in python/tests) while every core is kept busy, as
# on a shared or overloaded machine: a test that waits for a fixed time
# instead of for its event fails here. Exits non-zero on any failure. Run
# from anywhere in the repository.
#
#   COUNT  runs of each test (default 5)
#   LOAD   busy loops to start (default: one per core)
#   LIMIT  seconds after which the busy loops stop even if this script is
#          killed without running its trap (default 3600)
set -euo pipefail
cd "$(dirname "$0")/.."

count=${COUNT:-5}
load=${LOAD:-$(nproc)}
limit=${LIMIT:-3600}

pylib=$(mktemp -d)
loops=()
stop_load() {
	for pid in "${loops[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${loops[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	loops=()
}
trap 'stop_load; rm -rf "$pylib"' EXIT
trap 'exit 130' INT TERM

# Build first, unloaded: compiling is not what is under test.
echo "== building the tests"
go test -race -count=1 -run '^$' ./p4/local/ ./switchml/ ./switchml/ring/ ./p4/controller/... ./cmd/switchml/ >/dev/null
go build -buildmode=c-shared -o "$pylib/libswitchml.so" ./capi
go build -o "$pylib/switchml" ./cmd/switchml # the torchrun tests' switch

echo "== $load busy loops for at most ${limit}s"
for ((i = 0; i < load; i++)); do
	timeout "$limit" sh -c 'while :; do :; done' &
	loops+=($!)
done

failed=()
run() {
	echo "== go test -race -count=$count $*"
	if ! go test -race -count="$count" -timeout 60m "$@"; then
		failed+=("go test $*")
	fi
}
run ./p4/local/
run ./switchml/
run ./switchml/ring/
run ./p4/controller/...
# The CLI's tests start real processes; only the fallback and fault ones.
run -run 'Fallback|KilledWorker|SwitchRestart|MutualTLS|ControllerRestart|ChaosShort|NaNRank|HijackAndFlood|HostileAdoption|HostileRegistrationStorm|HostileFatRegistration|BadInput' ./cmd/switchml/
# The PyTorch backend's tests, whose ranks are processes too: on Debian's
# torch (/usr/bin/python3) and on torch 2.x from PyPI in the virtual
# environment scripts/test.sh makes, each where it has torch and pytest.
venv=${SWITCHML_TORCH_VENV:-$HOME/.cache/switchml/torch-venv}
for py in /usr/bin/python3 "$venv/bin/python"; do
	if ! "$py" -c 'import torch, pytest' >/dev/null 2>&1; then
		echo "== no python tests on $py: it has no torch or pytest (scripts/test.sh makes $venv)"
		continue
	fi
	for i in $(seq "$count"); do
		echo "== python tests on $py, run $i of $count"
		if ! SWITCHML_LIBRARY="$pylib/libswitchml.so" SWITCHML_BINARY="$pylib/switchml" "$py" -m pytest -q -p no:cacheprovider python/tests; then
			failed+=("python tests on $py (run $i)")
		fi
	done
done

stop_load
if ((${#failed[@]} > 0)); then
	printf 'FAILED under load: %s\n' "${failed[@]}"
	exit 1
fi
echo "== every timing-sensitive test passed under load"
