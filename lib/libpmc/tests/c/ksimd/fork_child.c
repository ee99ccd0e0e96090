/*
 * A child forked after pmc_init() uses pmc(3) on its own: libpmc's state
 * is inherited across fork(2), as on FreeBSD, and the child is a process
 * of its own to hwpmc (its PMC is its own, attached by its own pid).
 */

#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <pmc.h>

#include "../check.h"

static void
child(void)
{
	pmc_id_t id;
	pmc_value_t v1, v2;

	/* Alarms are not inherited; the parent's, later, reports us. */
	alarm(20);
	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_TC, 0, PMC_CPU_ANY,
	    &id, 0) == 0);
	CHECK(pmc_attach(id, getpid()) == 0);
	CHECK(pmc_start(id) == 0);
	v1 = v2 = 0;
	CHECK(pmc_read(id, &v1) == 0);
	CHECK(pmc_read(id, &v2) == 0);
	CHECK(v2 > v1);
	CHECK(pmc_stop(id) == 0);
	CHECK(pmc_release(id) == 0);
	printf("child %d: %ju then %ju\n", (int)getpid(), (uintmax_t)v1,
	    (uintmax_t)v2);
	fflush(stdout);
	_exit(failures == 0 ? 0 : 1);
}

int
main(void)
{
	pid_t pid;
	int status;

	alarm(30);
	/*
	 * hwpmc(4) sends the owner SIGIO when a PMC loses its last target;
	 * FreeBSD ignores SIGIO by default, Linux would end the program.
	 */
	signal(SIGIO, SIG_IGN);

	CHECK(pmc_init() == 0);
	fflush(stdout);
	if ((pid = fork()) == 0)
		child();
	CHECK(pid > 0);
	status = -1;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	return (checks_result());
}
