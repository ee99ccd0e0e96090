/*
 * A PMC attached to a child by its pid counts while the child runs; once
 * the child is reaped its pid names no process, so detaching fails with
 * ESRCH (pfind(9) fails in FreeBSD's pmc_do_op_pmcdetach), and the PMC
 * keeps the count the child accumulated.
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

/*
 * Each pmc(3) call lets a tick pass with the caller on CPU 0 (the test
 * runs with LIBPMC_SIM_TICKS_PER_CALL=1), and a SOFT-CLOCK.HARD counting
 * PMC counts 1 a tick of its target: the child's calls give at least this.
 */
#define	CHILD_CALLS	20

static void
child(int go)
{
	struct pmc_driverstats ds;
	char c;
	int i;

	/* Alarms are not inherited; the parent's, later, reports us. */
	alarm(20);
	/* Held until the parent's PMC runs on us. */
	CHECK(read(go, &c, 1) == 1);
	for (i = 0; i < CHILD_CALLS; i++)
		CHECK(pmc_get_driver_stats(&ds) == 0);
	_exit(failures == 0 ? 0 : 1);
}

int
main(void)
{
	pmc_id_t id;
	pmc_value_t v;
	pid_t pid;
	int go[2], status;

	alarm(30);
	/*
	 * hwpmc(4) sends the owner SIGIO when a PMC loses its last target;
	 * FreeBSD ignores SIGIO by default, Linux would end the program.
	 */
	signal(SIGIO, SIG_IGN);

	CHECK(pmc_init() == 0);
	CHECK(pipe(go) == 0);
	fflush(stdout);
	if ((pid = fork()) == 0) {
		close(go[1]);
		child(go[0]);
	}
	CHECK(pid > 0);
	close(go[0]);

	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_TC, 0, PMC_CPU_ANY,
	    &id, 0) == 0);
	CHECK(pmc_attach(id, pid) == 0);
	CHECK(pmc_start(id) == 0);
	CHECK(write(go[1], "g", 1) == 1);
	close(go[1]);
	status = -1;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* Reaped: the pid is no process any more. */
	errno = 0;
	CHECK(pmc_detach(id, pid) == -1);
	CHECK(errno == ESRCH);
	v = 0;
	CHECK(pmc_read(id, &v) == 0);
	CHECK(v >= CHILD_CALLS);
	CHECK(pmc_release(id) == 0);
	printf("child %d counted %ju\n", (int)pid, (uintmax_t)v);

	return (checks_result());
}
