# Shell helpers of the example scripts that stand hosts in for network
# namespaces. Source it after setting:
#   tag      the prefix of every namespace and interface (keep it short and
#            unique to the run, e.g. with the process id)
#   workers  how many worker namespaces (named ${tag}w0, ${tag}w1, ...)
#   work     a scratch directory, removed at exit
# It names the switch's namespace $sw, keeps background processes in $pids,
# and removes namespaces, processes and $work at exit.

sw="${tag}s"
pids=()

netns_cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for ((w = 0; w < workers; w++)); do ip netns del "${tag}w$w" 2>/dev/null || true; done
	ip netns del "$sw" 2>/dev/null || true
	rm -rf "$work"
}
trap netns_cleanup EXIT

# netns_switch ADDR/PREFIX: the switch's namespace, with a bridge br0 at
# ADDR that the worker namespaces' bridge ports join.
netns_switch() {
	ip netns add "$sw"
	ip -n "$sw" link set lo up
	ip -n "$sw" link add br0 type bridge
	ip -n "$sw" addr add "$1" dev br0
	ip -n "$sw" link set br0 up
}

# netns_worker W: worker namespace ${tag}w$W with its loopback up.
netns_worker() {
	ip netns add "${tag}w$1"
	ip -n "${tag}w$1" link set lo up
}

# netns_link W IFNAME ADDR/PREFIX PEER [bridge]: a veth pair between worker
# W (named IFNAME there, at ADDR) and the switch's namespace (named PEER
# there); with "bridge", PEER joins br0.
netns_link() {
	local ns="${tag}w$1"
	ip link add "$tag$4" netns "$ns" type veth peer name "$4" netns "$sw"
	ip -n "$ns" link set "$tag$4" name "$2"
	ip -n "$ns" addr add "$3" dev "$2"
	ip -n "$ns" link set "$2" up
	if [[ ${5:-} == bridge ]]; then ip -n "$sw" link set "$4" master br0; fi
	ip -n "$sw" link set "$4" up
}

# netns_wait_controller SWITCHML ADDR LOG...: waits, from the switch's
# namespace, until the controller at ADDR serves; on failure shows LOGs.
netns_wait_controller() {
	local bin=$1 addr=$2
	shift 2
	if ! ip netns exec "$sw" "$bin" wait --controller "$addr" --timeout 60s; then
		echo "$(basename "$0"): the controller did not come up:" >&2
		cat "$@" >&2
		exit 1
	fi
}
