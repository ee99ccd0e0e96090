/*
 * PMC_F_DESCENDANTS follows descendants that never call pmc(3): a child
 * that a PMC with PMC_F_DESCENDANTS and PMC_F_LOG_PROCEXIT follows forks
 * a grandchild; neither makes a request of its own.  As on FreeBSD, the
 * owner's log gets the PROCFORK record of that fork and the grandchild's
 * PROCEXIT when it ends.  Run with the log file's path.
 */

#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pmc.h>
#include <pmclog.h>

#include "../check.h"

/* Long enough for the machine to see the grandchild (it looks every
 * 100 ms for the children of processes that PMCs follow). */
static const struct timespec grandchild_life = { 0, 600000000 };

static void
child(int go, int report)
{
	char buf[1];
	pid_t g;

	alarm(20);
	if (read(go, buf, 1) != 1)
		_exit(3);
	if ((g = fork()) == 0) {
		nanosleep(&grandchild_life, NULL);
		_exit(0);
	}
	if (g < 0 || write(report, &g, sizeof(g)) != sizeof(g))
		_exit(4);
	_exit(waitpid(g, NULL, 0) == g ? 0 : 5);
}

/* Whether the log at `path` has both records yet. */
static int
logged(const char *path, pid_t pid, pid_t grandchild, int *forks, int *exits)
{
	struct pmclog_ev ev;
	void *log;
	int fd;

	*forks = *exits = 0;
	if ((fd = open(path, O_RDONLY)) < 0)
		return (0);
	if ((log = pmclog_open(fd)) != NULL) {
		while (pmclog_read(log, &ev) == 0) {
			if (ev.pl_type == PMCLOG_TYPE_PROCFORK &&
			    ev.pl_u.pl_f.pl_oldpid == pid &&
			    ev.pl_u.pl_f.pl_newpid == grandchild)
				(*forks)++;
			if (ev.pl_type == PMCLOG_TYPE_PROCEXIT &&
			    ev.pl_u.pl_e.pl_pid == grandchild)
				(*exits)++;
		}
		pmclog_close(log);
	}
	close(fd);
	return (*forks > 0 && *exits > 0);
}

int
main(int argc, char **argv)
{
	struct timespec pause = { 0, 50000000 };
	char path[4096];
	pmc_id_t id;
	pid_t pid, grandchild;
	int go[2], report[2], fd, status, tries, forks, exits;

	alarm(30);
	signal(SIGIO, SIG_IGN);
	if (argc > 1)
		snprintf(path, sizeof(path), "%s", argv[1]);
	else
		snprintf(path, sizeof(path), "/tmp/descendants_quiet.%d.log",
		    (int)getpid());
	CHECK(pmc_init() == 0);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK(pmc_configure_logfile(fd) == 0);
	CHECK(pipe(go) == 0);
	CHECK(pipe(report) == 0);
	fflush(stdout);
	if ((pid = fork()) == 0) {
		close(go[1]);
		close(report[0]);
		child(go[0], report[1]);
	}
	CHECK(pid > 0);
	close(go[0]);
	close(report[1]);
	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_TC,
	    PMC_F_DESCENDANTS | PMC_F_LOG_PROCEXIT, PMC_CPU_ANY, &id, 0) == 0);
	CHECK(pmc_attach(id, pid) == 0);
	CHECK(pmc_start(id) == 0);
	CHECK(write(go[1], "g", 1) == 1);
	grandchild = 0;
	CHECK(read(report[0], &grandchild, sizeof(grandchild)) ==
	    sizeof(grandchild));
	status = -1;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* The machine learns of the exits as the host's scans find them. */
	forks = exits = 0;
	for (tries = 0; tries < 100; tries++) {
		CHECK(pmc_flush_logfile() == 0);
		if (logged(path, pid, grandchild, &forks, &exits))
			break;
		nanosleep(&pause, NULL);
	}
	CHECK(forks == 1);
	CHECK(exits == 1);
	CHECK(pmc_release(id) == 0);
	CHECK(pmc_close_logfile() == 0);
	close(fd);
	if (argc <= 1)
		unlink(path);
	printf("child %d forked %d: %d PROCFORK, %d PROCEXIT\n", (int)pid,
	    (int)grandchild, forks, exits);
	return (checks_result());
}
