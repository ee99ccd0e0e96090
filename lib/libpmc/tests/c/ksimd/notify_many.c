/*
 * Many PMCs notify at once: eight sampling PMCs on this process, of one
 * clock event with four periods, each with its descriptor and a signal
 * carrying its id.  Every PMC gets exactly events / period signals and
 * records, counted apart by si_value.
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

#define	NPMC		8
#define	CALLS		6100

static const unsigned periods[NPMC] = {
	1000, 1000, 1500, 1500, 2000, 2000, 3000, 3000
};
static pmc_id_t ids[NPMC];
static volatile sig_atomic_t hits[NPMC], strays;

static void
on_overflow(int sig, siginfo_t *info, void *uc)
{
	int i;

	(void)sig;
	(void)uc;
	for (i = 0; i < NPMC; i++)
		if ((pmc_id_t)info->si_value.sival_int == ids[i]) {
			hits[i]++;
			return;
		}
	strays++;
}

int
main(void)
{
	struct pmc_notification rec[NPMC];
	struct pollfd pfd[NPMC];
	pmc_id_t counter;
	pmc_value_t events, v;
	int done, fds[NPMC], i, tries;

	alarm(60);
	signal(SIGIO, SIG_IGN);
	catch_signal(SIGRTMIN, on_overflow);

	init_with_log();
	counter = clock_pmc(PMC_MODE_TC, 0);
	for (i = 0; i < NPMC; i++) {
		ids[i] = clock_pmc(PMC_MODE_TS, periods[i]);
		CHECK(pmc_notify(ids[i], 0, 1, 0, SIGRTMIN, &fds[i]) == 0);
		CHECK(fcntl(fds[i], F_SETFL, O_NONBLOCK) == 0);
		memset(&rec[i], 0, sizeof(rec[i]));
	}
	CHECK(pmc_start(counter) == 0);
	for (i = 0; i < NPMC; i++)
		CHECK(pmc_start(ids[i]) == 0);
	for (i = 0; i < CALLS; i++)
		CHECK(pmc_read(counter, &v) == 0);
	for (i = 0; i < NPMC; i++)
		CHECK(pmc_stop(ids[i]) == 0);
	CHECK(pmc_read(counter, &events) == 0);
	printf("events %ju\n", (uintmax_t)events);

	/* The records: each PMC's last one counts its own samples. */
	for (tries = 0; tries < 2000; tries++) {
		done = 0;
		for (i = 0; i < NPMC; i++) {
			pfd[i].fd = fds[i];
			pfd[i].events = POLLIN;
			pfd[i].revents = 0;
		}
		(void)poll(pfd, NPMC, 0);
		for (i = 0; i < NPMC; i++) {
			if ((pfd[i].revents & POLLIN) != 0)
				CHECK(read(fds[i], &rec[i], sizeof(rec[i])) ==
				    sizeof(rec[i]));
			if (rec[i].pn_samples >= events / periods[i] &&
			    hits[i] >= (int)(events / periods[i]))
				done++;
		}
		if (done == NPMC)
			break;
		pause_a_little();
		(void)pmc_writelog(0);
	}
	for (i = 0; i < NPMC; i++) {
		printf("pmc %#x: period %u, %ju samples, %d signals\n",
		    ids[i], periods[i], (uintmax_t)rec[i].pn_samples,
		    (int)hits[i]);
		CHECK(rec[i].pn_pmcid == ids[i]);
		/* Stopped before the last reads: no more samples came. */
		CHECK(rec[i].pn_samples <= events / periods[i] + 1);
		CHECK(rec[i].pn_samples >= events / periods[i]);
		CHECK(rec[i].pn_notifications == rec[i].pn_samples);
		CHECK(hits[i] == (int)rec[i].pn_samples);
	}
	CHECK(strays == 0);
	for (i = 0; i < NPMC; i++) {
		CHECK(pmc_release(ids[i]) == 0);
		close(fds[i]);
	}
	CHECK(pmc_release(counter) == 0);
	return (checks_result());
}
