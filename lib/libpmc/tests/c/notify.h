/*
 * What the notification test programs share: a signal handler with its
 * siginfo, a log on /dev/null (sampling PMCs need one), a SOFT-CLOCK.HARD
 * PMC of this process (one event a clock tick while it runs: one tick
 * passes at each pmc(3) call, LIBPMC_SIM_TICKS_PER_CALL=1), and a pause.
 */
#ifndef PMC_TEST_NOTIFY_H
#define	PMC_TEST_NOTIFY_H

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pmc.h>

#include "check.h"

static inline void
catch_signal(int sig, void (*handler)(int, siginfo_t *, void *))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(sig, &sa, NULL) == 0);
}

/* pmc_init() and a log on /dev/null. */
static inline void
init_with_log(void)
{
	int logfd;

	CHECK(pmc_init() == 0);
	CHECK((logfd = open("/dev/null", O_WRONLY)) >= 0);
	CHECK(pmc_configure_logfile(logfd) == 0);
}

/* A SOFT-CLOCK.HARD PMC in `mode` (count: its period) on this process. */
static inline pmc_id_t
clock_pmc(enum pmc_mode mode, uint64_t count)
{
	pmc_id_t id = 0;

	CHECK(pmc_allocate("SOFT-CLOCK.HARD", mode, 0, PMC_CPU_ANY, &id,
	    count) == 0);
	CHECK(pmc_attach(id, getpid()) == 0);
	return (id);
}

static inline void
pause_a_little(void)
{
	struct timespec pause = { 0, 1000000 };

	nanosleep(&pause, NULL);
}

#endif /* !PMC_TEST_NOTIFY_H */
