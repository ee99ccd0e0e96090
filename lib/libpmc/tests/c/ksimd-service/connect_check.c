/*
 * Whether this process, with whatever ids it was started with, can use
 * the daemon: pmc_init() and a process PMC on itself.  Exits 2 when
 * pmc_init() fails (libpmc says why on standard error), 1 when a later
 * check fails, 0 with "ok" last when all of it works.
 */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

	if (pmc_init() != 0) {
		fprintf(stderr, "pmc_init: %s (errno %d)\n", strerror(errno),
		    errno);
		return (2);
	}
	printf("uid %d gid %d\n", (int)getuid(), (int)getgid());
	CHECK(pmc_ncpu() > 0);
	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_TC, 0, PMC_CPU_ANY,
	    &id, 0) == 0);
	CHECK(pmc_attach(id, getpid()) == 0);
	CHECK(pmc_start(id) == 0);
	v1 = v2 = 0;
	CHECK(pmc_read(id, &v1) == 0);
	CHECK(pmc_read(id, &v2) == 0);
	/* This process ran between the two reads. */
	CHECK(v2 > v1);
	CHECK(pmc_stop(id) == 0);
	CHECK(pmc_release(id) == 0);

	return (checks_result());
}
