#!/usr/bin/env bash
# Measures how long the other ranks of a job take to learn that one rank
# stopped, for each way a rank can stop, on loopback with the real binary:
#
#   ./scripts/stop-times.sh [RUNS]      (default 3 runs of each)
#
# Each scenario starts a fresh job of 3 ranks (many allreduces of 1M
# float32) on one software switch and controller, stops rank 1 once the
# job runs, and reports the seconds from the stop until every other rank
# has exited, with the first line of what rank 0 said. It ends with a
# table: scenario, runs, median, slowest.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
work=$(mktemp -d)
bin=$work/switchml
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$bin" ./cmd/switchml

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }

dp=127.0.0.1:$(free_port)
p4=127.0.0.1:$(free_port)
ctl=127.0.0.1:$(free_port)
"$bin" switch --dataplane "$dp" --p4rt "$p4" 2>"$work/switch.log" &
"$bin" controller --target "$p4" --listen "$ctl" --dataplane "$dp" 2>"$work/controller.log" &
"$bin" wait --controller "$ctl" --timeout 1m

# start_job NAME EXTRA...: starts ranks 0..2 (rank 1 may get other flags
# through R1_FLAGS) and waits until the controller has programmed the job.
start_job() {
	local name=$1
	shift
	for r in 0 1 2; do
		local extra=()
		if [[ $r == 1 && -n ${R1_FLAGS:-} ]]; then read -ra extra <<<"$R1_FLAGS"; fi
		"$bin" allreduce --controller "$ctl" --job "$name" --rank $r --workers 3 --elements 1000000 --iters 100000 \
			--lanes 2 --window 32 --verify=false "$@" "${extra[@]}" >/dev/null 2>"$work/$name.$r.log" &
		echo $! >"$work/$name.$r.pid"
	done
	if [[ -z ${NO_WAIT:-} ]]; then
		for _ in $(seq 600); do
			grep -q "job ready\" job=$name " "$work/controller.log" && break
			sleep 0.1
		done
		sleep 1
	fi
}

# wait_others NAME T0: seconds from T0 until ranks 0 and 2 have exited.
wait_others() {
	local name=$1 t0=$2
	for r in 0 2; do
		local pid
		pid=$(cat "$work/$name.$r.pid")
		while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
	done
	echo "$(now) - $t0" | bc
}

declare -A times
record() { # scenario seconds
	times[$1]+="$2 "
	printf '%-28s %6.2f s  rank 0: %s\n' "$1" "$2" "$(head -c 200 "$work/$3.0.log" | head -1)" >&2
}

for i in $(seq "$runs"); do
	name=sigint$i
	start_job "$name"
	t0=$(now)
	kill -INT "$(cat "$work/$name.1.pid")"
	record "SIGINT to rank 1" "$(wait_others "$name" "$t0")" "$name"

	name=sigkill$i
	start_job "$name"
	t0=$(now)
	kill -KILL "$(cat "$work/$name.1.pid")"
	record "SIGKILL to rank 1" "$(wait_others "$name" "$t0")" "$name"

	name=sigstop$i
	start_job "$name" --give-up 8s
	t0=$(now)
	kill -STOP "$(cat "$work/$name.1.pid")"
	record "SIGSTOP to rank 1 (give-up 8s)" "$(wait_others "$name" "$t0")" "$name"
	kill -CONT "$(cat "$work/$name.1.pid")" 2>/dev/null || true

	name=workers$i
	t0=$(now)
	R1_FLAGS="--workers 4" NO_WAIT=1 start_job "$name"
	record "rank 1 with --workers 4" "$(wait_others "$name" "$t0")" "$name"

	t0=$(now)
	"$bin" allreduce --controller 127.0.0.1:$(free_port) --job nobody --workers 2 2>"$work/nobody$i.0.log" || true
	record "no controller at the address" "$(echo "$(now) - $t0" | bc)" "nobody$i"
done

printf '\n| how rank 1 stops | runs | median | slowest |\n|---|---|---|---|\n'
for k in "SIGINT to rank 1" "SIGKILL to rank 1" "SIGSTOP to rank 1 (give-up 8s)" "rank 1 with --workers 4" "no controller at the address"; do
	read -ra v <<<"${times[$k]}"
	sorted=$(printf '%s\n' "${v[@]}" | sort -g)
	median=$(echo "$sorted" | sed -n "$(((${#v[@]} + 1) / 2))p")
	slowest=$(echo "$sorted" | tail -1)
	printf '| %s | %d | %.2f s | %.2f s |\n' "$k" "${#v[@]}" "$median" "$slowest"
done
