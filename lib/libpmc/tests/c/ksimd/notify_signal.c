/*
 * Modelled on perf's bp_signal_overflow test: a sampling PMC on this
 * process (SOFT CLOCK.HARD: one event a clock tick while the process
 * runs) with pmc_notify(3) asking for a realtime signal at every sample.
 * A signal handler counts the signals; a counting PMC of the same event
 * counts the events.  Exactly events / period signals arrive, each with
 * the PMC's id in si_value and SI_QUEUE in si_code, and the descriptor's
 * last record agrees.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pmc.h>

#include "../notify.h"

/* Raised by the driver to kern.hwpmc.mincount: keep it there. */
#define	PERIOD		1000
/* The signals the run must make. */
#define	OVERFLOWS	5
/* One tick a call (LIBPMC_SIM_TICKS_PER_CALL=1). */
#define	CALLS		(OVERFLOWS * PERIOD + PERIOD / 2)

static volatile sig_atomic_t nsignals, bad_value, bad_code;
static pmc_id_t sampler;

static void
on_overflow(int sig, siginfo_t *info, void *uc)
{
	(void)sig;
	(void)uc;
	nsignals++;
	if ((pmc_id_t)info->si_value.sival_int != sampler)
		bad_value++;
	if (info->si_code != SI_QUEUE)
		bad_code++;
}

/* Reads records until one says `want` notifications, or 10 s pass. */
static int
wait_notifications(int fd, uint64_t want, struct pmc_notification *last)
{
	struct pollfd pfd;
	int tries;

	for (tries = 0; tries < 1000; tries++) {
		pfd.fd = fd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		if (poll(&pfd, 1, 10) > 0 && (pfd.revents & POLLIN) != 0) {
			if (read(fd, last, sizeof(*last)) != sizeof(*last))
				return (-1);
			if (last->pn_notifications >= want)
				return (0);
		}
		/* Time passes on the machine at each call. */
		(void)pmc_writelog(0);
	}
	return (-1);
}

int
main(void)
{
	struct pmc_notification rec;
	pmc_id_t counter;
	pmc_value_t events, v;
	uint32_t caps;
	int ended, fd, i, tries;

	alarm(60);
	signal(SIGIO, SIG_IGN);
	catch_signal(SIGRTMIN, on_overflow);

	init_with_log();
	caps = 0;
	CHECK(pmc_extcaps(&caps) == 0);
	CHECK((caps & PMC_EXTCAP_NOTIFY) != 0);
	sampler = clock_pmc(PMC_MODE_TS, PERIOD);
	counter = clock_pmc(PMC_MODE_TC, 0);
	/* A counting PMC has nothing to notify of. */
	CHECK(pmc_notify(counter, 0, 1, 0, SIGRTMIN, &fd) == -1 &&
	    errno == EINVAL);
	fd = -1;
	CHECK(pmc_notify(sampler, 0, 1, 0, SIGRTMIN, &fd) == 0);
	CHECK(fd >= 0);
	CHECK(pmc_notify(sampler, 0, 1, 0, SIGRTMIN, &i) == -1 &&
	    errno == EBUSY);

	CHECK(pmc_start(counter) == 0);
	CHECK(pmc_start(sampler) == 0);
	for (i = 0; i < CALLS; i++)
		CHECK(pmc_read(counter, &v) == 0);
	CHECK(pmc_stop(sampler) == 0);
	CHECK(pmc_stop(counter) == 0);
	CHECK(pmc_read(counter, &events) == 0);
	printf("events %ju\n", (uintmax_t)events);
	CHECK(events / PERIOD == OVERFLOWS);

	memset(&rec, 0, sizeof(rec));
	CHECK(wait_notifications(fd, events / PERIOD, &rec) == 0);
	CHECK(rec.pn_pmcid == sampler);
	CHECK(rec.pn_notifications == events / PERIOD);
	CHECK(rec.pn_samples == events / PERIOD);
	CHECK(rec.pn_dropped == 0);
	CHECK((rec.pn_flags & PMC_NOTIFICATION_END) == 0);
	/* Signals come a little after the records: wait for the last. */
	for (tries = 0; tries < 5000 && nsignals < (int)(events / PERIOD);
	    tries++)
		pause_a_little();
	printf("signals %d\n", (int)nsignals);
	CHECK(nsignals == (int)(events / PERIOD));
	CHECK(bad_value == 0);
	CHECK(bad_code == 0);

	/* Releasing the PMC ends the notifications. */
	CHECK(pmc_release(sampler) == 0);
	CHECK(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
	ended = 0;
	for (tries = 0; tries < 1000; tries++) {
		ssize_t n = read(fd, &rec, sizeof(rec));

		if (n == 0)
			break;
		if (n == (ssize_t)sizeof(rec)) {
			ended = (rec.pn_flags & PMC_NOTIFICATION_END) != 0;
			continue;
		}
		CHECK(n == -1 && errno == EAGAIN);
		pause_a_little();
	}
	CHECK(tries < 1000);
	CHECK(ended);
	CHECK(nsignals == (int)(events / PERIOD));
	CHECK(pmc_release(counter) == 0);
	close(fd);

	return (checks_result());
}
