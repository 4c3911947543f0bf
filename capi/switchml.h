/*
 * switchml.h: the C interface of libswitchml, the SwitchML worker library
 * (github.com/switchml/switchml-go) built with
 *
 *     go build -buildmode=c-shared -o libswitchml.so ./capi
 *
 * Sessions and embedded switches are named by integer handles (> 0); no
 * pointer into the library's memory is ever handed out. Every function may
 * be called from any thread, and several threads may share a handle: calls
 * on one session run one after another in the order they were made, so all
 * ranks of a job must make the same calls in the same order.
 *
 * Every function returns a switchml_status. Those that can fail take a
 * caller buffer `err` of `err_len` bytes (NULL or 0: no message) that
 * receives a NUL-terminated message saying what went wrong and what to do;
 * it is truncated to fit and left untouched on success.
 *
 * Blocking calls take `timeout_ms`: 0 leaves the library's own bounds
 * (the join timeout, the switch's give-up time), a positive value also
 * ends the call after that many milliseconds with SWITCHML_ERR_TIMEOUT.
 * A call that fails during an allreduce leaves the session out of step
 * with its peers: close it and join again.
 *
 * The header only grows: functions, statuses and dtypes keep their values,
 * and SWITCHML_ABI_VERSION changes when functions are added or an existing
 * signature would change.
 */
#ifndef SWITCHML_H
#define SWITCHML_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SWITCHML_ABI_VERSION 7

typedef enum switchml_status {
	SWITCHML_OK = 0,
	/* A bad argument: a NULL pointer, a negative count, a count or size
	   whose bytes run past the end of the address space, a timeout
	   beyond INT64_MAX / 1000000 ms, an unknown dtype, misaligned data.
	   Nothing was sent. */
	SWITCHML_ERR_INVALID = 1,
	/* The library refused the configuration (the message names each
	   field). Nothing was sent. */
	SWITCHML_ERR_CONFIG = 2,
	/* No open session or switch has this handle (never opened, or
	   already closed). */
	SWITCHML_ERR_HANDLE = 3,
	/* No controller answered at the address. */
	SWITCHML_ERR_UNREACHABLE = 4,
	/* Ranks disagree about the job: world size, packet size, data size. */
	SWITCHML_ERR_MISMATCH = 5,
	/* timeout_ms passed, or the switch stopped answering. */
	SWITCHML_ERR_TIMEOUT = 6,
	/* The job was aborted: a rank died, failed or left; the message
	   names the rank and the cause. */
	SWITCHML_ERR_ABORTED = 7,
	/* The session was closed while the call waited. */
	SWITCHML_ERR_CLOSED = 8,
	/* Anything else; the message says what. */
	SWITCHML_ERR_OTHER = 9
} switchml_status;

/* The element types, by the codes switchml_allreduce takes; the library
   knows them by name too (switchml_dtype_lookup). */
typedef enum switchml_dtype {
	SWITCHML_FLOAT32 = 0,
	SWITCHML_FLOAT16 = 1,  /* IEEE half precision, as 16-bit words */
	SWITCHML_BFLOAT16 = 2, /* bfloat16, as 16-bit words */
	SWITCHML_INT32 = 3     /* summed exactly, wrapping */
} switchml_dtype;

/* One worker of a job. Zero fields (NULL strings) take the library's
   defaults; controller and job are required. */
typedef struct switchml_config {
	const char *controller; /* the controller's host:port */
	const char *job;        /* the job's name, the same on every rank */
	int32_t rank;           /* 0 <= rank < workers */
	int32_t workers;        /* the world size */
	const char *bind;       /* local IP for the lane sockets */
	const char *token;      /* the job owner's secret */
	int32_t lanes;          /* parallel lanes (sockets) */
	int32_t window;         /* packets in flight per lane */
	int32_t packet_elements; /* values per packet (0: what the switch takes) */
	int64_t join_timeout_ms; /* bounds the join and controller calls */
	int64_t give_up_ms;     /* an allreduce fails when the switch is silent this long */
	int32_t extended;       /* nonzero: the software switch's extended header
	                           (packets above 256 values, jobs above 32 ranks) */
	/* Since ABI version 2: when the switch cannot serve the job (no room,
	   too many workers, switch or controller unreachable), "ring" runs it
	   over a TCP ring allreduce instead, through the same calls; NULL
	   fails the join. switchml_fallback says whether it happened, and why. */
	const char *fallback;
	int32_t fallback_on_loss;      /* nonzero: move to the ring when the switch
	                                  is lost mid-job, instead of failing */
	const char *fallback_listen;   /* host:port this rank's ring listens on
	                                  (NULL: the bind address, a free port) */
	const char *fallback_peers;    /* every rank's ring address, comma-separated
	                                  in rank order, to meet without the
	                                  controller (NULL: the controller tells) */
	/* Since ABI version 3: how the lanes move packets. NULL or "udp":
	   kernel UDP sockets; "shm": shared-memory inboxes, to a switch on
	   this host that has one (switchml_local_start_transport, or
	   `switchml switch --transport shm`), UDP to any other; "afxdp":
	   AF_XDP sockets (Linux, root). Where one cannot be used the lanes
	   use UDP and the library logs why; switchml_transport says what
	   they use. */
	const char *transport;
	/* Since ABI version 5: nonzero runs every allreduce in the
	   block-sparse mode: a rank sends only the blocks (packet_elements
	   values) of its tensor that are not all zero, for gradients of
	   embedding tables. Every rank of a job must agree; it uses the
	   extended header and needs the software switch. */
	int32_t sparse;
	/* Since ABI version 7: how wide float values travel
	   (switchml.Config.WireBits). 0: float16 and bfloat16 at 16 bits a
	   value, float32 at 32. 16: every float type at 16 bits, float32
	   too: block-scaled 16-bit fixed point, two values to a 32-bit
	   payload word, so half the bytes of 32 bits, at about 12 bits of
	   precision below the largest possible sum of 8 workers (28 at 32
	   bits). 32: every type at 32 bits, the reference layout's. int32
	   always travels at 32 bits, exactly. Any other value, 16 with
	   sparse, or 16 for a job above 256 ranks fails the join with
	   SWITCHML_ERR_CONFIG (with sparse, or above 256 ranks, 0 means 32
	   for every type). Every rank of a job must agree
	   (SWITCHML_ERR_MISMATCH otherwise). Any switch serves either width:
	   it adds the 32-bit words alike. switchml_wire_bits says the width
	   a dtype travels at. */
	int32_t wire_bits;
} switchml_config;

