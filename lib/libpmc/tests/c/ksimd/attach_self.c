/*
 * A process-mode counting PMC attached to this process by its own pid
 * (not 0): the pid getpid(2) returns must name this process to hwpmc.
 */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <pmc.h>

#include "../check.h"

int
main(void)
{
	pmc_id_t id;
	pmc_value_t v1, v2;

	alarm(30);
	/*
	 * hwpmc(4) sends the owner SIGIO when a PMC loses its last target;
	 * FreeBSD ignores SIGIO by default, Linux would end the program.
	 */
	signal(SIGIO, SIG_IGN);

	CHECK(pmc_init() == 0);
	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_TC, 0, PMC_CPU_ANY,
	    &id, 0) == 0);
	CHECK(pmc_attach(id, getpid()) == 0);
	CHECK(pmc_start(id) == 0);
	v1 = v2 = 0;
	CHECK(pmc_read(id, &v1) == 0);
	CHECK(pmc_read(id, &v2) == 0);
	/* This process ran between the two reads. */
	CHECK(v2 > v1);
	CHECK(pmc_detach(id, getpid()) == 0);
	CHECK(pmc_release(id) == 0);
	printf("pid %d: %ju then %ju\n", (int)getpid(), (uintmax_t)v1,
	    (uintmax_t)v2);

	return (checks_result());
}
