#!/usr/bin/env bash
# Runs every test of the project and ends with one summary: each stage's
# result and time, every failed test with its first lines, every skipped
# test with its reason. Every stage runs even after another failed; the
# exit status is non-zero if anything failed.
#
# It installs what a fresh machine lacks first: Go modules (from the module
# proxy), the Debian packages the tests use (as root; otherwise it says
# which are missing and the tests that need them skip), the P4 toolchain's
# runtime libraries, and for the trainers module libtensorflow,
# Fashion-MNIST and ONNX Runtime (trainers/setup.sh, cached in
# ~/.cache/switchml), and torch 2.x from PyPI in a virtual environment
# (~/.cache/switchml/torch-venv).
#
# Two lanes run side by side on the machine's cores:
#   race      go test -race ./... (library, switch, controller, CLI)
#   the rest  lint (vet, gofmt, staticcheck), sim (the simulator's seeded
#             sweeps, without -race), alloc (the allocation tests
#             without -race), memory (the controller's peak memory under a
#             storm of calls, without -race), fuzz (each fuzz target for a few seconds),
#             capi (libswitchml.so and its C test), python (the PyTorch
#             backend's tests, on Debian's torch 1.13 and on torch 2.x from
#             PyPI), trainers (TensorFlow through graft)
#
# Each stage's whole output is kept in its log (the folder is printed at
# the start; SWITCHML_TEST_OUT chooses it). SWITCHML_TEST_STAGES="lint
# python" runs only the stages named (the set-up always runs);
# SWITCHML_SKIP_TRAINERS=1 leaves the trainers stage out. While changing code, `go test -short ./...` is the
# fast loop (about two minutes): no compilers, root or process trees.
set -uo pipefail
cd "$(dirname "$0")/.."

