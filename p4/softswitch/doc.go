// Package softswitch is the software switch: the SwitchML pipeline
// (p4/pipeline) behind a lock shared by its data path and its P4Runtime
// service, so a controller programs it exactly as it would program BMv2 or a
// Tofino running the matching P4 program (same P4Info, p4/p4info).
// Several data-plane loops may serve one switch at once through its Shards,
// each holding the lock for reading over a batch of packets; the control
// plane takes it for writing, so P4Runtime still sees one switch.
//
// Listen binds a whole switch, as `switchml switch` runs it: the P4Runtime
// service's listener and one data-plane socket per shard, of any
// registered transport (UDP, shared memory, AF_XDP); Switch.Serve runs the
// service and a p4/dataplane loop per shard, and Switch.Collector exports
// its counters to Prometheus. p4/local starts one beside a controller in
// the calling process.
//
// Who may program it: with TLS that verifies client certificates
// (ServerConfig.TLS with ClientCAs), only controller identities, that is
// certificates with the controller role or named in ServerConfig.Allow, may
// arbitrate, Read, Write, and set or get the pipeline config; anyone else
// gets PERMISSION_DENIED naming its identity, on the stream at its first
// message, so it never joins any role's arbitration. Without client
// certificates there are no identities and every caller may.
//
// P4Runtime coverage (p4.v1, version 1.5.0): stream channel arbitration with
// election ids for the default role only (the highest election id is
// primary; only the primary may Write or SetForwardingPipelineConfig; a
// backup's status names the primary's identity and election id; role
// configs are refused with INVALID_ARGUMENT, and any other role with
// PERMISSION_DENIED, since every role would have full pipeline access
// unseen by the default role's controller); pipeline config VERIFY,
// VERIFY_AND_SAVE, VERIFY_AND_COMMIT, COMMIT, RECONCILE_AND_COMMIT, accepted
// only for a P4Info structurally equal to the embedded one (sizes are not
// compared); Write and Read of both tables, multicast groups, the pool
// registers (an unset index means every cell) and the stats counter (writes
// set or reset it); job keys of a switch that checks tags (--auth), as the
// target-specific ExternEntry p4info.ExternJobKeyType, written and deleted
// but read back without the key (a switch without --auth answers
// UNIMPLEMENTED); Capabilities. Batches run CONTINUE_ON_ERROR and report
// one p4.v1.Error per update. Packet I/O, digests, clone sessions, meters and
// action profiles are not part of the pipeline and answer UNIMPLEMENTED.
// Unknown table, register or counter ids answer NOT_FOUND; malformed entries
// INVALID_ARGUMENT; values wider than their field OUT_OF_RANGE.
package softswitch
