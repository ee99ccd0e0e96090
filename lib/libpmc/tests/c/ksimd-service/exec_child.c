/*
 * exec(2) keeps the process: a child that a PMC follows execs a new
 * image, which the simulated machine learns of when that image calls
 * pmc(3) (the process is still the same one, under the same pid), and
 * the owner's log gets the PROCEXEC record FreeBSD writes, with the new
 * image's path.  Run with the log file's path; the child runs this
 * program again with "after" as its first argument.
 */

#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pmc.h>
#include <pmclog.h>

#include "../check.h"

/* The new image: one request, so that the machine sees the exec. */
static int
after(void)
{
	struct pmc_driverstats ds;

	alarm(20);
	CHECK(pmc_init() == 0);
	CHECK(pmc_get_driver_stats(&ds) == 0);
	return (failures == 0 ? 0 : 1);
}

int
main(int argc, char **argv)
{
	struct pmclog_ev ev;
	char self[4096], buf[1];
	void *log;
	pmc_id_t id;
	ssize_t n;
	pid_t pid;
	int go[2], fd, status, execs;

	if (argc > 1 && strcmp(argv[1], "after") == 0)
		return (after());
	if (argc != 2) {
		fprintf(stderr, "usage: exec_child logfile\n");
		return (2);
	}
	alarm(30);
	signal(SIGIO, SIG_IGN);
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	CHECK(n > 0);
	self[n > 0 ? n : 0] = '\0';

	CHECK(pmc_init() == 0);
	fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK(pmc_configure_logfile(fd) == 0);
	CHECK(pipe(go) == 0);
	fflush(stdout);
	if ((pid = fork()) == 0) {
		close(go[1]);
		/* Held until the PMC follows it. */
		if (read(go[0], buf, 1) != 1)
			_exit(3);
		execl(self, self, "after", (char *)NULL);
		_exit(4);
	}
	CHECK(pid > 0);
	close(go[0]);
	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_TC, 0, PMC_CPU_ANY,
	    &id, 0) == 0);
	CHECK(pmc_attach(id, pid) == 0);
	CHECK(pmc_start(id) == 0);
	CHECK(write(go[1], "g", 1) == 1);
	status = -1;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(pmc_release(id) == 0);
	CHECK(pmc_close_logfile() == 0);
	close(fd);

	/* The log has the child's exec, with the path it ran. */
	fd = open(argv[1], O_RDONLY);
	CHECK(fd >= 0);
	log = pmclog_open(fd);
	CHECK(log != NULL);
	execs = 0;
	while (log != NULL && pmclog_read(log, &ev) == 0) {
		if (ev.pl_type == PMCLOG_TYPE_PROCEXEC &&
		    ev.pl_u.pl_x.pl_pid == pid) {
			CHECK(strcmp(ev.pl_u.pl_x.pl_pathname, self) == 0);
			execs++;
		}
	}
	CHECK(execs >= 1);
	if (log != NULL)
		pmclog_close(log);
	printf("child %d exec'd %s: %d PROCEXEC record(s)\n", (int)pid, self,
	    execs);
	return (checks_result());
}
