#!/usr/bin/env bash
# Measures what metrics and tracing cost an allreduce on loopback. Two
# software switches with their controllers run side by side: a plain pair,
# and a pair serving --metrics. Jobs alternate between them: plain workers
# on the first pair, and workers with --metrics and --trace on the second,
# every endpoint of the second pair and of its workers scraped each second.
# Each job is WARMUP untimed and ITERS timed allreduces of ELEMENTS float32
# (no verification, so the timings are the allreduce's alone); a
# repetition's time is its slowest rank's. Prints the median TAT of each
# arm, the median of the paired ratios, and the difference.
#
#   scripts/observe-overhead.sh                 # WORKERS=2 ELEMENTS=4000000 ITERS=10 WARMUP=2 REPS=8
set -euo pipefail
cd "$(dirname "$0")/.."
W=${WORKERS:-2} E=${ELEMENTS:-4000000} IT=${ITERS:-10} WU=${WARMUP:-2} REP=${REPS:-8}
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
go build -o "$dir/switchml" ./cmd/switchml
B=$dir/switchml
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dpP=127.0.0.1:$(port) dpM=127.0.0.1:$(port) rtP=127.0.0.1:$(port) rtM=127.0.0.1:$(port)
ctlP=127.0.0.1:$(port) ctlM=127.0.0.1:$(port)
scrape=(127.0.0.1:$(port) 127.0.0.1:$(port))
workerM=()
for r in $(seq 0 $((W - 1))); do workerM+=(127.0.0.1:$(port)); done
"$B" switch --dataplane $dpP --p4rt $rtP 2>"$dir/swP.log" &
"$B" switch --dataplane $dpM --p4rt $rtM --metrics ${scrape[0]} 2>"$dir/swM.log" &
"$B" controller --target $rtP --listen $ctlP --dataplane $dpP 2>"$dir/ctlP.log" &
"$B" controller --target $rtM --listen $ctlM --dataplane $dpM --metrics ${scrape[1]} 2>"$dir/ctlM.log" &
while true; do
	for a in "${scrape[@]}" "${workerM[@]}"; do curl -s -o /dev/null "http://$a/metrics" || true; done
	sleep 1
done &
for rep in $(seq 1 "$REP"); do
	for arm in plain observed; do
		pids=()
		for r in $(seq 0 $((W - 1))); do
			args=(allreduce --job "$arm$rep" --rank "$r" --workers "$W" --elements "$E" --iters "$IT" --warmup "$WU" --verify=false --json)
			if [[ $arm == plain ]]; then
				args+=(--controller "$ctlP")
			else
				args+=(--controller "$ctlM" --metrics "${workerM[$r]}" --trace "$dir/trace-$rep-$r.json")
			fi
			"$B" "${args[@]}" >"$dir/$arm-$rep-$r.out" 2>"$dir/$arm-$rep-$r.log" &
			pids+=($!)
		done
		wait "${pids[@]}"
	done
done
python3 - "$dir" <<'PY'
import glob, json, os, statistics as st, sys
arms = {}
for f in glob.glob(os.path.join(sys.argv[1], "*-*-*.out")):
    arm, rep, rank = os.path.basename(f)[:-4].split("-")
    arms.setdefault(arm, {}).setdefault(int(rep), []).append(json.load(open(f))["tat_s"])
med, per = {}, {}
for arm, reps in arms.items():
    tats = []
    for rep, ranks in sorted(reps.items()):
        slowest = [max(t) for t in zip(*ranks)]
        tats += slowest
        per.setdefault(arm, []).append(st.median(slowest))
    med[arm] = st.median(tats)
    print(f"{arm:9s} median TAT {med[arm]*1e3:8.2f} ms over {len(tats)} allreduces; per repetition (ms): {[round(m*1e3, 2) for m in per[arm]]}")
ratios = [o / p for o, p in zip(per["observed"], per["plain"])]
print(f"observed/plain: medians {med['observed']/med['plain']:.4f}, median of paired repetitions {st.median(ratios):.4f}")
PY
