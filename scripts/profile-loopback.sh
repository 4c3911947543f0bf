#!/usr/bin/env bash
# Where a SwitchML job's CPU goes on one machine: runs a software switch, a
# controller and WORKERS worker processes on loopback, each with a CPU
# profile, then prints the top consumers of worker 0 (the allreduce loop
# only: the test input's generation is left out) and of the switch, and
# the CPU each spent per allreduce.
#
#   scripts/profile-loopback.sh [--workers N] [--elements N] [--iters N] [--transport udp|shm] [--out DIR] [-- allreduce flags...]
#
# --transport applies to the switch and the workers alike.
#
# Example (8 KiB payloads, one lane):
#   scripts/profile-loopback.sh -- --packet-elements 2048 --extended --lanes 1
set -euo pipefail
cd "$(dirname "$0")/.."

workers=4 elements=16777216 iters=8 out="" top=5 transport=udp
while [[ $# -gt 0 ]]; do
	case "$1" in
	--workers) workers=$2; shift 2 ;;
	--elements) elements=$2; shift 2 ;;
	--iters) iters=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--transport) transport=$2; shift 2 ;;
	--top) top=$2; shift 2 ;;
	--) shift; break ;;
	*) echo "profile-loopback.sh: unknown flag $1 (see the header of this script)" >&2; exit 2 ;;
	esac
done
out=${out:-$(mktemp -d /tmp/switchml-profile.XXXXXX)}
mkdir -p "$out"
bin="$out/switchml"
go build -o "$bin" ./cmd/switchml

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dp=$(port) p4rt=$(port) ctl=$(port)
"$bin" switch --dataplane "127.0.0.1:$dp" --p4rt "127.0.0.1:$p4rt" --max-elements 2048 --transport "$transport" --cpuprofile "$out/switch.prof" >"$out/switch.log" 2>&1 &
sw=$!
"$bin" controller --target "127.0.0.1:$p4rt" --listen "127.0.0.1:$ctl" --dataplane "127.0.0.1:$dp" --max-elements 2048 >"$out/controller.log" 2>&1 &
ct=$!
trap 'kill $sw $ct 2>/dev/null || true' EXIT
"$bin" wait --controller "127.0.0.1:$ctl" --timeout 30s >/dev/null

cpu0=$(awk '{print $14+$15}' /proc/$sw/stat)
pids=()
for ((r = 0; r < workers; r++)); do
	"$bin" allreduce --controller "127.0.0.1:$ctl" --job profile --rank "$r" --workers "$workers" \
		--elements "$elements" --iters "$iters" --warmup 1 --transport "$transport" --verify=false --json \
		--cpuprofile "$out/worker$r.prof" "$@" >"$out/worker$r.json" 2>"$out/worker$r.log" &
	pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
cpu1=$(awk '{print $14+$15}' /proc/$sw/stat)
kill -INT $sw $ct; wait $sw $ct 2>/dev/null || true
trap - EXIT
if [[ $status -ne 0 ]]; then
	echo "profile-loopback.sh: a worker failed; see $out/worker*.log" >&2
	exit 1
fi

python3 - "$out" "$workers" "$iters" "$cpu0" "$cpu1" "$(getconf CLK_TCK)" <<'PY'
import json, statistics, sys
out, n, iters, c0, c1, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
ws = [json.load(open(f"{out}/worker{r}.json")) for r in range(n)]
calls = iters + 1
cpu = sum(w["cpu_loop_user_s"] + w["cpu_loop_sys_s"] for w in ws) / calls
sys_ = sum(w["cpu_loop_sys_s"] for w in ws) / calls
tat = statistics.median(max(w["tat_s"][i] for w in ws) for i in range(iters))
gib = ws[0]["elements"] * 4 / 2**30
print(f"median TAT {tat:.3f} s; workers' CPU per allreduce {cpu:.3f} s (kernel {sys_:.3f} s), "
      f"{cpu / n / gib:.2f} CPU-s per GiB per worker; switch {(c1 - c0) / hz / calls:.3f} s per allreduce; "
      f"retransmissions {sum(w.get('retransmits', 0) for w in ws)}")
PY
echo
echo "== worker 0, the allreduce loop (input generation left out): top $top by own CPU"
go tool pprof -top -nodecount="$top" -ignore 'main.fillInput|main.genFloat32' "$bin" "$out/worker0.prof" 2>/dev/null | sed -n '/flat%/,$p'
echo
echo "== switch: top $top by own CPU"
go tool pprof -top -nodecount="$top" "$bin" "$out/switch.prof" 2>/dev/null | sed -n '/flat%/,$p'
echo
echo "profiles and logs: $out"
