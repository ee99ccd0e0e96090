/*
 * A hardware sampling PMC on a real workload program: the simulated
 * machine (one CPU, Skylake) runs ksim's sort program while this program
 * lets time pass; a system-mode PMC of retired instructions on that CPU,
 * with pmc_notify(3) asking for a realtime signal at every overflow and a
 * refresh count of OVERFLOWS, stops at exactly that many overflows of the
 * PMU's counter, though the workload runs long enough for many more (a
 * counting PMC of the same event says how many): as many signals, each
 * naming the PMC, and an end record counting as many samples.
 */

#include <errno.h>
#include <poll.h>
#include <stdio.h>

#include <pmc.h>

#include "../notify.h"

#define	PERIOD		10000
#define	OVERFLOWS	5

static pmc_id_t sampler, counter;
static volatile sig_atomic_t nsignals, strays;

static void
on_overflow(int sig, siginfo_t *info, void *uc)
{
	(void)sig;
	(void)uc;
	if ((pmc_id_t)info->si_value.sival_int == sampler)
		nsignals++;
	else
		strays++;
}

int
main(void)
{
	struct pmc_notification rec;
	struct pollfd pfd;
	pmc_value_t events;
	ssize_t n;
	int ended, fd, i, tries;

	alarm(60);
	signal(SIGIO, SIG_IGN);
	catch_signal(SIGRTMIN, on_overflow);
	init_with_log();
	CHECK(pmc_allocate("instructions", PMC_MODE_SS, 0, 0, &sampler,
	    PERIOD) == 0);
	CHECK(pmc_allocate("instructions", PMC_MODE_SC, 0, 0, &counter,
	    0) == 0);
	CHECK(pmc_notify(sampler, 0, 1, OVERFLOWS, SIGRTMIN, &fd) == 0);
	CHECK(pmc_start(counter) == 0);
	CHECK(pmc_start(sampler) == 0);
	/* Each call lets a clock tick pass, in which the workload runs. */
	ended = 0;
	memset(&rec, 0, sizeof(rec));
	for (i = 0; i < 20000 && !ended; i++) {
		CHECK(pmc_writelog(0) == 0);
		pfd.fd = fd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		if (poll(&pfd, 1, 0) != 1)
			continue;
		n = read(fd, &rec, sizeof(rec));
		CHECK(n == sizeof(rec) || n == 0);
		ended = n == 0 || (rec.pn_flags & PMC_NOTIFICATION_END) != 0;
	}
	CHECK(ended);
	printf("%ju samples, %ju notifications after %d ticks\n",
	    (uintmax_t)rec.pn_samples, (uintmax_t)rec.pn_notifications, i);
	CHECK(rec.pn_pmcid == sampler);
	CHECK(rec.pn_samples == OVERFLOWS);
	CHECK(rec.pn_notifications == OVERFLOWS);
	CHECK(rec.pn_cpu == 0);
	/* The workload goes on: no more samples, no more signals. */
	for (i = 0; i < 200; i++)
		CHECK(pmc_writelog(0) == 0);
	for (tries = 0; tries < 2000 && nsignals < OVERFLOWS; tries++)
		pause_a_little();
	printf("signals %d\n", (int)nsignals);
	CHECK(nsignals == OVERFLOWS);
	CHECK(strays == 0);
	CHECK(pmc_read(counter, &events) == 0);
	printf("events %ju\n", (uintmax_t)events);
	CHECK(events >= 3 * OVERFLOWS * PERIOD);
	CHECK(pmc_stop(counter) == 0);
	CHECK(pmc_release(counter) == 0);
	CHECK(pmc_stop(sampler) == 0);
	CHECK(pmc_release(sampler) == 0);
	close(fd);
	return (checks_result());
}
