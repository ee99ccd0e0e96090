/*
 * Log descriptors that cannot be written: one that is closed is refused
 * with EBADF (fget_write in FreeBSD's pmclog_configure_log; hwpmc(4),
 * ERRORS); a pipe whose read end is closed is accepted, and the kernel's
 * log writer then gets EPIPE, which is kept and returned by
 * PMC_OP_FLUSHLOG (pmclog_flush).  The writer calls fo_write itself, not
 * write(2), so no SIGPIPE is sent to anyone for it: this program keeps
 * SIGPIPE's default action, which would kill it.
 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <pmc.h>

#include "../check.h"

/* A descriptor number the library is not about to take. */
#define	CLOSEDFD	200
/* Flushes tried while the log is written asynchronously. */
#define	TRIES		2000

int
main(void)
{
	struct timespec pause = { 0, 1000000 };
	int fd, fds[2], i, r;

	alarm(30);
	signal(SIGPIPE, SIG_DFL);
	/*
	 * hwpmc(4) sends the owner SIGIO when a log write fails (and when a
	 * PMC loses its last target); FreeBSD ignores SIGIO by default,
	 * Linux would end the program.
	 */
	signal(SIGIO, SIG_IGN);
	CHECK(pmc_init() == 0);

	/* A descriptor that was open, and is closed. */
	CHECK((fd = open("/dev/null", O_WRONLY)) >= 0);
	CHECK(dup2(fd, CLOSEDFD) == CLOSEDFD);
	CHECK(close(fd) == 0);
	CHECK(close(CLOSEDFD) == 0);
	errno = 0;
	CHECK(pmc_configure_logfile(CLOSEDFD) == -1);
	CHECK(errno == EBADF);

	/* A pipe nobody will read. */
	CHECK(pipe(fds) == 0);
	CHECK(close(fds[0]) == 0);
	CHECK(pmc_configure_logfile(fds[1]) == 0);
	CHECK(pmc_writelog(1) == 0);
	r = 0;
	for (i = 0; i < TRIES && r == 0; i++) {
		errno = 0;
		if ((r = pmc_flush_logfile()) == 0)
			nanosleep(&pause, NULL);
	}
	CHECK(r == -1);
	CHECK(errno == EPIPE);
	printf("EPIPE after %d flushes\n", i);
	errno = 0;
	CHECK(pmc_flush_logfile() == -1);
	CHECK(errno == EPIPE);

	CHECK(pmc_close_logfile() == 0);
	CHECK(pmc_configure_logfile(-1) == 0);
	close(fds[1]);

	return (checks_result());
}
