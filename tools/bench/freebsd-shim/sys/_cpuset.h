/* Host shim for FreeBSD's libpmcstat.h on Linux: the CPU set type it
 * names. The benchmark's print loop never looks inside it. Written for
 * the benchmark; see tools/bench/freebsd-build. */
#ifndef BENCH_SHIM_CPUSET_H
#define BENCH_SHIM_CPUSET_H
typedef struct {
	unsigned long __bits[16];
} cpuset_t;
#endif
