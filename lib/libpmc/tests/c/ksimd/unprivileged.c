/*
 * What hwpmc refuses an unprivileged process, as FreeBSD's hwpmc_mod.c
 * does: system-mode PMCs (priv_check(PRIV_PMC_SYSTEM) while
 * security.bsd.unprivileged_syspmcs is 0, its default), PMC_OP_PMCADMIN
 * (priv_check(PRIV_PMC_MANAGE)) and attaching to another user's process
 * (p_candebug(9)), each with EPERM; a process PMC on itself it may use.
 * Runs as root; the child drops to nobody (65534) after pmc_init().
 */

#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <pmc.h>

#include "../check.h"

#define	NOBODY	65534

static void
child(void)
{
	pmc_id_t id;
	pmc_value_t v1, v2;
	gid_t gid;

	/* Alarms are not inherited; the parent's, later, reports us. */
	alarm(20);
	gid = NOBODY;
	CHECK(setgroups(1, &gid) == 0);
	CHECK(setgid(NOBODY) == 0);
	CHECK(setuid(NOBODY) == 0);
	if (failures != 0 || getuid() != NOBODY || geteuid() != NOBODY)
		_exit(2);

	/* System-mode PMCs, counting and sampling. */
	errno = 0;
	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_SC, 0, 0, &id,
	    0) == -1);
	CHECK(errno == EPERM);
	errno = 0;
	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_SS, 0, 0, &id,
	    1000) == -1);
	CHECK(errno == EPERM);

	/* PMC_OP_PMCADMIN, whatever the row. */
	errno = 0;
	CHECK(pmc_disable(0, 0) == -1);
	CHECK(errno == EPERM);
	errno = 0;
	CHECK(pmc_enable(0, 0) == -1);
	CHECK(errno == EPERM);

	/* A process PMC on itself needs no privilege. */
	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_TC, 0, PMC_CPU_ANY,
	    &id, 0) == 0);
	CHECK(pmc_attach(id, getpid()) == 0);
	CHECK(pmc_start(id) == 0);
	v1 = v2 = 0;
	CHECK(pmc_read(id, &v1) == 0);
	CHECK(pmc_read(id, &v2) == 0);
	CHECK(v2 > v1);
	CHECK(pmc_stop(id) == 0);

	/* Its root parent it may not debug, so not attach to either. */
	errno = 0;
	CHECK(pmc_attach(id, getppid()) == -1);
	CHECK(errno == EPERM);
	CHECK(pmc_release(id) == 0);
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

	if (getuid() != 0) {
		fprintf(stderr, "unprivileged: must run as root\n");
		return (1);
	}
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
