/*
 * STREAM-style copy and triad in C with OpenMP: the reference that
 * probes/kernels/stream.py is compared against (benchmarks/host_bandwidth.py).
 *
 * Measures: best-of-N host memory bandwidth, decimal GB/s (1e9 bytes/s),
 * bytes counted as STREAM counts them (copy c = a: 16 bytes per element,
 * add c = a + b and triad a = b + s*c: 24 bytes per element; write-allocate
 * traffic is not counted, as in STREAM). Add is the numpy backend's triad
 * (numpy has no fused multiply-add), so both are printed.
 *
 * Build: gcc -O3 -march=native -fopenmp stream.c -o stream
 * Run:   OMP_NUM_THREADS=<cores> ./stream <elements> [repeats]
 * Prints one JSON object: {"copy_gbps": .., "add_gbps": .., "triad_gbps": .., ...}.
 * Manual equivalent: McCalpin's stream.c (www.cs.virginia.edu/stream).
 */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define SCALAR 3.0

static int check(const double *a, const double *c, long n, int iterations)
{
    /* Replay the recurrence on scalars, as STREAM's checkSTREAMresults does. */
    double a_expected = 1.0, b_expected = 2.0, c_expected = 0.0;
    for (int k = 0; k < iterations; k++) {
        c_expected = a_expected;
        c_expected = a_expected + b_expected;
        a_expected = b_expected + SCALAR * c_expected;
    }
    long step = n > 1024 ? n / 1024 : 1;
    for (long j = 0; j < n; j += step) {
        if (fabs(a[j] - a_expected) > 1e-13 * fabs(a_expected)
            || fabs(c[j] - c_expected) > 1e-13 * fabs(c_expected))
            return 0;
    }
    return fabs(a[n - 1] - a_expected) <= 1e-13 * fabs(a_expected);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s ELEMENTS [REPEATS]\n", argv[0]);
        return 1;
    }
    long n = strtol(argv[1], NULL, 10);
    int repeats = argc > 2 ? atoi(argv[2]) : 10;
    if (n < 1 || repeats < 1) {
        fprintf(stderr, "stream: ELEMENTS and REPEATS must be positive\n");
        return 1;
    }
    size_t array_bytes = (size_t)n * sizeof(double);
    double *a, *b, *c;
    /* Page alignment so that no thread's chunk starts mid-cache-line. */
    if (posix_memalign((void **)&a, 4096, array_bytes)
        || posix_memalign((void **)&b, 4096, array_bytes)
        || posix_memalign((void **)&c, 4096, array_bytes)) {
        fprintf(stderr, "stream: cannot allocate 3 x %zu bytes\n", array_bytes);
        return 1;
    }

    /* First touch in parallel with the same static schedule as the kernels,
       so each page lands on the NUMA node of the thread that will use it. */
#pragma omp parallel for schedule(static)
    for (long j = 0; j < n; j++) {
        a[j] = 1.0;
        b[j] = 2.0;
        c[j] = 0.0;
    }

    double copy_best_s = DBL_MAX, add_best_s = DBL_MAX, triad_best_s = DBL_MAX;
    /* Iteration 0 is the warm-up and is not timed into the best. */
    for (int k = 0; k <= repeats; k++) {
        double t = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (long j = 0; j < n; j++)
            c[j] = a[j];
        double copy_s = omp_get_wtime() - t;

        t = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (long j = 0; j < n; j++)
            c[j] = a[j] + b[j];
        double add_s = omp_get_wtime() - t;

        t = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (long j = 0; j < n; j++)
            a[j] = b[j] + SCALAR * c[j];
        double triad_s = omp_get_wtime() - t;

        if (k > 0) {
            copy_best_s = copy_s < copy_best_s ? copy_s : copy_best_s;
            add_best_s = add_s < add_best_s ? add_s : add_best_s;
            triad_best_s = triad_s < triad_best_s ? triad_s : triad_best_s;
        }
    }

    int valid = check(a, c, n, repeats + 1);
    printf("{\"copy_gbps\": %.6g, \"add_gbps\": %.6g, \"triad_gbps\": %.6g, "
           "\"copy_best_s\": %.9g, \"add_best_s\": %.9g, \"triad_best_s\": %.9g, "
           "\"elements\": %ld, \"threads\": %d, \"repeats\": %d, \"valid\": %s}\n",
           16.0 * n / copy_best_s / 1e9, 24.0 * n / add_best_s / 1e9,
           24.0 * n / triad_best_s / 1e9, copy_best_s, add_best_s, triad_best_s, n,
           omp_get_max_threads(), repeats,
           valid ? "true" : "false");
    free(a);
    free(b);
    free(c);
    return valid ? 0 : 2;
}
