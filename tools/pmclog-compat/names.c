/*
 * What FreeBSD's pmclog.c takes from the rest of FreeBSD's libpmc, for
 * tools/pmclog-compat/check: the name of a static event, as libpmc's
 * _pmc_name_of_event gives it, made here from FreeBSD's own
 * sys/dev/hwpmc/pmc_events.h of the tree of record (its __PMC_EVENTS()
 * list); and PMU event names, of which the simulator's logs have none
 * (it offers no hardware class).
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
#undef	__PMC_EV_BLOCK
#define	__PMC_EV(C, N)		case PMC_EV_ ## C ## _ ## N: return (#N);
#define	__PMC_EV_BLOCK(C, V)
	__PMC_EVENTS()
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
