#!/usr/bin/env bash
# A SwitchML job through BMv2 running the compiled v1model program.
#
# Each worker is a network namespace whose eth0 is cabled (a veth pair) to a
# BMv2 port; BMv2, the controller and a management bridge (the workers'
# path to the controller's job service) share one more namespace. The
# controller pushes the program to BMv2 over P4Runtime and programs each job.
#
# Usage, as root, from anywhere in the checkout (the P4 toolchain must be in
# ../shared/tools/p4 beside it, or SWITCHML_P4_TOOLS must name it):
#
#   examples/bmv2/run.sh [WORKERS] [ELEMENTS] [DTYPE]
#
# WORKERS defaults to 3, ELEMENTS to 65536, DTYPE to float32 (int32,
# float16, bfloat16). LOSS=P makes the switch drop that fraction of
# contributions on arrival and of result copies on departure. Each rank
# prints its median time, its retransmissions and whether its result
# matched the exact sum.
set -euo pipefail

workers=${1:-3}
elements=${2:-65536}
dtype=${3:-float32}
loss=${LOSS:-0}
iters=${ITERS:-5}

if [[ $(id -u) -ne 0 ]]; then
	echo "run.sh: needs root (network namespaces)" >&2
	exit 1
fi
for tool in ip ethtool go; do
	command -v "$tool" >/dev/null || { echo "run.sh: needs $tool (apt-get install iproute2 ethtool; Go from go.dev)" >&2; exit 1; }
done
if ((workers < 1 || workers > 32)); then
	echo "run.sh: WORKERS=$workers: the program takes 1 to 32 workers" >&2
	exit 1
fi

cd "$(dirname "$0")/../.."
work=$(mktemp -d)
tag="smx$$"
source examples/netns.sh

echo "== building switchml and compiling p4/v1model/switchml.p4 with p4c"
go build -o "$work/switchml" ./cmd/switchml
# Not eval "$(...)": eval of a failed substitution succeeds, and set -e
# would run on without the toolchain. A plain assignment fails with it.
p4env=$("$work/switchml" p4tools) || { echo "run.sh: stopped: the P4 toolchain is missing (above: what was looked for)" >&2; exit 1; }
eval "$p4env"
p4c-bm2-ss --arch v1model --std p4-16 -o "$work/switchml.json" p4/v1model/switchml.p4

echo "== $workers worker namespaces, each cabled to a BMv2 port"
netns_switch 10.79.0.1/24
ports=()
: >"$work/ports.txt"
for ((w = 0; w < workers; w++)); do
	ns="${tag}w$w"
	netns_worker "$w"
	netns_link "$w" eth0 "10.78.0.$((10 + w))/24" "d$w"
	# BMv2 reads frames as the kernel hands them to the veth: without this a
	# segmentation-offloaded run of datagrams reaches it as one frame.
	ip netns exec "$ns" ethtool -K eth0 tx-udp-segmentation off >/dev/null
	netns_link "$w" mgmt0 "10.79.0.$((10 + w))/24" "m$w" bridge
	ports+=(-i "$((w + 1))@d$w")
	echo "10.78.0.$((10 + w)) $((w + 1))" >>"$work/ports.txt"
done

echo "== simple_switch_grpc (no program yet) and the controller"
ip netns exec "$sw" simple_switch_grpc --device-id 1 --no-p4 --thrift-port 9090 "${ports[@]}" \
	-- --grpc-server-addr 127.0.0.1:9559 >"$work/bmv2.log" 2>&1 &
pids+=($!)
# --allow-open-jobs: the namespaces are this run's own, and its workers
# join without a token.
ip netns exec "$sw" "$work/switchml" controller --target 127.0.0.1:9559 --target-kind bmv2 \
	--device-config "$work/switchml.json" --port-map "$work/ports.txt" \
	--dataplane 10.78.0.254:48864 --switch-mac 02:53:4d:4c:00:fe --listen 10.79.0.1:50051 --allow-open-jobs \
	--allow-lane-address-mismatch \
	--simulate-loss-in "$loss" --simulate-loss-out "$loss" >"$work/controller.log" 2>&1 &
pids+=($!)
netns_wait_controller "$work/switchml" 10.79.0.1:50051 "$work/controller.log" "$work/bmv2.log"

echo "== $workers workers x $elements $dtype, $iters allreduces, loss $loss each way"
ranks=()
for ((w = 0; w < workers; w++)); do
	ip netns exec "${tag}w$w" "$work/switchml" allreduce --controller 10.79.0.1:50051 --bind "10.78.0.$((10 + w))" \
		--job bmv2-example --rank "$w" --workers "$workers" --elements "$elements" --dtype "$dtype" \
		--iters "$iters" --lanes 2 --window 8 --timeout 40ms --give-up 60s &
	ranks+=($!)
done
status=0
for p in "${ranks[@]}"; do wait "$p" || status=1; done
if ((status != 0)); then
	echo "run.sh: a worker failed; controller log:" >&2
	cat "$work/controller.log" >&2
fi
exit $status
