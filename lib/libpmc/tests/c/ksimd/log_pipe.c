/*
 * A process sampling PMC on this process, logging to a pipe that the
 * program reads back with pmclog(3): the log starts with INITIALIZE and
 * carries the samples, tagged with this process's pid, and ends with
 * CLOSELOG once the log is closed.
 */

#ifdef LOG_OVER_SOCKET
#include <sys/socket.h>
#endif

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <pmc.h>
#include <pmclog.h>

#include "../check.h"

/* Raised by the driver to kern.hwpmc.mincount (1000 by default). */
#define	RATE		1
/* One tick a call: two samples at the default mincount (1001, 2001). */
#define	SAMPLE_CALLS	2100
/* Times an empty read end is retried while the log is written. */
#define	RETRIES		2000

static int nrecords, nsamples;

/*
 * Reads records up to the first sample, or with 'closing' up to
 * CLOSELOG.  The log is written asynchronously by the kernel, so an
 * empty (nonblocking) read end is retried after a pause.  Returns why
 * reading stopped.
 */
static enum pmclog_state
read_log(void *log, int closing)
{
	struct pmc_driverstats ds;
	struct pmclog_ev ev;
	struct timespec pause = { 0, 1000000 };
	int tries;

	for (tries = 0; tries < RETRIES;) {
		if (pmclog_read(log, &ev) == 0) {
			if (nrecords++ == 0)
				CHECK(ev.pl_type == PMCLOG_TYPE_INITIALIZE);
			if (ev.pl_type == PMCLOG_TYPE_CALLCHAIN) {
				CHECK(ev.pl_u.pl_cc.pl_pid ==
				    (uint32_t)getpid());
				if (nsamples++ == 0 && !closing)
					return (PMCLOG_OK);
			}
			continue;
		}
		if (ev.pl_state != PMCLOG_REQUIRE_DATA)
			return (ev.pl_state);
		tries++;
		(void)pmc_get_driver_stats(&ds);
		nanosleep(&pause, NULL);
	}
	return (PMCLOG_REQUIRE_DATA);
}

int
main(void)
{
	struct pmc_driverstats ds;
	pmc_id_t id;
	void *log;
	int fds[2], i;

	alarm(30);
	/*
	 * hwpmc(4) sends the owner SIGIO when a PMC loses its last target;
	 * FreeBSD ignores SIGIO by default, Linux would end the program.
	 */
	signal(SIGIO, SIG_IGN);
#ifdef LOG_OVER_SOCKET
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
#else
	CHECK(pipe(fds) == 0);
#endif
	CHECK(fcntl(fds[0], F_SETFL, O_NONBLOCK) == 0);

	CHECK(pmc_init() == 0);
	CHECK(pmc_configure_logfile(fds[1]) == 0);
	CHECK(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_TS, 0, PMC_CPU_ANY,
	    &id, RATE) == 0);
	CHECK(pmc_set(id, RATE) == 0);
	CHECK(pmc_attach(id, getpid()) == 0);
	CHECK(pmc_start(id) == 0);
	for (i = 0; i < SAMPLE_CALLS; i++)
		CHECK(pmc_get_driver_stats(&ds) == 0);
	CHECK(pmc_flush_logfile() == 0);

	CHECK((log = pmclog_open(fds[0])) != NULL);
	if (log == NULL)
		return (1);
	CHECK(read_log(log, 0) == PMCLOG_OK);
	CHECK(nsamples >= 1);

	CHECK(pmc_stop(id) == 0);
	CHECK(pmc_release(id) == 0);
	CHECK(pmc_close_logfile() == 0);
	/* CLOSELOG comes last, after every record. */
	CHECK(read_log(log, 1) == PMCLOG_EOF);
	pmclog_close(log);
	printf("%d records, %d samples\n", nrecords, nsamples);
	close(fds[0]);
	close(fds[1]);

	return (checks_result());
}
