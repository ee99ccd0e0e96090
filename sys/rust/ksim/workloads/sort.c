/*
 * sort [rounds]: fills an array with pseudo-random numbers, sorts it with
 * a quicksort that falls back to insertion sort on short ranges, checks
 * the order and folds the array into an FNV-1a checksum.  Every
 * comparison is a data-dependent branch.  Prints the checksum; exits 0
 * when the array came out sorted.
 */
#include "ksim_workload.h"

#define	N	1024

static uint32_t values[N];

static void
insertion_sort(uint32_t *a, long lo, long hi)
{
	for (long i = lo + 1; i <= hi; i++) {
		uint32_t v = a[i];
		long j = i - 1;

		while (j >= lo && a[j] > v) {
			a[j + 1] = a[j];
			j--;
		}
		a[j + 1] = v;
	}
}

static void
quick_sort(uint32_t *a, long lo, long hi)
{
	while (hi - lo > 12) {
		uint32_t pivot = a[lo + (hi - lo) / 2];
		long i = lo, j = hi;

		while (i <= j) {
			while (a[i] < pivot)
				i++;
			while (a[j] > pivot)
				j--;
			if (i <= j) {
				uint32_t t = a[i];

				a[i] = a[j];
				a[j] = t;
				i++;
				j--;
			}
		}
		/* Recurse into the smaller side, loop on the larger. */
		if (j - lo < hi - i) {
			quick_sort(a, lo, j);
			lo = i;
		} else {
			quick_sort(a, i, hi);
			hi = j;
		}
	}
	insertion_sort(a, lo, hi);
}

static uint32_t
fnv1a(const uint32_t *a, long n)
{
	uint32_t h = 2166136261u;

	for (long i = 0; i < n; i++) {
		uint32_t v = a[i];

		for (int b = 0; b < 4; b++) {
			h ^= (v >> (8 * b)) & 0xff;
			h *= 16777619u;
		}
	}
	return (h);
}

int
main(int argc, char **argv)
{
	uint64_t rounds = arg_u64(argc, argv, 1, 4);
	uint64_t seed = 0x9e3779b97f4a7c15ul;
	uint32_t sum = 0;
	int sorted = 1;

	for (uint64_t r = 0; r < rounds; r++) {
		for (long i = 0; i < N; i++)
			values[i] = (uint32_t)(rand_next(&seed) % 100000);
		quick_sort(values, 0, N - 1);
		for (long i = 1; i < N; i++)
			if (values[i - 1] > values[i])
				sorted = 0;
		sum ^= fnv1a(values, N);
	}
	put_str("sort: checksum ");
	put_u64(sum);
	put_str(sorted ? " sorted\n" : " NOT SORTED\n");
	return (sorted ? 0 : 1);
}