/* SWITCHML_ABI_VERSION of the library actually loaded. */
int switchml_abi_version(void);

/* A constant name for a status ("SWITCHML_ERR_TIMEOUT"); never NULL. */
const char *switchml_status_name(int status);

/* Joins a job: returns once every rank has joined. On success *session
   holds the new session's handle. */
int switchml_join(const switchml_config *cfg, int64_t *session, char *err, size_t err_len);

/* Sums count values of dtype at data across all ranks, in place. data
   must stay valid until the call returns, and is not touched after.
   count is a number of values, not bytes: one whose bytes (count times
   the value size) would run past the end of the address space fails with
   SWITCHML_ERR_INVALID.
   Float input with NaN or Inf is refused, naming the first bad index,
   and ends the job for every rank. */
int switchml_allreduce(int64_t session, void *data, int64_t count, int dtype, int64_t timeout_ms, char *err, size_t err_len);

/* Since ABI version 4: the code (for switchml_allreduce) and the value
   size in bytes of the element type called name, such as "float32",
   "float16", "bfloat16" or "int32" (PyTorch's names for them). An unknown name fails
   with SWITCHML_ERR_INVALID, the message listing the names the library
   knows. */
int switchml_dtype_lookup(const char *name, int32_t *code, int32_t *size, char *err, size_t err_len);

/* Returns once every rank called switchml_barrier with the same name. */
int switchml_barrier(int64_t session, const char *name, int64_t timeout_ms, char *err, size_t err_len);

/* Copies root's size bytes at data into every rank's data, through the
   controller (meant for small data: a few MiB at most; a size above
   2^31 - 1 fails with SWITCHML_ERR_INVALID). Every rank passes the same
   size; a different size on a rank fails there with
   SWITCHML_ERR_MISMATCH. */
int switchml_broadcast(int64_t session, const char *name, int32_t root, void *data, int64_t size, int64_t timeout_ms, char *err, size_t err_len);

/* Leaves the job after calls in flight end, and frees the handle. */
int switchml_close(int64_t session, char *err, size_t err_len);

/* Whether the session runs over the ring fallback: *on_ring is set to 1
   and `why` (why_len bytes, NUL-terminated) receives the reason, or 0 and
   an empty string while it runs on the switch. */
int switchml_fallback(int64_t session, int32_t *on_ring, char *why, size_t why_len, char *err, size_t err_len);

/* Since ABI version 3: what the session's lanes move packets through,
   "udp", "shm" or "afxdp", written to out (out_len bytes,
   NUL-terminated). A lane counts as "shm" once it has written into the
   switch's inbox, so ask after an allreduce. */
int switchml_transport(int64_t session, char *out, size_t out_len, char *err, size_t err_len);

/* Since ABI version 6: the session's counters so far (switchml.Stats):
   completed allreduce calls, packets sent (first transmissions and
   retransmissions), bytes of those packets (SwitchML headers included),
   and values reduced. Any pointer may be NULL. */
int switchml_stats(int64_t session, uint64_t *allreduces, uint64_t *packets, uint64_t *sent_bytes, uint64_t *elements, char *err, size_t err_len);

/* Since ABI version 7: one of the session's counters (switchml.Stats) by
   name: "allreduces", "dense_calls", "failed", "packets",
   "retransmits", "timeouts", "sent_bytes", "elements" or "ring". An
   unknown name fails with SWITCHML_ERR_INVALID, the message listing the
   names. packets minus retransmits are the first transmissions, which
   the protocol decides; retransmissions grow with loss and load. */
int switchml_counter(int64_t session, const char *name, uint64_t *value, char *err, size_t err_len);

/* Since ABI version 7: the width in bits, 16 or 32, at which values of
   dtype (a switchml_dtype code) travel in the session
   (switchml_config.wire_bits), into *bits. */
int switchml_wire_bits(int64_t session, int dtype, int32_t *bits, char *err, size_t err_len);

/* Starts a software switch and a controller inside this process, on
   loopback (package p4/local). *sw receives its handle and addr
   the controller's host:port, for switchml_config.controller. */
int switchml_local_start(int64_t *sw, char *addr, size_t addr_len, char *err, size_t err_len);

/* Since ABI version 3: switchml_local_start with the switch's transport:
   NULL or "udp", or "shm" to give the switch a shared-memory inbox beside
   its UDP socket. Workers whose config says "shm" write into it; the
   others reach the switch over UDP as before. */
int switchml_local_start_transport(const char *transport, int64_t *sw, char *addr, size_t addr_len, char *err, size_t err_len);

/* Stops an embedded switch and controller; its jobs end. */
int switchml_local_stop(int64_t sw, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* SWITCHML_H */
