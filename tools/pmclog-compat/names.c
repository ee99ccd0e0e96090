/*
 * What FreeBSD's pmclog.c takes from the rest of FreeBSD's libpmc, for
 * tools/pmclog-compat/check: the name of a static event, as libpmc's
 * _pmc_name_of_event gives it, made here from the lists of FreeBSD's own
 * sys/dev/hwpmc/pmc_events.h of the tree of record laid out as libpmc.c's
 * tables lay them out: the TSC's table is __PMC_EV_ALIAS_TSC() (its one
 * event is named "cycles"), K8's its __PMC_EV_K8() list. Other codes have
 * no name (the ARM tables depend on the CPU type, and the simulator's
 * logs name their hardware events by PMU index); and PMU event names, of
 * which the check's logs have none.
 */
#include <stddef.h>

#include <pmc.h>
#include <dev/hwpmc/pmc_events.h>

const char *
_pmc_name_of_event(enum pmc_event ev, enum pmc_cputype cpu)
{
	(void)cpu;
	switch ((int)ev) {
#undef	__PMC_EV
#undef	__PMC_EV_ALIAS
#define	__PMC_EV(C, N)		case PMC_EV_ ## C ## _ ## N: return (#N);
#define	__PMC_EV_ALIAS(N, CODE)	case PMC_EV_ ## CODE: return (N);
	__PMC_EV_ALIAS_TSC()
	__PMC_EV_K8()
	}
	return (NULL);
}

const char *
pmc_pmu_event_get_by_idx(const char *cpuid, int idx)
{
	(void)cpuid;
	(void)idx;
	return (NULL);
}
