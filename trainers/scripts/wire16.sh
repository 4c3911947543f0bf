#!/usr/bin/env bash
# Trains the Fashion-MNIST CNN with 4 workers for 5 epochs from the same
# seed over the exact float64 sum, SwitchML at 32 bits and SwitchML at 16
# bits a value (--wire-bits 16), as results/README.md trained the exact,
# ring and switchml curves, and writes the curves, the plot and the table
# of final accuracies into results/wire16/. From trainers/:
#
#	eval "$(./setup.sh)" && scripts/wire16.sh          # seed 1
#	SEEDS="1 2 3" scripts/wire16.sh                    # more seeds
#
# A run whose file is there already is kept (remove it to train again); the
# table and the plot are made again from every run of SEEDS.
# The switchml runs start an in-process software switch and controller
# (no --controller). Step times on a shared machine are noisy: the figure
# is the accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/wire16
mkdir -p "$out"
go build -o /tmp/switchml-train ./cmd/train
common=(--model cnn --dataset fashion-mnist --workers 4 --epochs 5 --json --quiet)
runs=()
for seed in ${SEEDS:-1}; do
	for spec in exact: switchml: switchml-wire16:--wire-bits=16; do
		name=${spec%%:*}
		extra=${spec#*:}
		backend=${name%-wire16}
		file=$out/$name-seed$seed.jsonl
		runs+=("$file")
		if [[ -s $file ]]; then
			echo "== $name, seed $seed: kept $file" >&2
			continue
		fi
		echo "== $name, seed $seed -> $file" >&2
		/tmp/switchml-train "${common[@]}" --backend "$backend" --seed "$seed" $extra >"$file.tmp"
		mv "$file.tmp" "$file"
	done
done
go build -o /tmp/switchml-plotcurves ./cmd/plotcurves
/tmp/switchml-plotcurves --out "$out/cnn-4workers.png" --title "CNN on Fashion-MNIST, 4 workers: the 16-bit wire" \
	--table "$out/summary.md" --reference exact "${runs[@]}"
