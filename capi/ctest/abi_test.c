/*
 * Tests libswitchml through its C interface alone: argument checks, the
 * statuses and messages of failures, and a job of three ranks (one thread
 * each) on an embedded switch summing every dtype, with a barrier and a
 * broadcast, then a job whose float32 values travel at 16 bits. Exits
 * non-zero if a check failed.
 *
 *     go build -buildmode=c-shared -o build/libswitchml.so ./capi
 *     gcc -Wall -Werror -Icapi -o build/abi_test capi/ctest/abi_test.c -Lbuild -lswitchml -lpthread
 *     LD_LIBRARY_PATH=build build/abi_test
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "switchml.h"

#define RANKS 3
#define N 10000

static _Atomic int failures; /* the rank threads count theirs too */

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, "\n");                                 \
			failures++;                                            \
		}                                                              \
	} while (0)

static char controller[128];

/* A status and a message that says something. */
static void expect(int got, int want, const char *msg, const char *what) {
	CHECK(got == want, "%s: got %s, want %s (message: %s)", what, switchml_status_name(got), switchml_status_name(want), msg);
	if (want != SWITCHML_OK) {
		CHECK(strlen(msg) > 10, "%s: message too short: \"%s\"", what, msg);
	}
}

static void test_arguments(void) {
	char err[512] = "";
	int64_t s = 0;
	CHECK(switchml_abi_version() == SWITCHML_ABI_VERSION, "abi %d, header %d", switchml_abi_version(), SWITCHML_ABI_VERSION);
	CHECK(strcmp(switchml_status_name(SWITCHML_ERR_TIMEOUT), "SWITCHML_ERR_TIMEOUT") == 0, "%s", switchml_status_name(SWITCHML_ERR_TIMEOUT));
	CHECK(switchml_status_name(-5) != NULL && switchml_status_name(1000) != NULL, "unknown statuses need a name too");

	expect(switchml_join(NULL, &s, err, sizeof err), SWITCHML_ERR_INVALID, err, "join(NULL)");
	switchml_config cfg = {0};
	cfg.job = "j";
	cfg.workers = 1;
	expect(switchml_join(&cfg, &s, err, sizeof err), SWITCHML_ERR_INVALID, err, "join without controller");
	CHECK(strstr(err, "controller") != NULL, "message names the field: %s", err);

	cfg.controller = controller;
	cfg.rank = 3;
	cfg.workers = 2;
	expect(switchml_join(&cfg, &s, err, sizeof err), SWITCHML_ERR_CONFIG, err, "rank >= workers");
	CHECK(strstr(err, "Rank") != NULL, "message names the field: %s", err);

	/* A short buffer gets a truncated, terminated message. */
	char tiny[8];
	memset(tiny, 'x', sizeof tiny);
	expect(switchml_close(424242, tiny, sizeof tiny), SWITCHML_ERR_HANDLE, "(truncated)   ", "close of an unknown handle");
	CHECK(tiny[7] == 0 && strlen(tiny) == 7, "truncated message: %.8s", tiny);
	/* NULL buffers are allowed. */
	CHECK(switchml_barrier(424242, "b", 0, NULL, 0) == SWITCHML_ERR_HANDLE, "barrier on an unknown handle");

	float x[4] = {0};
	expect(switchml_allreduce(424242, x, 4, SWITCHML_FLOAT32, 0, err, sizeof err), SWITCHML_ERR_HANDLE, err, "allreduce on an unknown handle");
	expect(switchml_allreduce(1, x, 4, 17, 0, err, sizeof err), SWITCHML_ERR_INVALID, err, "unknown dtype");

	/* Every dtype of the header by its name, and an unknown name. */
	const struct { const char *name; int code, size; } dtypes[] = {
		{"float32", SWITCHML_FLOAT32, 4}, {"float16", SWITCHML_FLOAT16, 2},
		{"bfloat16", SWITCHML_BFLOAT16, 2}, {"int32", SWITCHML_INT32, 4},
	};
	for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
		int32_t code = -1, size = -1;
		expect(switchml_dtype_lookup(dtypes[i].name, &code, &size, err, sizeof err), SWITCHML_OK, err, dtypes[i].name);
		CHECK(code == dtypes[i].code && size == dtypes[i].size, "%s: code %d, size %d", dtypes[i].name, code, size);
	}
	int32_t code = -1, size = -1;
	expect(switchml_dtype_lookup("float64", &code, &size, err, sizeof err), SWITCHML_ERR_INVALID, err, "unknown dtype name");
	CHECK(strstr(err, "float64") != NULL && strstr(err, "bfloat16") != NULL, "message names the type and the known ones: %s", err);
	expect(switchml_dtype_lookup(NULL, &code, &size, err, sizeof err), SWITCHML_ERR_INVALID, err, "NULL dtype name");
	expect(switchml_allreduce(1, x, -1, SWITCHML_FLOAT32, 0, err, sizeof err), SWITCHML_ERR_INVALID, err, "negative count");
	expect(switchml_allreduce(1, (char *)x + 1, 2, SWITCHML_FLOAT32, 0, err, sizeof err), SWITCHML_ERR_INVALID, err, "misaligned data");
	expect(switchml_allreduce(1, NULL, 2, SWITCHML_FLOAT32, 0, err, sizeof err), SWITCHML_ERR_INVALID, err, "NULL data");
	expect(switchml_allreduce(1, x, 4, SWITCHML_FLOAT32, -1, err, sizeof err), SWITCHML_ERR_HANDLE, err, "handle checked first");

	/* Lengths whose bytes wrap or run past the address space: 2^62
	   float32 values are 2^64 bytes, which wraps to none. */
	expect(switchml_allreduce(1, x, (int64_t)1 << 62, SWITCHML_FLOAT32, 0, err, sizeof err), SWITCHML_ERR_INVALID, err, "2^62 float32 values");
	CHECK(strstr(err, "count is 4611686018427387904") != NULL, "message names the count: %s", err);
	expect(switchml_allreduce(1, x, INT64_MAX, SWITCHML_INT32, 0, err, sizeof err), SWITCHML_ERR_INVALID, err, "2^63-1 int32 values");
	expect(switchml_broadcast(1, "b", 0, x, INT64_MAX, 0, err, sizeof err), SWITCHML_ERR_INVALID, err, "broadcast of 2^63-1 bytes");
	expect(switchml_broadcast(1, "b", 0, x, (int64_t)1 << 31, 0, err, sizeof err), SWITCHML_ERR_INVALID, err, "broadcast of 2 GiB");
	/* The wire width: 0, 16 or 32; 16 refused with sparse. */
	cfg.rank = 0;
	cfg.workers = 1;
	cfg.wire_bits = 8;
	expect(switchml_join(&cfg, &s, err, sizeof err), SWITCHML_ERR_CONFIG, err, "wire_bits 8");
	CHECK(strstr(err, "WireBits = 8") != NULL, "message names the field and the value: %s", err);
	cfg.wire_bits = 16;
	cfg.sparse = 1;
	expect(switchml_join(&cfg, &s, err, sizeof err), SWITCHML_ERR_CONFIG, err, "wire_bits 16 with sparse");
	CHECK(strstr(err, "sparse") != NULL, "message says why: %s", err);
	cfg.wire_bits = 0;
	cfg.sparse = 0;
	int32_t bits = 0;
	uint64_t count = 0;
	expect(switchml_wire_bits(424242, SWITCHML_FLOAT32, &bits, err, sizeof err), SWITCHML_ERR_HANDLE, err, "wire_bits of an unknown handle");
	expect(switchml_wire_bits(424242, 17, &bits, err, sizeof err), SWITCHML_ERR_INVALID, err, "wire_bits of an unknown dtype");
	expect(switchml_wire_bits(424242, SWITCHML_FLOAT32, NULL, err, sizeof err), SWITCHML_ERR_INVALID, err, "wire_bits into NULL");
	expect(switchml_counter(424242, "packets", &count, err, sizeof err), SWITCHML_ERR_HANDLE, err, "counter of an unknown handle");
	expect(switchml_counter(424242, "packets", NULL, err, sizeof err), SWITCHML_ERR_INVALID, err, "counter into NULL");
	expect(switchml_counter(424242, NULL, &count, err, sizeof err), SWITCHML_ERR_INVALID, err, "counter without a name");
	cfg.join_timeout_ms = INT64_MAX;
	expect(switchml_join(&cfg, &s, err, sizeof err), SWITCHML_ERR_INVALID, err, "join_timeout_ms beyond a duration");
	/* An err_len larger than the buffer could be (a size_t gone wrong)
	   writes the message alone. */
	memset(err, 'x', sizeof err);
	expect(switchml_close(424242, err, SIZE_MAX), SWITCHML_ERR_HANDLE, err, "close with err_len SIZE_MAX");
	CHECK(memchr(err, 0, sizeof err) != NULL && err[sizeof err - 1] == 'x', "message of %zu bytes in a buffer of %zu", strlen(err), sizeof err);
}

