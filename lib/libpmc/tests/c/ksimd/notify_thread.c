/*
 * The signal of a notification goes to the thread that asked for it: a
 * second thread calls pmc_notify(3); the main thread, which lets the
 * machine's time pass, takes none of the signals, though it has the signal
 * unblocked too (a signal sent to the process could go to either).
 */

#include <sys/syscall.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pmc.h>

#include "../notify.h"

#define	PERIOD		1000
#define	OVERFLOWS	4

static pmc_id_t sampler;
static volatile long asker_tid;
static volatile sig_atomic_t to_asker, to_others, asked, done;

static long
my_tid(void)
{
	return (syscall(SYS_gettid));
}

static void
on_overflow(int sig, siginfo_t *info, void *uc)
{
	(void)sig;
	(void)info;
	(void)uc;
	if (my_tid() == asker_tid)
		to_asker++;
	else
		to_others++;
}

static void *
asker(void *arg)
{
	int fd;

	(void)arg;
	asker_tid = my_tid();
	CHECK(pmc_notify(sampler, 0, 1, 0, SIGRTMIN, &fd) == 0);
	asked = 1;
	/* Stay alive, with the signal unblocked, until the run is over. */
	while (!done)
		pause_a_little();
	close(fd);
	return (NULL);
}

int
main(void)
{
	pthread_t t;
	int i, tries;

	alarm(60);
	signal(SIGIO, SIG_IGN);
	catch_signal(SIGRTMIN, on_overflow);

	init_with_log();
	sampler = clock_pmc(PMC_MODE_TS, PERIOD);
	CHECK(pthread_create(&t, NULL, asker, NULL) == 0);
	for (tries = 0; tries < 10000 && !asked; tries++)
		pause_a_little();
	CHECK(asked);
	CHECK(pmc_start(sampler) == 0);
	for (i = 0; i < OVERFLOWS * PERIOD + PERIOD / 2; i++)
		CHECK(pmc_writelog(0) == 0);
	CHECK(pmc_stop(sampler) == 0);
	for (tries = 0; tries < 5000 && to_asker < OVERFLOWS; tries++)
		pause_a_little();
	done = 1;
	CHECK(pthread_join(t, NULL) == 0);
	printf("signals: %d to the asking thread, %d to others\n",
	    (int)to_asker, (int)to_others);
	CHECK(to_asker == OVERFLOWS);
	CHECK(to_others == 0);
	CHECK(pmc_release(sampler) == 0);
	return (checks_result());
}
