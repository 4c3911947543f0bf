#!/usr/bin/env bash
# TAT of a 4-worker allreduce of 1 Mi float32 values (4 MiB) on loopback,
# on the switch and over the ring a job falls back to when the switch has no
# room (a 16-slot pool), each rank 2 warm-up and 10 timed calls with
# --fallback ring; prints each rank's JSON report. Run from the repository.
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/switchml" ./cmd/switchml
B=$dir/switchml
run() { # $1 label, $2 slots
	$B switch --dataplane 127.0.0.1:48870 --p4rt 127.0.0.1:9570 --slots "$2" >"$dir/sw-$1.log" 2>&1 &
	local sw=$!
	$B controller --target 127.0.0.1:9570 --listen 127.0.0.1:50070 --dataplane 127.0.0.1:48870 --slots "$2" >"$dir/ctl-$1.log" 2>&1 &
	local ctl=$!
	$B wait --controller 127.0.0.1:50070 >/dev/null
	local pids=()
	for r in 0 1 2 3; do
		$B allreduce --controller 127.0.0.1:50070 --job "tat-$1" --workers 4 --rank "$r" --elements 1048576 --dtype float32 \
			--warmup 2 --iters 10 --fallback ring --json >"$dir/w-$1-$r.json" 2>"$dir/w-$1-$r.err" &
		pids+=($!)
	done
	wait "${pids[@]}"
	kill "$ctl" "$sw"
	wait "$ctl" "$sw" 2>/dev/null || true
	for r in 0 1 2 3; do echo "$1 rank $r: $(cat "$dir/w-$1-$r.json")"; done
}
run switch 8192
run ring 16
