#!/usr/bin/env bash
# Measures the software switch's data-plane shards on loopback. Two
# switches with their controllers run side by side, one with one shard and
# one with SHARDS shards; jobs of WORKERS ranks alternate between them
# (REPS times each), each WARMUP untimed and ITERS timed allreduces of
# ELEMENTS int32 (no verification: the workers' CPU goes to the allreduce),
# 1 KiB payloads (256 values), the library's 4 lanes of 64 slots. A
# repetition's time is its slowest rank's. Around every job the script
# reads the switch process's CPU time (/proc/PID/stat) and its packet
# counters (--metrics), so the cost per packet and per element covers the
# job's whole run, warm-up and join included.
#
# Prints per arm: the median TAT, elements/s (ELEMENTS / TAT: the vector
# rate every worker sees; the switch adds WORKERS times as many), the
# switch's CPU per packet received and per element aggregated, its share of
# a core while the job ran, the workers' CPU, how busy the machine's CPUs
# were and its load average.
#
#   scripts/shards-bench.sh            # WORKERS=8 ELEMENTS=4194304 ITERS=10 WARMUP=2 REPS=5 SHARDS=2
set -euo pipefail
cd "$(dirname "$0")/.."
W=${WORKERS:-8} E=${ELEMENTS:-4194304} IT=${ITERS:-10} WU=${WARMUP:-2} REP=${REPS:-5} N=${SHARDS:-2}
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
go build -o "$dir/switchml" ./cmd/switchml
B=$dir/switchml
port() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A sw ctl met
for arm in 1 "$N"; do
	dps=()
	for k in $(seq 1 "$arm"); do dps+=(127.0.0.1:$(port)); done
	list=$(IFS=,; echo "${dps[*]}")
	rt=127.0.0.1:$(port) ctl[$arm]=127.0.0.1:$(port) met[$arm]=127.0.0.1:$(port)
	"$B" switch --shards "$arm" --dataplane "$list" --p4rt "$rt" --metrics "${met[$arm]}" 2>"$dir/sw$arm.log" &
	sw[$arm]=$!
	"$B" controller --target "$rt" --listen "${ctl[$arm]}" --dataplane "$list" 2>"$dir/ctl$arm.log" &
	"$B" wait --controller "${ctl[$arm]}" --timeout 1m
done
snap() { # arm: switch cpu ticks, received, sent, machine busy and total ticks
	local pid=${sw[$1]}
	awk '{print $14+$15}' "/proc/$pid/stat"
	curl -s "http://${met[$1]}/metrics" | awk '/^switchml_switch_(received|sent)_packets_total/ {print $2}'
	awk '/^cpu / {t=0; for (i=2; i<=NF; i++) t+=$i; print t-$5-$6, t}' /proc/stat | tr ' ' '\n'
}
for rep in $(seq 1 "$REP"); do
	for arm in 1 "$N"; do
		before=$(snap "$arm" | tr '\n' ' ')
		start=$(date +%s.%N)
		pids=()
		for r in $(seq 0 $((W - 1))); do
			"$B" allreduce --controller "${ctl[$arm]}" --job "s$arm-$rep" --rank "$r" --workers "$W" --elements "$E" --dtype int32 \
				--packet-elements 256 --iters "$IT" --warmup "$WU" --verify=false --json >"$dir/s$arm-$rep-$r.out" 2>"$dir/s$arm-$rep-$r.log" &
			pids+=($!)
		done
		wait "${pids[@]}"
		end=$(date +%s.%N)
		after=$(snap "$arm" | tr '\n' ' ')
		echo "$arm $rep $before $after $start $end $(cut -d' ' -f1 /proc/loadavg)" >>"$dir/snaps"
	done
done
python3 - "$dir" "$(getconf CLK_TCK)" "$E" "$W" <<'PY'
import glob, json, os, statistics as st, sys
d, tck, E, W = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tats, cost, wcpu = {}, {}, {}
for f in glob.glob(os.path.join(d, "s*-*-*.out")):
    arm, rep, rank = os.path.basename(f)[1:-4].split("-")
    r = json.load(open(f))
    tats.setdefault(int(arm), {}).setdefault(int(rep), []).append(r["tat_s"])
    wcpu[int(arm)] = wcpu.get(int(arm), 0) + r["cpu_user_s"] + r["cpu_sys_s"]
for line in open(os.path.join(d, "snaps")):
    arm, rep, c0, r0, s0, b0, a0, c1, r1, s1, b1, a1, t0, t1, load = line.split()
    cpu = (int(c1) - int(c0)) / tck
    rx, tx = float(r1) - float(r0), float(s1) - float(s0)
    busy = (int(b1) - int(b0)) / max(1, int(a1) - int(a0))
    cost.setdefault(int(arm), []).append((cpu, rx, tx, float(t1) - float(t0), float(load), busy))
med = {}
for arm in sorted(tats):
    slowest = [max(t) for rep in sorted(tats[arm]) for t in zip(*tats[arm][rep])]
    per_rep = [st.median([max(t) for t in zip(*tats[arm][rep])]) for rep in sorted(tats[arm])]
    med[arm] = st.median(slowest)
    cpu = sum(c[0] for c in cost[arm]); rx = sum(c[1] for c in cost[arm]); tx = sum(c[2] for c in cost[arm])
    wall = sum(c[3] for c in cost[arm])
    elems = rx * 256  # every datagram in carries 256 values
    print(f"shards={arm}: median TAT {med[arm]*1e3:.1f} ms over {len(slowest)} allreduces, {E/med[arm]/1e6:.1f} M elements/s "
          f"(switch aggregates {W*E/med[arm]/1e6:.0f} M/s); per repetition (ms) {[round(m*1e3, 1) for m in per_rep]}")
    print(f"   switch: {cpu:.2f} CPU s for {rx/1e6:.2f} M packets in, {tx/1e6:.2f} M out: {cpu/rx*1e9:.0f} ns per packet in, "
          f"{cpu/elems*1e9:.2f} ns per element; {cpu/wall:.2f} cores while the jobs ran; load {[c[4] for c in cost[arm]]}")
    print(f"   workers: {wcpu[arm]:.2f} CPU s ({wcpu[arm]/wall:.2f} cores); machine busy {[round(c[5], 2) for c in cost[arm]]} of its CPUs")
arms = sorted(tats)
print(f"TAT shards=1 / shards={arms[-1]}: {med[arms[0]]/med[arms[-1]]:.3f}")
PY
