/*
 * Readiness: a thread blocked in poll(2) on a notification descriptor
 * (every COUNT samples) wakes when the COUNTth sample is in, while the
 * main thread lets the machine's clock run one tick per pmc(3) call: it
 * wakes before the next sample is due, and its first record counts COUNT
 * samples and one notification.  (How soon after the COUNTth sample is
 * measured by tools/bench/notify-latency, not here.)
 */

#include <sys/select.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <pmc.h>

#include "../notify.h"

#define	PERIOD		1000
#define	COUNT		3

static pmc_id_t sampler, counter;
static int fd;
static volatile int woke;
static pmc_value_t at_wake;
static struct pmc_notification first;

static void *
waiter(void *arg)
{
	struct pollfd pfd;

	(void)arg;
	pfd.fd = fd;
	pfd.events = POLLIN;
	pfd.revents = 0;
	if (poll(&pfd, 1, -1) == 1 && (pfd.revents & POLLIN) != 0) {
		CHECK(pmc_read(counter, (pmc_value_t *)&at_wake) == 0);
		CHECK(read(fd, &first, sizeof(first)) == sizeof(first));
		woke = 1;
	} else
		woke = -1;
	return (NULL);
}

int
main(void)
{
	pthread_t t;
	pmc_value_t v;
	int ended, i, tries;

	alarm(60);
	signal(SIGIO, SIG_IGN);
	init_with_log();
	sampler = clock_pmc(PMC_MODE_TS, PERIOD);
	counter = clock_pmc(PMC_MODE_TC, 0);
	CHECK(pmc_notify(sampler, 0, COUNT, 0, 0, &fd) == 0);
	CHECK(pthread_create(&t, NULL, waiter, NULL) == 0);
	CHECK(pmc_start(counter) == 0);
	CHECK(pmc_start(sampler) == 0);
	for (i = 0; i < 10 * COUNT * PERIOD && woke == 0; i++)
		CHECK(pmc_read(counter, &v) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(woke == 1);
	printf("woke at %ju events\n", (uintmax_t)at_wake);
	CHECK(first.pn_pmcid == sampler);
	CHECK(first.pn_notifications == 1);
	CHECK(first.pn_samples == COUNT);
	CHECK(at_wake >= COUNT * PERIOD);
	CHECK(at_wake < (COUNT + 1) * PERIOD);

	/*
	 * select(2) sees the end: the descriptor turns readable, and reads
	 * give the end record, then end of file.
	 */
	CHECK(pmc_stop(sampler) == 0);
	CHECK(pmc_release(sampler) == 0);
	ended = 0;
	for (tries = 0; tries < 2000; tries++) {
		struct timeval now = { 0, 0 };
		fd_set readable;
		ssize_t n;

		FD_ZERO(&readable);
		FD_SET(fd, &readable);
		if (select(fd + 1, &readable, NULL, NULL, &now) != 1) {
			(void)pmc_writelog(0);
			continue;
		}
		n = read(fd, &first, sizeof(first));
		if (n == 0)
			break;
		CHECK(n == sizeof(first));
		if ((first.pn_flags & PMC_NOTIFICATION_END) != 0)
			ended = 1;
	}
	CHECK(tries < 2000);
	CHECK(ended);
	CHECK(pmc_release(counter) == 0);
	close(fd);
	return (checks_result());
}
