/*
 * A log on /dev/full: configuring it succeeds, as FreeBSD's fget_write
 * does, and the kernel's log writer then fails with ENOSPC.  As in
 * FreeBSD's hwpmc_logging.c, the error is kept (po_error) and returned
 * by every PMC_OP_FLUSHLOG after it (pmclog_flush), until the log is
 * deconfigured; closing the log still succeeds (pmclog_close returns 0).
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

/* Flushes tried while the log is written asynchronously. */
#define	TRIES	2000

int
main(void)
{
	struct timespec pause = { 0, 1000000 };
	int fd, i, r;

	alarm(30);
	/*
	 * hwpmc(4) sends the owner SIGIO when a log write fails (and when a
	 * PMC loses its last target); FreeBSD ignores SIGIO by default,
	 * Linux would end the program.
	 */
	signal(SIGIO, SIG_IGN);

	CHECK((fd = open("/dev/full", O_WRONLY)) >= 0);
	CHECK(pmc_init() == 0);
	CHECK(pmc_configure_logfile(fd) == 0);
	CHECK(pmc_writelog(1) == 0);

	/* The first flushes may come before the writer has run. */
	r = 0;
	for (i = 0; i < TRIES && r == 0; i++) {
		errno = 0;
		if ((r = pmc_flush_logfile()) == 0)
			nanosleep(&pause, NULL);
	}
	CHECK(r == -1);
	CHECK(errno == ENOSPC);
	printf("ENOSPC after %d flushes\n", i);
	/* The error stays until the log is deconfigured. */
	errno = 0;
	CHECK(pmc_flush_logfile() == -1);
	CHECK(errno == ENOSPC);

	CHECK(pmc_close_logfile() == 0);
	CHECK(pmc_configure_logfile(-1) == 0);
	/* No log any more. */
	errno = 0;
	CHECK(pmc_flush_logfile() == -1);
	CHECK(errno == EINVAL);
	close(fd);

	return (checks_result());
}
