/*
 * A client that holds everything an owner can hold and then goes away
 * without releasing any of it: a system-mode counting PMC (TSC on CPU
 * 0), a process-mode counting PMC attached to itself and running, and a
 * log on a pipe.  It prints "ready PID" once all of it is in place, then
 * with "block" waits until it is killed, or with "exit" exits at once
 * (its connection closes with its process, nothing released).  With
 * "full" it first writes more user records to the log than the pipe,
 * which nobody reads, holds, flushes them and waits until the pipe is
 * full, so that the kernel's log writer is blocked on it, records left,
 * when the test kills it.  "held" does the same with the pipe's read end
 * held by a child that never reads ("ready PID reader CHILD"): the dying
 * owner's log cannot drain until the test kills that child too.
 */

#include <sys/ioctl.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pmc.h>

#include "../check.h"

/*
 * User records (USERDATA, at least 16 bytes each) that fill a host pipe
 * (64 KiB) twice over.
 */
#define	FULL_RECORDS	8192

/*
 * Whether the log's writer fills the pipe (of which 'rd' is the read
 * end) within a few seconds: then it is blocked with records left.
 */
static int
pipe_fills(int rd)
{
#ifdef F_GETPIPE_SZ
	struct pmc_driverstats ds;
	struct timespec pause = { 0, 1000000 };
	int capacity, queued, tries;

	if ((capacity = fcntl(rd, F_GETPIPE_SZ)) <= 0)
		return (0);
	for (tries = 0; tries < 5000; tries++) {
		if (ioctl(rd, FIONREAD, &queued) == 0 && queued >= capacity)
			return (1);
		/* The machine runs its writer between requests. */
		(void)pmc_get_driver_stats(&ds);
		nanosleep(&pause, NULL);
	}
	return (0);
#else
	(void)rd;
	return (1);
#endif
}

int
main(int argc, char **argv)
{
	pmc_id_t sys, proc;
	pmc_value_t v;
	pid_t reader;
	int fds[2], block, full, held, i;

	if (argc != 2 || (strcmp(argv[1], "block") != 0 &&
	    strcmp(argv[1], "exit") != 0 && strcmp(argv[1], "full") != 0 &&
	    strcmp(argv[1], "held") != 0)) {
		fprintf(stderr, "usage: crash_client block|exit|full|held\n");
		return (64);
	}
	block = strcmp(argv[1], "exit") != 0;
	held = strcmp(argv[1], "held") == 0;
	full = held || strcmp(argv[1], "full") == 0;
	/* A backstop: the test kills a blocked client long before. */
	alarm(60);
	/*
	 * hwpmc(4) sends the owner SIGIO when a PMC loses its last target;
	 * FreeBSD ignores SIGIO by default, Linux would end the program.
	 */
	signal(SIGIO, SIG_IGN);

	CHECK(pmc_init() == 0);
	CHECK(pipe(fds) == 0);
	reader = 0;
	if (held) {
		fflush(stdout);
		if ((reader = fork()) == 0) {
			/* Holds the read end, never reads; not for ever. */
			alarm(60);
			close(fds[1]);
			for (;;)
				pause();
		}
		CHECK(reader > 0);
	}
	CHECK(pmc_configure_logfile(fds[1]) == 0);
	CHECK(pmc_allocate("TSC", PMC_MODE_SC, 0, 0, &sys, 0) == 0);
	CHECK(pmc_start(sys) == 0);
	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_TC, 0, PMC_CPU_ANY,
	    &proc, 0) == 0);
	CHECK(pmc_attach(proc, getpid()) == 0);
	CHECK(pmc_start(proc) == 0);
	v = 0;
	CHECK(pmc_read(sys, &v) == 0);
	CHECK(pmc_read(proc, &v) == 0);
	if (full) {
		for (i = 0; i < FULL_RECORDS && failures == 0; i++)
			CHECK(pmc_writelog((uint32_t)i) == 0);
		CHECK(pmc_flush_logfile() == 0);
		CHECK(pipe_fills(fds[0]));
	}
	if (held)
		close(fds[0]);
	if (failures != 0) {
		fprintf(stderr, "%d checks failed\n", failures);
		return (1);
	}

	if (held)
		printf("ready %d reader %d\n", (int)getpid(), (int)reader);
	else
		printf("ready %d\n", (int)getpid());
	fflush(stdout);
	if (!block) {
		printf("ok\n");
		return (0);
	}
	for (;;)
		pause();
}
