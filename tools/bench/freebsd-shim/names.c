/*
 * The names the C side of the side-by-side benchmarks needs from the rest
 * of FreeBSD's libpmc (libpmc.c cannot be built on Linux), made from
 * FreeBSD's own tables of names in its headers, which
 * tools/bench/freebsd-build passes in: the CPU types of <sys/pmc.h>'s
 * __PMC_CPUS() (cut from $FREEBSD_SRC into pmc_cpus.h) and the events of
 * <dev/hwpmc/pmc_events.h>. Written for the benchmark.
 */
#include <sys/types.h>
#include <stddef.h>

#include <pmc.h>

#include "pmc_cpus.h"
#include <dev/hwpmc/pmc_events.h>

/* A CPU type's name is its symbol without PMC_CPU_, as libpmc prints it. */
const char *
pmc_name_of_cputype(enum pmc_cputype cp)
{
	switch ((int)cp) {
#define __PMC_CPU(S, V, D) case V: return (#S);
	__PMC_CPUS()
#undef __PMC_CPU
	}
	return (NULL);
}

/*
 * An event's name as in libpmc.c's tables: the TSC's table is
 * __PMC_EV_ALIAS_TSC() (its one event is named "cycles"), K8's its
 * __PMC_EV_K8() list of symbols without their class. Only the classes
 * whose table libpmc picks without knowing the CPU are named; for others
 * libpmc's choice depends on the CPU type, and the benchmark's logs have
 * none.
 */
const char *
_pmc_name_of_event(enum pmc_event ev, enum pmc_cputype cpu)
{
	(void)cpu;
	switch ((int)ev) {
#define __PMC_EV(C, N) case PMC_EV_##C##_##N: return (#N);
#define __PMC_EV_ALIAS(N, CODE) case PMC_EV_##CODE: return (N);
	__PMC_EV_ALIAS_TSC()
	__PMC_EV_K8()
#undef __PMC_EV
#undef __PMC_EV_ALIAS
	}
	return (NULL);
}

/* Events of a CPU's PMU table (PMC_F_EV_PMU): the benchmark's logs have
 * none. */
const char *
pmc_pmu_event_get_by_idx(const char *cpuid, int idx)
{
	(void)cpuid;
	(void)idx;
	return (NULL);
}