out=${SWITCHML_TEST_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/switchml-test.XXXXXX")}
mkdir -p "$out/bin" "$out/lib"
: >"$out/stages.tsv"
echo "== logs of every stage in $out"
t_start=${EPOCHREALTIME/./}

# selected NAME: whether this run runs stage NAME (SWITCHML_TEST_STAGES;
# the set-up always runs).
selected() {
	[[ -z "${SWITCHML_TEST_STAGES:-}" || " $SWITCHML_TEST_STAGES " == *" $1 "* || $1 == setup ]]
}

# stage NAME FUNCTION: runs FUNCTION with its output in $out/NAME.log and on
# the console behind [NAME], and records its exit status and time.
stage() {
	local name=$1 fn=$2 t0 rc secs
	if ! selected "$name"; then
		return 0
	fi
	t0=${EPOCHREALTIME/./}
	echo "== [$name] started"
	{
		"$fn"
		echo $? >"$out/$name.rc"
	} 2>&1 | tee "$out/$name.log" | sed -u "s/^/[$name] /"
	rc=$(cat "$out/$name.rc" 2>/dev/null || echo 1)
	secs=$(((${EPOCHREALTIME/./} - t0) / 1000000))
	printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$secs" "$out/$name.log" >>"$out/stages.tsv"
	if [[ $rc == 0 ]]; then
		echo "== [$name] done in ${secs}s"
	else
		echo "== [$name] FAILED (exit $rc) in ${secs}s"
	fi
}

# gotest NAME ARGS...: go test -json ARGS, its log short on the console,
# every test's outcome kept for the summary as $out/NAME.results.json.
gotest() {
	local name=$1
	shift
	go test -json "$@" 2>&1 | "$out/bin/testreport" go "$out/$name.results.json"
	local rc=("${PIPESTATUS[@]}")
	((rc[0] == 0 && rc[1] == 0))
}

run_setup() {
	local need_apt=()
	command -v ip >/dev/null || need_apt+=(iproute2)
	command -v ethtool >/dev/null || need_apt+=(ethtool) # the BMv2 test turns off segmentation offload on its veth ports
	command -v gcc >/dev/null || need_apt+=(gcc)         # cgo: the C interface in capi/ and its C test
	# The PyTorch backend's tests run on Debian's PyTorch (1.13, CPU, gloo).
	/usr/bin/python3 -c 'import torch' 2>/dev/null || need_apt+=(python3-torch)
	/usr/bin/python3 -m pytest --version >/dev/null 2>&1 || need_apt+=(python3-pytest)
	/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv) # the torch 2.x venv below
	if [[ ${#need_apt[@]} -gt 0 ]]; then
		if [[ $(id -u) -eq 0 ]]; then
			apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}" || return
		else
			echo "missing ${need_apt[*]} (not root, cannot install); tests that need them will skip"
		fi
	fi
	# The P4 toolchain (p4c, BMv2, bf-p4c) sits beside the checkout in
	# shared/tools/p4; its env.sh installs the Debian libraries it runs on.
	# The tests prepare a runnable copy themselves (p4/p4tools) and skip the
	# compiler and BMv2 tests, saying so, only where the toolchain is absent.
	local p4tools="${SWITCHML_P4_TOOLS:-$(cd .. && pwd)/shared/tools/p4}"
	if [[ -f "$p4tools/env.sh" ]]; then
		echo "P4 toolchain at $p4tools: installing its runtime libraries where missing"
		(source "$p4tools/env.sh") || return
	else
		echo "no P4 toolchain at $p4tools: the compiler and BMv2 tests will skip"
	fi
	go mod download && go build -o "$out/bin/testreport" ./internal/testreport/cmd/testreport
}

# The python stage runs the backend's tests on Debian's torch 1.13
# (/usr/bin/python3) and on torch 2.x from PyPI, in a virtual environment
# cached outside the checkout, so that a clean clone reuses it.
torch_venv=${SWITCHML_TORCH_VENV:-$HOME/.cache/switchml/torch-venv}

# torch_venv_ready: makes $torch_venv unless it has torch, pytest and numpy
# already. It is built beside its final place and renamed only once pip
# has succeeded, so a half-made one (an interrupted run, a failed
# download) is never used; the scripts in its bin/ (pip's, torchrun,
# activate) name the build directory, which is rewritten to the final one
# first.
torch_venv_ready() {
	if "$torch_venv/bin/python" -c 'import torch, pytest, numpy' >/dev/null 2>&1; then
		echo "torch $("$torch_venv/bin/python" -c 'import torch; print(torch.__version__)') in $torch_venv"
		return 0
	fi
	local tmp="$torch_venv.tmp.$$" d
	# What an interrupted run left behind (its process is gone).
	for d in "$torch_venv".tmp.*; do
		if [[ -d $d ]] && ! kill -0 "${d##*.}" 2>/dev/null; then rm -rf "$d"; fi
	done
	echo "making $torch_venv: torch, pytest and numpy from PyPI (once; about 5 GB with torch's CUDA libraries, minutes to download)"
	mkdir -p "$(dirname "$torch_venv")" && rm -rf "$tmp" || return
	if ! /usr/bin/python3 -m venv "$tmp" || ! "$tmp/bin/python" -m pip install -q --disable-pip-version-check torch pytest numpy; then
		rm -rf "$tmp"
		echo "could not make $torch_venv (no route to PyPI?): the python stage's torch 2.x run will fail"
		return 1
	fi
	grep -lI "$tmp" "$tmp"/bin/* | xargs -r sed -i "s|$tmp|$torch_venv|g"
	# Another run may have finished one meanwhile: it stays, ours goes.
	# Only a broken one is replaced.
	if "$torch_venv/bin/python" -c 'import torch, pytest, numpy' >/dev/null 2>&1; then
		rm -rf "$tmp"
		return 0
	fi
	rm -rf "$torch_venv"
	mv -T "$tmp" "$torch_venv" 2>/dev/null || rm -rf "$tmp"
}

# staticcheck, pinned, from the module proxy (cached after the first run).
staticcheck=honnef.co/go/tools/cmd/staticcheck@v0.8.2

run_lint() {
	local rc=0 bad
	echo "go vet ./..."
	go vet ./... || rc=1
	echo "gofmt"
	bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
	if [[ -n "$bad" ]]; then
		echo "gofmt would change: $bad"
		rc=1
	fi
	echo "staticcheck ($staticcheck)"
	go run "$staticcheck" ./... || rc=1
	return $rc
}

# The simulator (internal/sim) runs the pure state machines on one
# goroutine: the race detector has nothing to find there and slows its
# seeded sweeps fivefold, so it runs without -race in the other lane.
# Its timeout guards against a hang: cmd/switchml, the longest package,
# takes about 17 minutes with both cores kept busy, and past 30 under a
# heavier load.
run_race() {
	gotest race -race -count=1 -timeout 45m $(go list ./... | grep -v '/internal/sim$')
}

run_sim() {
	gotest sim -count=1 -timeout 30m ./internal/sim
}

# The race detector makes allocation counts meaningless, so the tests that
# prove the per-packet paths allocate nothing run again without it.
run_alloc() {
	gotest alloc -count=1 -run 'NoAllocs|AllocatesNothing|DoesNotGrow' ./switchml/... ./p4/... ./wire/... ./transport/...
}

# Bounds on a process's memory, which the race detector's shadow memory
# would swamp: the controller's peak under a storm of calls, on binaries
# built without it.
run_memory() {
	gotest memory -count=1 -run 'MemoryBound' ./cmd/switchml
}

# Each fuzz target for a few seconds: a smoke pass, not a campaign. Go's
# fuzzing coordinator can end a time-bounded run with a bare "context
# deadline exceeded" on a loaded machine, a race at the deadline with no
# failing input found; such a run is repeated once with a count-bounded
# budget, which has no deadline to race. A real finding prints "Failing
# input written" and fails at once.
run_fuzz() {
	local rc=0 pkg target stream
	stream=$(mktemp)
	while read -r pkg target; do
		echo "$target ($pkg)"
		if ! go test -json -run '^$' -fuzz "^${target}\$" -fuzztime 3s "$pkg" >"$stream" 2>&1 &&
			grep -q 'context deadline exceeded' "$stream" && ! grep -q 'Failing input written' "$stream"; then
			echo "$target hit the fuzzing coordinator's deadline race; running it again for 2000 inputs"
			go test -json -run '^$' -fuzz "^${target}\$" -fuzztime 2000x "$pkg" >"$stream" 2>&1
		fi
		"$out/bin/testreport" go "$out/fuzz.$target.results.json" <"$stream" || rc=1
	done < <(grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
		for t in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //'); do echo "./$(dirname "${f#./}") $t"; done
	done | sort -u)
	rm -f "$stream"
	# The fuzz runs' outcomes are in the results; a failed one fails the stage.
	return $rc
}

# The C interface: libswitchml.so, its header checked against the one cgo
# generates, the C test program. The library stays for the python stage.
run_capi() {
	go build -buildmode=c-shared -o "$out/lib/libswitchml.so" ./capi &&
		gcc -fsyntax-only -Wall -Werror -Icapi -include "$out/lib/libswitchml.h" capi/ctest/abi_test.c &&
		gcc -Wall -Werror -Icapi -o "$out/lib/abi_test" capi/ctest/abi_test.c -L"$out/lib" -lswitchml -lpthread -lm &&
		LD_LIBRARY_PATH="$out/lib" "$out/lib/abi_test"
}

# The PyTorch backend's tests (each rank a process, against gloo on the
# same inputs) on that library, once on each torch: the results of each
# run are python.torch-VERSION.results.json, their tests named
# torch-VERSION.tests.MODULE.
run_python() {
	if [[ ! -f "$out/lib/libswitchml.so" ]]; then
		echo "building libswitchml.so (the capi stage did not run)"
		go build -buildmode=c-shared -o "$out/lib/libswitchml.so" ./capi || return
	fi
	# The switchml binary: the torchrun test runs a job through a switch and
	# controller of its own too.
	go build -o "$out/bin/switchml" ./cmd/switchml || return
	local rc=0
	# PyTorch's own distributed tests (test_torch_harness.py) import torch's
	# test utilities, which need expecttest, a dependency of neither torch:
	# from PyPI once, beside the torch 2.x environment, and for Debian's
	# Python (which pip may not install into) in a directory of its own.
	local deps113="${torch_venv%/*}/python3-deps"
	if ! /usr/bin/python3 -c 'import expecttest' 2>/dev/null && ! PYTHONPATH="$deps113" /usr/bin/python3 -c 'import expecttest' 2>/dev/null; then
		/usr/bin/python3 -m pip install -q --disable-pip-version-check --target "$deps113" expecttest ||
			echo "could not install expecttest for /usr/bin/python3 (no route to PyPI?): test_torch_harness will fail"
	fi
	PYTHONPATH="$deps113${PYTHONPATH:+:$PYTHONPATH}" python_tests 1.13 /usr/bin/python3 || rc=1
	if [[ -f "$out/torch-venv.lock" ]]; then
		flock "$out/torch-venv.lock" true # the environment's job has ended
		cat "$out/torch-venv.log"
	fi
	if ! "$torch_venv/bin/python" -c 'import expecttest' 2>/dev/null; then
		"$torch_venv/bin/python" -m pip install -q --disable-pip-version-check expecttest ||
			echo "could not install expecttest into $torch_venv (no route to PyPI?): test_torch_harness will fail"
	fi
	python_tests 2 "$torch_venv/bin/python" || rc=1
	return $rc
}

# python_tests NAME PYTHON: the tests on PYTHON's torch, reported as NAME.
python_tests() {
	local name=$1 py=$2 rc
	if ! "$py" -c 'import torch, pytest' >/dev/null 2>&1; then
		echo "torch $name: $py has no torch or pytest (see torch-venv.log beside this log)"
		return 1
	fi
	echo "torch $name: $("$py" -c 'import torch; print(torch.__version__)') ($py)"
	SWITCHML_LIBRARY="$out/lib/libswitchml.so" SWITCHML_BINARY="$out/bin/switchml" "$py" -m pytest -q -rs -p no:cacheprovider \
		--junitxml="$out/python-$name.xml" --junit-prefix="torch-$name" python/tests
	rc=$?
	"$out/bin/testreport" junit "$out/python-$name.xml" "$out/python.torch-$name.results.json" || rc=1
	return $rc
}

run_trainers() {
	local setup
	setup=$(trainers/setup.sh) || return
	eval "$setup"
	(cd trainers && go vet ./... && go run "$staticcheck" ./... && gotest trainers -count=1 -timeout 30m ./...)
}

stage setup run_setup
if [[ ! -x "$out/bin/testreport" ]]; then
	echo "== the set-up did not build the test reporter; see $out/setup.log"
	exit 1
fi
(stage race run_race) &
lane_race=$!
(
	# The torch 2.x environment is made (once: minutes of download) beside
	# the stages before the python stage, which waits for it: its job holds
	# a lock on $out/torch-venv.lock until it ends, and its log is
	# $out/torch-venv.log.
	if selected python; then
		exec 9>"$out/torch-venv.lock"
		flock 9
		torch_venv_ready >"$out/torch-venv.log" 2>&1 &
		exec 9>&-
	fi
	stage lint run_lint
	stage sim run_sim
	stage alloc run_alloc
	stage memory run_memory
	stage fuzz run_fuzz
	stage capi run_capi
	stage python run_python
	if [[ "${SWITCHML_SKIP_TRAINERS:-}" != 1 ]]; then
		stage trainers run_trainers
	fi
) &
lane_rest=$!
wait $lane_race $lane_rest

exec "$out/bin/testreport" summary "$out" "$(((${EPOCHREALTIME/./} - t_start) / 1000000))"
