#!/usr/bin/env bash
# One point of the benchmark suite, run by the switchml of two commits in
# turn (A B A B ...), so that a change that should not move the figures can
# be shown not to: each run is a suite run of its own (warm-up and --iters
# timed allreduces, its summary.md and results.json) in
# benchmarks/results/NAME/{before,after}-N. Run from the repository.
#
#   scripts/bench-commits.sh OLD NEW NAME [ROUNDS] -- [switchml bench flags]
#
# e.g. scripts/bench-commits.sh 80ee56d HEAD house2-loopback 3 -- --modes loopback \
#        --sweeps loopback --loopback-size 64MiB --packet-elements 2048 --window 16 --systems switchml
set -euo pipefail
if (($# < 4)); then
	echo "usage: $0 OLD NEW NAME [ROUNDS] -- [switchml bench flags]" >&2
	exit 2
fi
old=$1 new=$2 name=$3
shift 3
rounds=3
if [[ $1 != -- ]]; then
	rounds=$1
	shift
fi
[[ $1 == -- ]] || { echo "$0: want -- before the bench flags" >&2; exit 2; }
shift
repo=$(pwd)
dir=$(mktemp -d)
trap 'git worktree remove --force "$dir/old" 2>/dev/null; git worktree remove --force "$dir/new" 2>/dev/null; rm -rf "$dir"' EXIT
for side in old new; do
	rev=${!side}
	git worktree add -q --detach "$dir/$side" "$rev"
	(cd "$dir/$side" && go build -o "$dir/switchml-$side" ./cmd/switchml)
	echo "== $side: $(git rev-parse --short "$rev")"
done
rm -rf "benchmarks/results/$name"
for ((i = 1; i <= rounds; i++)); do
	for side in old new; do
		label=before
		[[ $side == new ]] && label=after
		out=benchmarks/results/$name/$label-$i
		echo "== round $i of $rounds: $label ($out)"
		# From the side's own checkout: a system that builds from the
		# checkout (torch-switchml's libswitchml.so and Python package)
		# runs that commit's code.
		(cd "$dir/$side" && "$dir/switchml-$side" bench --name "$name/$label-$i" --out "$repo/$out" "$@" >/dev/null)
		grep -E '^\| (SwitchML|Ring|Gloo|rack|loopback)' "$out/summary.md" | head -3 || true # a summary may hold none of these rows
	done
done
# The medians of the runs' medians, and their spread, per side and point
# (results.json: each result's median TAT).
{
	echo "before: $(git rev-parse "$old"), after: $(git rev-parse "$new"); switchml bench $*"
	echo "TAT (s): median of the $rounds runs' medians (min-max of those medians)"
} | tee "benchmarks/results/$name/tat.txt"
{
python3 - "$name" <<'PY'
import glob, json, statistics, sys
name = sys.argv[1]
for side in ("before", "after"):
    tats = {}
    for path in sorted(glob.glob("benchmarks/results/%s/%s-*/results.json" % (name, side))):
        for r in json.load(open(path))["results"]:
            if r.get("error") or not r.get("median_tat_s"):
                continue
            point = "%s %s n=%d %dB" % (r["mode"], r["system"], r["workers"], r["bytes"])
            tats.setdefault(point, []).append(r["median_tat_s"])
    for point, v in tats.items():
        print("%-7s %-40s %.3f (%.3f-%.3f, %d runs)" % (side, point, statistics.median(v), min(v), max(v), len(v)))
PY
} | tee -a "benchmarks/results/$name/tat.txt"
