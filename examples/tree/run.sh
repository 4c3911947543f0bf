#!/usr/bin/env bash
# Two levels of switches on one machine: a spine and two leaf software
# switches, one controller programming all three from a topology file, and
# WORKERS workers split between the leaves. Each leaf aggregates its
# workers and sends the partial sums up to the spine; the spine's result
# comes back down through the leaves. Loopback addresses stand for hosts:
# the spine at 127.0.0.1, leaf k at 127.0.1+k.1, its workers at
# 127.0.1+k.10 and up (Linux routes all of 127/8 to lo).
#
# Every worker runs `switchml allreduce --dtype int32 --verify`: the sums
# are checked exactly. The script then prints each switch's counters.
#
# Usage, from anywhere in the checkout:
#
#   examples/tree/run.sh [WORKERS]
#
# WORKERS defaults to 8 (4 per leaf). Environment: ELEMENTS (1048576 per
# allreduce), ITERS (5), SWITCHML (a prebuilt binary; default: built here).
set -euo pipefail

workers=${1:-8}
elements=${ELEMENTS:-1048576}
iters=${ITERS:-5}
if ((workers < 2 || workers > 64)); then
	echo "run.sh: WORKERS=$workers: want 2 to 64 (one worker per leaf at least)" >&2
	exit 1
fi

cd "$(dirname "$0")/../.."
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

switchml=${SWITCHML:-}
if [[ -z "$switchml" ]]; then
	echo "== building switchml"
	go build -o "$work/switchml" ./cmd/switchml
	switchml=$work/switchml
fi

# Free ports, so that two runs never meet.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
spine_dp=127.0.0.1:$(port)
spine_p4=127.0.0.1:$(port)
ctl=127.0.0.1:$(port)
leaf_dp=(127.0.1.1:$(port) 127.0.2.1:$(port))
leaf_p4=(127.0.1.1:$(port) 127.0.2.1:$(port))

cat >"$work/topology.json" <<JSON
{"spine":  {"p4runtime": "$spine_p4", "dataplane": "$spine_dp"},
 "leaves": [{"p4runtime": "${leaf_p4[0]}", "dataplane": "${leaf_dp[0]}", "workers": ["127.0.1.0/24"]},
            {"p4runtime": "${leaf_p4[1]}", "dataplane": "${leaf_dp[1]}", "workers": ["127.0.2.0/24"]}]}
JSON

echo "== spine at $spine_dp, leaves at ${leaf_dp[*]}"
"$switchml" switch --dataplane "$spine_dp" --p4rt "$spine_p4" 2>"$work/spine.log" &
pids+=($!)
for k in 0 1; do
	"$switchml" switch --dataplane "${leaf_dp[$k]}" --p4rt "${leaf_p4[$k]}" --parent "$spine_dp" 2>"$work/leaf$k.log" &
	pids+=($!)
done
"$switchml" controller --topology "$work/topology.json" --listen "$ctl" --log-level warn 2>"$work/controller.log" &
pids+=($!)
if ! "$switchml" wait --controller "$ctl" --timeout 30s; then
	echo "run.sh: stopped: the controller did not come up; the logs:" >&2
	tail -n 20 "$work"/*.log >&2
	exit 1
fi

echo "== $workers workers, $iters allreduces of $elements int32 each, sums checked"
wpids=()
for ((r = 0; r < workers; r++)); do
	leaf=$((r * 2 / workers + 1))
	"$switchml" allreduce --controller "$ctl" --job tree --rank "$r" --workers "$workers" \
		--bind "127.0.$leaf.$((10 + r))" --elements "$elements" --dtype int32 --iters "$iters" --verify \
		>"$work/rank$r.out" 2>&1 &
	wpids+=($!)
done
failed=0
for r in "${!wpids[@]}"; do
	if ! wait "${wpids[$r]}"; then
		echo "rank $r failed:" >&2
		cat "$work/rank$r.out" >&2
		failed=1
	fi
done
((failed == 0)) || exit 1
tail -n 2 "$work/rank0.out"

# The switches log their counters when they stop.
for p in "${pids[@]}"; do kill "$p"; done
wait 2>/dev/null || true
pids=()
for f in spine leaf0 leaf1; do
	echo "== $f"
	# The pipeline's counters, from the pipeline="..." field of the line
	# the switch logs when it stops (its received= is outside it too).
	sed -n 's/.*msg="software switch stopped".* pipeline="\([^"]*\)".*/\1/p' "$work/$f.log" | tr ' ' '\n' |
		grep -E '^(received|multicast|upstream|from_parent)=' | tr '\n' ' ' || true
	echo
done
