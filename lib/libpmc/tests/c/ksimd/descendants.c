/*
 * PMC_F_DESCENDANTS: a PMC attached to a child follows the children it
 * forks (FreeBSD's fork hook attaches them); a PMC without it counts the
 * child alone.  Both PMCs are attached to the same child while it is
 * held on a pipe; the child then forks a grandchild and both run.
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
 * Each pmc(3) call lets one tick pass with the caller's thread on CPU 0
 * (LIBPMC_SIM_TICKS_PER_CALL=1), and a running SOFT-CLOCK.HARD counting
 * PMC counts 1 for each tick its target is on a CPU (hwpmc_soft.rs,
 * SoftRow::count): so each process's CALLS calls give at least CALLS.
 */
#define	CALLS	50

static void
run(void)
{
	struct pmc_driverstats ds;
	int i;

	for (i = 0; i < CALLS; i++)
		CHECK(pmc_get_driver_stats(&ds) == 0);
}

static void
child(int go)
{
	pid_t pid;
	char c;
	int status;

	/* Alarms are not inherited; the parent's, later, reports us. */
	alarm(20);
	CHECK(read(go, &c, 1) == 1);
	close(go);
	fflush(stdout);
	if ((pid = fork()) == 0) {
		alarm(15);
		run();
		_exit(failures == 0 ? 0 : 1);
	}
	CHECK(pid > 0);
	run();
	status = -1;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	_exit(failures == 0 ? 0 : 1);
}

int
main(void)
{
	pmc_id_t desc, plain;
	pmc_value_t vdesc, vplain;
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

	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_TC, PMC_F_DESCENDANTS,
	    PMC_CPU_ANY, &desc, 0) == 0);
	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_TC, 0, PMC_CPU_ANY,
	    &plain, 0) == 0);
	CHECK(pmc_attach(desc, pid) == 0);
	CHECK(pmc_attach(plain, pid) == 0);
	CHECK(pmc_start(desc) == 0);
	CHECK(pmc_start(plain) == 0);
	CHECK(write(go[1], "g", 1) == 1);
	close(go[1]);
	status = -1;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* The child reaped its grandchild first: both are gone. */
	vdesc = vplain = 0;
	CHECK(pmc_read(desc, &vdesc) == 0);
	CHECK(pmc_read(plain, &vplain) == 0);
	printf("descendants %ju, child alone %ju\n", (uintmax_t)vdesc,
	    (uintmax_t)vplain);
	/* The child's ticks count for both, the grandchild's for one. */
	CHECK(vplain >= CALLS);
	CHECK(vdesc >= 2 * CALLS);
	CHECK(vdesc >= vplain + CALLS);
	CHECK(pmc_release(desc) == 0);
	CHECK(pmc_release(plain) == 0);

	return (checks_result());
}