static void test_unreachable(void) {
	char err[512] = "";
	int64_t s = 0;
	switchml_config cfg = {0};
	cfg.controller = "127.0.0.1:1"; /* nothing listens on port 1 */
	cfg.job = "nobody";
	cfg.workers = 1;
	cfg.join_timeout_ms = 2000;
	time_t t0 = time(NULL);
	int st = switchml_join(&cfg, &s, err, sizeof err);
	CHECK(st == SWITCHML_ERR_UNREACHABLE || st == SWITCHML_ERR_TIMEOUT, "join of an absent controller: %s: %s", switchml_status_name(st), err);
	CHECK(strstr(err, "127.0.0.1:1") != NULL, "message names the address: %s", err);
	CHECK(time(NULL) - t0 < 20, "join took %ld s with a 2 s timeout", (long)(time(NULL) - t0));
}

struct rank {
	int rank;
	int64_t session;
	int failed;
};

static uint16_t f32_to_bf16(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h) {
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* The packets a session sent once, without its retransmissions: what the
   protocol decides, whatever the load on the machine. */
static uint64_t first_transmissions(int64_t s) {
	char err[512] = "";
	uint64_t packets = 0, again = 0;
	expect(switchml_counter(s, "packets", &packets, err, sizeof err), SWITCHML_OK, err, "counter packets");
	expect(switchml_counter(s, "retransmits", &again, err, sizeof err), SWITCHML_OK, err, "counter retransmits");
	CHECK(again <= packets, "%llu retransmits of %llu packets", (unsigned long long)again, (unsigned long long)packets);
	return packets - again;
}

/* A job with wire_bits 16: the float32 sum of the N values of the first
   job travels at 16 bits, within the 16-bit wire's bound (quant.ErrorBound16)
   and beyond the 32-bit wire's (so it did travel narrow), in at most 0.55
   of the packets the first job sent for it at 32 bits. */
static void wire16(int rank, uint64_t packets32) {
	char err[512] = "";
	switchml_config cfg = {0};
	cfg.controller = controller;
	cfg.job = "abi-wire16";
	cfg.rank = rank;
	cfg.workers = RANKS;
	cfg.join_timeout_ms = 60000;
	cfg.wire_bits = 16;
	int64_t s = 0;
	expect(switchml_join(&cfg, &s, err, sizeof err), SWITCHML_OK, err, "join with wire_bits 16");
	if (s == 0)
		return;
	int32_t bits = 0;
	expect(switchml_wire_bits(s, SWITCHML_FLOAT32, &bits, err, sizeof err), SWITCHML_OK, err, "wire_bits");
	CHECK(bits == 16, "float32 travels at %d bits with wire_bits 16", bits);
	expect(switchml_wire_bits(s, SWITCHML_INT32, &bits, err, sizeof err), SWITCHML_OK, err, "wire_bits");
	CHECK(bits == 32, "int32 travels at %d bits with wire_bits 16, want 32 (exact)", bits);

	float *f = malloc(N * sizeof *f);
	for (int i = 0; i < N; i++)
		f[i] = (float)(rank + 1) * 0.5f + (float)(i % 7);
	expect(switchml_allreduce(s, f, N, SWITCHML_FLOAT32, 60000, err, sizeof err), SWITCHML_OK, err, "float32 allreduce at 16 bits");
	/* Every input is below 2^3: ErrorBound16(3, 3) and ErrorBound(3, 3). */
	const double span = RANKS * 8.0;
	const double bound16 = span * (RANKS * 0.5 / 32767 + 0x1p-24 + 0x1p-50);
	const double bound32 = span * (RANKS / (2.0 * 2147483647) + 0x1p-24 + 0x1p-50);
	double worst = 0;
	for (int i = 0; i < N; i++) {
		double want = 0.5 * (RANKS * (RANKS + 1) / 2) + RANKS * (double)(i % 7);
		worst = fmax(worst, fabs(f[i] - want));
	}
	CHECK(worst <= bound16, "float32 at 16 bits: error %g beyond the bound %g", worst, bound16);
	CHECK(worst > bound32, "float32 with wire_bits 16: error %g within the 32-bit bound %g, as if it travelled at 32 bits", worst, bound32);
	free(f);
	uint64_t packets16 = first_transmissions(s);
	CHECK(packets16 > 0 && packets16 <= 0.55 * packets32, "%llu packets at 16 bits, %llu at 32 for as many values: want at most 0.55 of them",
	      (unsigned long long)packets16, (unsigned long long)packets32);
	expect(switchml_close(s, err, sizeof err), SWITCHML_OK, err, "close");
}

static void *run_rank(void *arg) {
	struct rank *r = arg;
	char err[512] = "";
	int before = failures;
	switchml_config cfg = {0};
	cfg.controller = controller;
	cfg.job = "abi-test";
	cfg.rank = r->rank;
	cfg.workers = RANKS;
	cfg.join_timeout_ms = 60000;
	cfg.transport = "shm";
	expect(switchml_join(&cfg, &r->session, err, sizeof err), SWITCHML_OK, err, "join");
	if (failures > before) {
		r->failed = 1;
		return NULL;
	}
	int64_t s = r->session;
	const int want_sum = RANKS * (RANKS + 1) / 2;

	float *f = malloc(N * sizeof *f);
	for (int i = 0; i < N; i++)
		f[i] = (float)(r->rank + 1) * 0.5f + (float)(i % 7);
	/* Refused before anything is sent, on a live session: the ranks stay
	   in step. */
	expect(switchml_allreduce(s, f, (int64_t)1 << 62, SWITCHML_FLOAT32, 0, err, sizeof err), SWITCHML_ERR_INVALID, err, "2^62 float32 values on a session");
	expect(switchml_allreduce(s, f, N, SWITCHML_FLOAT32, INT64_MAX, err, sizeof err), SWITCHML_ERR_INVALID, err, "timeout_ms beyond a duration");
	expect(switchml_allreduce(s, f, N, SWITCHML_FLOAT32, 60000, err, sizeof err), SWITCHML_OK, err, "float32 allreduce");
	for (int i = 0; i < N; i++) {
		float want = 0.5f * want_sum + RANKS * (float)(i % 7);
		if (fabsf(f[i] - want) > 1e-4f * want) {
			CHECK(0, "float32 [%d] = %g, want %g", i, f[i], want);
			break;
		}
	}
	free(f);
	uint64_t packets32 = first_transmissions(s);

	int32_t *n = malloc(N * sizeof *n);
	for (int i = 0; i < N; i++)
		n[i] = (r->rank + 1) * (i - N / 2);
	expect(switchml_allreduce(s, n, N, SWITCHML_INT32, 0, err, sizeof err), SWITCHML_OK, err, "int32 allreduce");
	for (int i = 0; i < N; i++) {
		if (n[i] != want_sum * (i - N / 2)) {
			CHECK(0, "int32 [%d] = %d, want %d", i, n[i], want_sum * (i - N / 2));
			break;
		}
	}
	free(n);

	/* The lanes wrote into the embedded switch's shared-memory inbox. */
	char kind[8], tiny[3];
	expect(switchml_transport(s, kind, sizeof kind, err, sizeof err), SWITCHML_OK, err, "transport");
	CHECK(strcmp(kind, "shm") == 0, "rank %d's lanes use \"%s\", want \"shm\"", r->rank, kind);
	expect(switchml_transport(s, tiny, sizeof tiny, err, sizeof err), SWITCHML_ERR_INVALID, err, "transport into a short buffer");

	/* Two calls of N values so far: at least their bytes were sent. */
	uint64_t calls = 0, packets = 0, sent = 0, values = 0;
	expect(switchml_stats(s, &calls, &packets, &sent, &values, err, sizeof err), SWITCHML_OK, err, "stats");
	CHECK(calls == 2 && values == 2 * N && packets > 0 && sent >= 8 * (uint64_t)N,
	      "stats: %llu calls, %llu values, %llu packets, %llu bytes; want 2 calls of %d values", (unsigned long long)calls,
	      (unsigned long long)values, (unsigned long long)packets, (unsigned long long)sent, N);
	expect(switchml_stats(s, NULL, NULL, NULL, NULL, err, sizeof err), SWITCHML_OK, err, "stats into nothing");
	/* The counters by name are the same counts. */
	uint64_t c_packets = 0, c_sent = 0;
	expect(switchml_counter(s, "packets", &c_packets, err, sizeof err), SWITCHML_OK, err, "counter packets");
	expect(switchml_counter(s, "sent_bytes", &c_sent, err, sizeof err), SWITCHML_OK, err, "counter sent_bytes");
	CHECK(c_packets == packets && c_sent == sent, "counters %llu packets, %llu bytes; stats %llu, %llu",
	      (unsigned long long)c_packets, (unsigned long long)c_sent, (unsigned long long)packets, (unsigned long long)sent);
	expect(switchml_counter(s, "bytes", &c_sent, err, sizeof err), SWITCHML_ERR_INVALID, err, "unknown counter");
	CHECK(strstr(err, "\"bytes\"") != NULL && strstr(err, "retransmits") != NULL, "message names the counter and the known ones: %s", err);

	/* By default float16 and bfloat16 travel at 16 bits, float32 and
	   int32 at 32. */
	const struct { int dtype, bits; } widths[] = {
		{SWITCHML_FLOAT32, 32}, {SWITCHML_FLOAT16, 16}, {SWITCHML_BFLOAT16, 16}, {SWITCHML_INT32, 32},
	};
	for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
		int32_t bits = 0;
		expect(switchml_wire_bits(s, widths[i].dtype, &bits, err, sizeof err), SWITCHML_OK, err, "wire_bits");
		CHECK(bits == widths[i].bits, "dtype %d travels at %d bits, want %d", widths[i].dtype, bits, widths[i].bits);
	}

	/* 1.0 in IEEE half precision is 0x3c00; the sum 1+2+3 = 6 is 0x4600. */
	uint16_t h[64], b[64];
	for (int i = 0; i < 64; i++) {
		h[i] = r->rank == 0 ? 0x3c00 : r->rank == 1 ? 0x4000 : 0x4200;
		b[i] = f32_to_bf16((float)(r->rank + 1) * 0.25f);
	}
	expect(switchml_allreduce(s, h, 64, SWITCHML_FLOAT16, 0, err, sizeof err), SWITCHML_OK, err, "float16 allreduce");
	expect(switchml_allreduce(s, b, 64, SWITCHML_BFLOAT16, 0, err, sizeof err), SWITCHML_OK, err, "bfloat16 allreduce");
	CHECK(h[0] == 0x4600 && h[63] == 0x4600, "float16 sum %#x, want 0x4600", h[0]);
	CHECK(bf16_to_f32(b[0]) == 1.5f && bf16_to_f32(b[63]) == 1.5f, "bfloat16 sum %g, want 1.5", bf16_to_f32(b[0]));

	expect(switchml_barrier(s, "middle", 60000, err, sizeof err), SWITCHML_OK, err, "barrier");

	char msg[32];
	memset(msg, 0, sizeof msg);
	if (r->rank == 1)
		snprintf(msg, sizeof msg, "hello from rank 1");
	expect(switchml_broadcast(s, "greeting", 1, msg, sizeof msg, 60000, err, sizeof err), SWITCHML_OK, err, "broadcast");
	CHECK(strcmp(msg, "hello from rank 1") == 0, "rank %d got \"%s\"", r->rank, msg);

	/* A rank that expects another size learns it; the root is served. */
	char other[48] = {0};
	int64_t size = r->rank == 2 ? sizeof other : sizeof msg;
	int st = switchml_broadcast(s, "sizes", 0, other, size, 60000, err, sizeof err);
	expect(st, r->rank == 2 ? SWITCHML_ERR_MISMATCH : SWITCHML_OK, err, "broadcast of another size");

	expect(switchml_close(s, err, sizeof err), SWITCHML_OK, err, "close");
	expect(switchml_close(s, err, sizeof err), SWITCHML_ERR_HANDLE, err, "second close");
	expect(switchml_allreduce(s, h, 64, SWITCHML_FLOAT16, 0, err, sizeof err), SWITCHML_ERR_HANDLE, err, "allreduce after close");

	wire16(r->rank, packets32);
	r->failed = failures > before;
	return NULL;
}

