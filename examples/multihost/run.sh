#!/usr/bin/env bash
# Training across hosts, on one machine: every worker is a network namespace
# (its own "host", with its own address), cabled by a veth pair to a bridge
# in a switch namespace, where the software switch and the controller run.
# Each worker runs one `train --rank R`, as a host of a real cluster would.
#
# The Fashion-MNIST CNN trains for EPOCHS epochs with each backend of
# BACKENDS in turn: switchml (the ranks join through the controller) and
# ring (the ranks meet at --peers, one address per worker namespace).
# Every rank prints its own results; the script checks that all ranks
# finished with the same test accuracy.
#
# Usage, as root, from anywhere in the checkout:
#
#   examples/multihost/run.sh [WORKERS]
#
# WORKERS defaults to 2. Environment: EPOCHS (1), TRAIN_LIMIT and
# TEST_LIMIT (0 = the whole data set), BACKENDS ("switchml ring"), THREADS
# (TensorFlow threads per rank; default the cores shared out among the
# ranks, which all run on this machine), OUT (keep each rank's output
# there), TRAIN and SWITCHML (prebuilt binaries; default: built here, the
# trainers module through trainers/setup.sh).
set -euo pipefail

workers=${1:-2}
epochs=${EPOCHS:-1}
train_limit=${TRAIN_LIMIT:-0}
test_limit=${TEST_LIMIT:-0}
backends=${BACKENDS:-switchml ring}
threads=${THREADS:-$(($(nproc) / workers > 0 ? $(nproc) / workers : 1))}

if [[ $(id -u) -ne 0 ]]; then
	echo "run.sh: needs root (network namespaces)" >&2
	exit 1
fi
command -v ip >/dev/null || { echo "run.sh: needs ip (apt-get install iproute2)" >&2; exit 1; }
if ((workers < 1 || workers > 32)); then
	echo "run.sh: WORKERS=$workers: want 1 to 32" >&2
	exit 1
fi
if [[ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
	echo "run.sh: Fashion-MNIST is missing: apt-get install dataset-fashion-mnist" >&2
	exit 1
fi

cd "$(dirname "$0")/../.."
work=$(mktemp -d)
out=${OUT:-$work/out}
mkdir -p "$out"
# Names carry the process id, so two runs (or a run's leftovers) never meet.
tag="smh$$"
subnet=10.81.0
source examples/netns.sh

train=${TRAIN:-}
switchml=${SWITCHML:-}
if [[ -z "$switchml" ]]; then
	echo "== building switchml"
	go build -o "$work/switchml" ./cmd/switchml
	switchml=$work/switchml
fi
if [[ -z "$train" ]]; then
	echo "== building train (trainers/setup.sh prepares libtensorflow)"
	# The environment in a variable first: eval "$(./setup.sh)" would
	# succeed when setup.sh fails, and go build fail later for want of it.
	(cd trainers && tf_env=$(./setup.sh) && eval "$tf_env" && go build -o "$work/train" ./cmd/train) ||
		{ echo "run.sh: stopped: building train failed (above: why)" >&2; exit 1; }
	train=$work/train
fi

echo "== a switch namespace and $workers worker namespaces on a bridge, $subnet.0/24"
netns_switch "$subnet.1/24"
peers=()
for ((w = 0; w < workers; w++)); do
	netns_worker "$w"
	netns_link "$w" eth0 "$subnet.$((10 + w))/24" "p$w" bridge
	peers+=("$subnet.$((10 + w)):29500")
done

echo "== the software switch and the controller in the switch namespace"
ip netns exec "$sw" "$switchml" switch --dataplane "$subnet.1:48864" --p4rt 127.0.0.1:9559 >"$work/switch.log" 2>&1 &
pids+=($!)
# --allow-open-jobs: the namespaces are this run's own, and the trainers
# join without a token.
ip netns exec "$sw" "$switchml" controller --target 127.0.0.1:9559 --listen "$subnet.1:50051" --allow-open-jobs \
	--dataplane "$subnet.1:48864" >"$work/controller.log" 2>&1 &
pids+=($!)
netns_wait_controller "$switchml" "$subnet.1:50051" "$work/controller.log" "$work/switch.log"

status=0
for backend in $backends; do
	case $backend in
	switchml) meet=(--controller "$subnet.1:50051" --job "multihost-$$") ;;
	ring | exact) meet=(--peers "$(IFS=,; echo "${peers[*]}")") ;;
	*)
		echo "run.sh: unknown backend $backend (want switchml, ring or exact)" >&2
		exit 1
		;;
	esac
	echo "== $backend: $workers ranks, one per worker namespace, $epochs epoch(s) of the CNN on Fashion-MNIST"
	ranks=()
	for ((w = 0; w < workers; w++)); do
		ip netns exec "${tag}w$w" "$train" --rank "$w" --workers "$workers" --backend "$backend" "${meet[@]}" \
			--model cnn --dataset fashion-mnist --epochs "$epochs" --train-limit "$train_limit" --test-limit "$test_limit" \
			--intra-op-threads "$threads" --join-timeout 2m --json --quiet \
			>"$out/$backend-rank$w.jsonl" 2>"$out/$backend-rank$w.log" &
		ranks+=($!)
		pids+=($!)
	done
	failed=0
	for p in "${ranks[@]}"; do wait "$p" || failed=1; done
	if ((failed)); then
		echo "run.sh: $backend: a rank failed:" >&2
		tail -n 5 "$out/$backend"-rank*.log >&2
		status=1
		continue
	fi
	accuracies=$(for ((w = 0; w < workers; w++)); do
		# A rank without the figure counts as a different accuracy below,
		# rather than a silent stop of set -e.
		tail -n 1 "$out/$backend-rank$w.jsonl" | { grep -o '"test_accuracy":[^,}]*' || echo '"test_accuracy":none'; } | cut -d: -f2
	done | sort -u)
	if [[ $(wc -l <<<"$accuracies") -ne 1 || -z "$accuracies" || $accuracies == none ]]; then
		echo "run.sh: $backend: the ranks finished with different test accuracies (none: no accuracy in a rank's last line):" $accuracies >&2
		status=1
		continue
	fi
	echo "$backend: all $workers ranks finished, test accuracy $accuracies on every rank"
done
exit $status
