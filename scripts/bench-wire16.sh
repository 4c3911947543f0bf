#!/usr/bin/env bash
# The 16-bit wire on the emulated rack, 8 workers, 200 Mbit/s, 64 MiB:
# PyTorch's bfloat16 all_reduce through the switchml backend against
# Gloo's, and float32 on the 16-bit wire against Gloo's float32. RUNS runs
# of each (5 unless told), interleaved so that what else the machine does
# weighs on both alike; each run a warm-up and 5 timed allreduces per
# system. Then the median over the runs of each speedup, with its spread,
# in benchmarks/results/wire16-{bf16,f32}/runs.md. As root, from the
# repository root, after the test set-up made the torch 2.x venv.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
py=${PY:-$HOME/.cache/switchml/torch-venv/bin/python} # a torch whose Gloo sums bfloat16
bin=$(mktemp -d)/switchml
go build -o "$bin" ./cmd/switchml
for i in $(seq 1 "$runs"); do
	for kind in bf16 f32; do
		case $kind in
		bf16) args=(--dtype bfloat16) ;;
		f32) args=(--dtype float32 --wire-bits 16) ;;
		esac
		echo "== run $i of $runs: $kind" >&2
		rm -rf "benchmarks/results/wire16-$kind/run$i"
		"$bin" bench --modes rack --sweeps workers --workers 8 --size 64MiB --rate 200 \
			--systems switchml,torch-switchml,gloo "${args[@]}" --python "$py" \
			--prefix smw --subnet 10.224.0.0/24 --name "wire16-$kind-run$i" --out "benchmarks/results/wire16-$kind/run$i"
	done
done
"$bin" bench --report-runs benchmarks/results/wire16-bf16
"$bin" bench --report-runs benchmarks/results/wire16-f32
