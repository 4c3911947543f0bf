/* OpenMPI baseline: timed MPI_Allreduce of float32 (MPI_FLOAT, MPI_SUM).
 *
 *   mpicc -O2 -o mpi_allreduce allreduce.c
 *   mpirun -np 4 ./mpi_allreduce ELEMENTS ITERS WARMUP
 *
 * Every rank fills its tensor with rank+1, waits at a barrier and times the
 * call; the TAT of an iteration is the slowest rank's. Rank 0 prints one JSON
 * object: tat_s (per timed iteration), verified, and each rank's CPU time
 * (user, sys) over the warm-up and timed iterations, start-up excluded. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, world;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	if (argc != 4) {
		if (rank == 0) fprintf(stderr, "usage: %s ELEMENTS ITERS WARMUP\n", argv[0]);
		MPI_Finalize();
		return 2;
	}
	long n = atol(argv[1]);
	int iters = atoi(argv[2]), warmup = atoi(argv[3]);
	float *x = malloc(sizeof(float) * (n > 0 ? n : 1));
	double *tat = calloc(iters > 0 ? iters : 1, sizeof(double));
	if (!x || !tat) {
		fprintf(stderr, "out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	float want = (float)world * (world + 1) / 2;
	int ok = 1;
	/* CPU time of the MPI_Allreduce calls alone (fill, barrier and check left out). */
	struct rusage ru0, ru;
	double cpu[2] = {0, 0};
	for (int it = 0; it < warmup + iters; it++) {
		for (long i = 0; i < n; i++) x[i] = (float)(rank + 1);
		MPI_Barrier(MPI_COMM_WORLD);
		getrusage(RUSAGE_SELF, &ru0);
		double t0 = MPI_Wtime();
		MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		double dt = MPI_Wtime() - t0, slowest;
		getrusage(RUSAGE_SELF, &ru);
		cpu[0] += (ru.ru_utime.tv_sec - ru0.ru_utime.tv_sec) + (ru.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6;
		cpu[1] += (ru.ru_stime.tv_sec - ru0.ru_stime.tv_sec) + (ru.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
		MPI_Reduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		if (it >= warmup) tat[it - warmup] = slowest;
		for (long i = 0; i < n; i++)
			if (x[i] != want) { ok = 0; break; }
	}
	int allok;
	MPI_Reduce(&ok, &allok, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
	double *all = rank == 0 ? malloc(sizeof(double) * 2 * world) : NULL;
	MPI_Gather(cpu, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		printf("{\"system\":\"mpi\",\"workers\":%d,\"elements\":%ld,\"iters\":%d,\"tat_s\":[", world, n, iters);
		for (int i = 0; i < iters; i++) printf("%s%.9f", i ? "," : "", tat[i]);
		printf("],\"verified\":%s,\"cpu\":[", allok ? "true" : "false");
		for (int r = 0; r < world; r++) printf("%s[%.6f,%.6f]", r ? "," : "", all[2 * r], all[2 * r + 1]);
		printf("]}\n");
	}
	MPI_Finalize();
	return 0;
}
