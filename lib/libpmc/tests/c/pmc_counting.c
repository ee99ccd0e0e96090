/*
 * A pmc(3) program as a FreeBSD user writes it: allocate, attach, start,
 * read and release a SOFT and a TSC PMC, and check errno for two errors.
 * Built against libpmc's pmc.h and run on the simulator by
 * tests/c_program.rs; exits 0 when every check holds.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pmc.h>

#include "check.h"

int
main(void)
{
	const struct pmc_cpuinfo *ci;
	pmc_id_t soft, tsc, bogus;
	pmc_value_t v1, v2, t1, t2;
	uint32_t caps;

	CHECK(pmc_init() == 0);
	CHECK(pmc_cpuinfo(&ci) == 0);
	CHECK(ci->pm_ncpu == (uint32_t)pmc_ncpu());
	printf("cpus %d rows %d cputype %s\n", pmc_ncpu(), pmc_npmc(0),
	    pmc_name_of_cputype(ci->pm_cputype));

	/* A process-counting soft PMC on this program. */
	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_TC, 0, PMC_CPU_ANY,
	    &soft, 0) == 0);
	CHECK(PMC_ID_TO_CLASS(soft) == PMC_CLASS_SOFT);
	CHECK(PMC_ID_TO_MODE(soft) == PMC_MODE_TC);
	CHECK(pmc_attach(soft, 0) == 0);
	CHECK(pmc_start(soft) == 0);
	CHECK(pmc_read(soft, &v1) == 0);
	CHECK(pmc_read(soft, &v2) == 0);
	CHECK(v2 > v1);
	CHECK(pmc_capabilities(soft, &caps) == 0);
	CHECK((caps & PMC_CAP_READ) != 0);
	CHECK(pmc_stop(soft) == 0);
	CHECK(pmc_release(soft) == 0);
	printf("soft %s: %ju then %ju\n", pmc_name_of_class(PMC_CLASS_SOFT),
	    (uintmax_t)v1, (uintmax_t)v2);

	/* A system-counting TSC PMC on CPU 0. */
	CHECK(pmc_allocate("TSC", PMC_MODE_SC, 0, 0, &tsc, 0) == 0);
	CHECK(pmc_start(tsc) == 0);
	CHECK(pmc_read(tsc, &t1) == 0);
	CHECK(pmc_read(tsc, &t2) == 0);
	CHECK(t2 > t1);
	CHECK(pmc_stop(tsc) == 0);
	CHECK(pmc_release(tsc) == 0);
	printf("tsc %s: %ju then %ju\n", pmc_name_of_event(PMC_EV_TSC_TSC),
	    (uintmax_t)t1, (uintmax_t)t2);

	/* Errors: an unknown event, and PMC ids this program never had. */
	errno = 0;
	CHECK(pmc_allocate("NO_SUCH_EVENT", PMC_MODE_TC, 0, PMC_CPU_ANY,
	    &bogus, 0) == -1);
	CHECK(errno == EINVAL);
	/* A row past the last is EINVAL; a valid one we do not own, ESRCH. */
	errno = 0;
	CHECK(pmc_start(PMC_ID_MAKE_ID(0xFFF, PMC_MODE_TC, PMC_CLASS_SOFT,
	    pmc_npmc(0))) == -1);
	CHECK(errno == EINVAL);
	errno = 0;
	CHECK(pmc_start(PMC_ID_MAKE_ID(0xFFF, PMC_MODE_TC, PMC_CLASS_SOFT,
	    0)) == -1);
	CHECK(errno == ESRCH);

	return (checks_result());
}
