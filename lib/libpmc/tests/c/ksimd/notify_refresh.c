/*
 * A refresh count, as perf's PERF_EVENT_IOC_REFRESH: pmc_notify(3) with
 * refresh 3 on a sampling PMC of this process.  The PMC stops at exactly
 * its third overflow although the run is long enough for many more: three
 * signals, three samples, then the descriptor's end (the end flag, POLLHUP,
 * end of file).
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pmc.h>

#include "../notify.h"

#define	PERIOD		1000
#define	REFRESH		3
/* Room for three times as many overflows as the refresh count allows. */
#define	CALLS		(3 * REFRESH * PERIOD)

static volatile sig_atomic_t nsignals;

static void
on_overflow(int sig, siginfo_t *info, void *uc)
{
	(void)sig;
	(void)info;
	(void)uc;
	nsignals++;
}

int
main(void)
{
	struct pmc_notification rec;
	struct pollfd pfd;
	pmc_id_t sampler, counter;
	pmc_value_t events, v;
	ssize_t n;
	int ended, fd, hup, i, tries;

	alarm(60);
	signal(SIGIO, SIG_IGN);
	catch_signal(SIGRTMIN + 1, on_overflow);

	init_with_log();
	sampler = clock_pmc(PMC_MODE_TS, PERIOD);
	counter = clock_pmc(PMC_MODE_TC, 0);
	CHECK(pmc_notify(sampler, 0, 1, REFRESH, SIGRTMIN + 1, &fd) == 0);
	CHECK(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
	CHECK(pmc_start(counter) == 0);
	CHECK(pmc_start(sampler) == 0);
	for (i = 0; i < CALLS; i++)
		CHECK(pmc_read(counter, &v) == 0);
	CHECK(pmc_read(counter, &events) == 0);
	printf("events %ju, room for %ju overflows\n", (uintmax_t)events,
	    (uintmax_t)(events / PERIOD));
	CHECK(events / PERIOD >= 3 * REFRESH);

	/* The end: one record with the end flag, POLLHUP, end of file. */
	ended = hup = 0;
	for (tries = 0; tries < 2000 && !(ended && hup); tries++) {
		pfd.fd = fd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		if (poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLHUP) != 0)
			hup = 1;
		n = read(fd, &rec, sizeof(rec));
		if (n == (ssize_t)sizeof(rec)) {
			CHECK(rec.pn_pmcid == sampler);
			if ((rec.pn_flags & PMC_NOTIFICATION_END) != 0) {
				CHECK(rec.pn_samples == REFRESH);
				CHECK(rec.pn_notifications == REFRESH);
				ended = 1;
			}
			continue;
		}
		CHECK(n == 0 || (n == -1 && errno == EAGAIN));
		pause_a_little();
	}
	CHECK(ended);
	CHECK(hup);
	CHECK(read(fd, &rec, sizeof(rec)) == 0);
	for (tries = 0; tries < 2000 && nsignals < REFRESH; tries++)
		pause_a_little();
	/* Any signal past the refresh count would have come by now. */
	for (tries = 0; tries < 100; tries++)
		pause_a_little();
	printf("signals %d\n", (int)nsignals);
	CHECK(nsignals == REFRESH);

	CHECK(pmc_stop(sampler) == 0);
	CHECK(pmc_release(sampler) == 0);
	CHECK(pmc_release(counter) == 0);
	close(fd);
	return (checks_result());
}
