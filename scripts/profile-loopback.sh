#!/usr/bin/env bash
# Where a SwitchML job's CPU goes on one machine: runs a software switch, a
# controller and WORKERS worker processes on loopback, each with a CPU
# profile, then prints the top consumers of worker 0 (the allreduce loop
# only: the test input's generation is left out) and of the switch, and
# the CPU each spent per allreduce.
#
#   scripts/profile-loopback.sh [--workers N] [--elements N] [--iters N] [--transport udp|shm] [--perf] [--out DIR] [-- allreduce flags...]
#
# --transport applies to the switch and the workers alike. --perf also runs
# worker 0 under `perf record` (Linux perf, root) and prints its top
# symbols, the kernel's included, as shares of the samples outside input
# generation, and its system calls per allreduce.
#
# Example (8 KiB payloads, one lane):
#   scripts/profile-loopback.sh -- --packet-elements 2048 --extended --lanes 1
set -euo pipefail
cd "$(dirname "$0")/.."

workers=4 elements=16777216 iters=8 out="" top=5 transport=udp perf=0
while [[ $# -gt 0 ]]; do
	case "$1" in
	--workers) workers=$2; shift 2 ;;
	--elements) elements=$2; shift 2 ;;
	--iters) iters=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--transport) transport=$2; shift 2 ;;
	--top) top=$2; shift 2 ;;
	--perf) perf=1; shift ;;
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
if [[ $perf == 1 ]] && ! command -v perf >/dev/null; then
	echo "profile-loopback.sh: --perf needs Linux perf (apt-get install linux-perf)" >&2
	exit 2
fi
for ((r = 0; r < workers; r++)); do
	pre=()
	if [[ $perf == 1 && $r == 0 ]]; then
		sc=read,write,futex,nanosleep,epoll_pwait,recvmmsg,sendmmsg,sched_yield
		pre=(perf record -q -F 2000 -e cpu-clock -o "$out/worker0.perf" -- perf stat -x, -o "$out/worker0.syscalls" -e "syscalls:sys_enter_${sc//,/,syscalls:sys_enter_}" --)
	fi
	"${pre[@]}" "$bin" allreduce --controller "127.0.0.1:$ctl" --job profile --rank "$r" --workers "$workers" \
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
if [[ $perf == 1 ]]; then
	echo
	echo "== worker 0 under perf: top $top symbols outside input generation, share of those samples"
	perf report -i "$out/worker0.perf" --comms switchml --no-children --sort sym 2>/dev/null |
		python3 -c '
import re, sys
top = int(sys.argv[1])
rows = []
for line in sys.stdin:
    m = re.match(r"\s*([0-9.]+)%\s+\[(.)\]\s+(.*\S)", line)
    if m and not re.search(r"main\.(fillInput|genFloat32|splitmix|elementHash)", m.group(3)):
        rows.append((float(m.group(1)), m.group(2), m.group(3)))
total = sum(r[0] for r in rows) or 1
kinds = {"k": "kernel"}
for pct, kind, sym in rows[:top]:
    print("  %5.1f%%  %s  %s" % (100 * pct / total, kinds.get(kind, "user  "), sym))
' "$top"
	echo
	echo "== worker 0: system calls per allreduce (warm-up included; input generation makes almost none)"
	python3 -c '
import sys
calls = int(sys.argv[2])
rows = []
for line in open(sys.argv[1]):
    f = line.strip().split(",")
    if len(f) > 2 and f[0].isdigit() and "sys_enter_" in f[2]:
        rows.append((int(f[0]), f[2].split("sys_enter_")[1]))
for k, name in sorted(rows, reverse=True):
    print("  %9.0f  %s" % (k / calls, name))
' "$out/worker0.syscalls" "$((iters + 1))"
fi
echo
echo "profiles and logs: $out"