int main(void) {
	char err[512] = "";
	int64_t sw = 0;
	strcpy(controller, "127.0.0.1:1");
	test_arguments();
	test_unreachable();

	char tiny[4];
	expect(switchml_local_start(&sw, tiny, sizeof tiny, err, sizeof err), SWITCHML_ERR_INVALID, err, "address buffer too small");
	expect(switchml_local_start_transport("tcp", &sw, controller, sizeof controller, err, sizeof err), SWITCHML_ERR_INVALID, err, "unknown transport");
	CHECK(strstr(err, "tcp") != NULL, "message names the value: %s", err);
	expect(switchml_local_start_transport("shm", &sw, controller, sizeof controller, err, sizeof err), SWITCHML_OK, err, "local start");
	if (failures) {
		fprintf(stderr, "cannot go on without a switch\n");
		return 1;
	}
	printf("embedded switch %lld, controller at %s\n", (long long)sw, controller);

	pthread_t threads[RANKS];
	struct rank ranks[RANKS];
	for (int i = 0; i < RANKS; i++) {
		ranks[i] = (struct rank){.rank = i};
		pthread_create(&threads[i], NULL, run_rank, &ranks[i]);
	}
	for (int i = 0; i < RANKS; i++)
		pthread_join(threads[i], NULL);

	expect(switchml_local_stop(sw, err, sizeof err), SWITCHML_OK, err, "local stop");
	expect(switchml_local_stop(sw, err, sizeof err), SWITCHML_ERR_HANDLE, err, "second stop");

	if (failures) {
		printf("abi_test: %d checks failed\n", failures);
		return 1;
	}
	printf("abi_test: all checks passed\n");
	return 0;
}
