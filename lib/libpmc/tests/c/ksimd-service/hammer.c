/*
 * One of many clients hammering one daemon at once, for argv[1] seconds
 * of host time: each iteration allocates a process-mode counting PMC
 * (SOFT-CLOCK.HARD), attaches it to this process, starts, reads, stops
 * and releases it; about one iteration in eight also allocates, starts,
 * reads, stops and releases a system-mode TSC PMC on a random CPU, which
 * other clients may be using at the same time.  FreeBSD's TSC rows are
 * shareable (PMC_PHW_FLAG_IS_SHAREABLE), so system-mode TSC PMCs of
 * several owners share a CPU's row and the allocation succeeds; EBUSY,
 * should a driver refuse a row another owner holds, is counted and is
 * not a failure.  Any other failure is.  Prints what it did ("calls C
 * tsc T ebusy B counted V": the pmc(3) calls it made, the TSC PMCs it
 * used, the EBUSY answers, the sum of its process PMCs' first reads) and
 * "ok N", N the iterations, last.
 */

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <pmc.h>

#include "../check.h"

static uint64_t calls;

/* One pmc(3) call, counted, that must succeed. */
#define	CALL(expr) do {							\
	calls++;							\
	CHECK((expr) == 0);						\
} while (0)

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (ts.tv_sec + ts.tv_nsec / 1e9);
}

int
main(int argc, char **argv)
{
	pmc_id_t id;
	pmc_value_t v;
	uint64_t iterations, ebusy, counted, tsc;
	double end;
	int seconds, ncpu, cpu, r;

	if (argc != 2 || (seconds = atoi(argv[1])) <= 0) {
		fprintf(stderr, "usage: hammer seconds\n");
		return (64);
	}
	/* A backstop: one call takes far less than a minute. */
	alarm(seconds + 120);
	/*
	 * hwpmc(4) sends the owner SIGIO when a PMC loses its last target;
	 * FreeBSD ignores SIGIO by default, Linux would end the program.
	 */
	signal(SIGIO, SIG_IGN);
	srand((unsigned)getpid());

	if (pmc_init() != 0) {
		fprintf(stderr, "pmc_init: errno %d\n", errno);
		return (1);
	}
	CHECK((ncpu = pmc_ncpu()) > 0);
	if (ncpu <= 0)
		return (1);

	iterations = ebusy = counted = tsc = 0;
	end = now() + seconds;
	while (failures == 0 && now() < end) {
		iterations++;
		CALL(pmc_allocate("SOFT-CLOCK.HARD", PMC_MODE_TC, 0,
		    PMC_CPU_ANY, &id, 0));
		if (failures != 0)
			break;
		CALL(pmc_attach(id, getpid()));
		CALL(pmc_start(id));
		v = 0;
		CALL(pmc_read(id, &v));
		/* A clock tick passed with it running on this process. */
		CHECK(v >= 1);
		counted += v;
		CALL(pmc_stop(id));
		CALL(pmc_release(id));

		if (rand() % 8 != 0)
			continue;
		cpu = rand() % ncpu;
		calls++;
		r = pmc_allocate("TSC", PMC_MODE_SC, 0, cpu, &id, 0);
		if (r != 0 && errno == EBUSY) {
			ebusy++;
			continue;
		}
		if (r != 0) {
			fprintf(stderr, "%s:%d: TSC on CPU %d: errno %d\n",
			    __FILE__, __LINE__, cpu, errno);
			failures++;
			break;
		}
		tsc++;
		CALL(pmc_start(id));
		v = 0;
		CALL(pmc_read(id, &v));
		CALL(pmc_stop(id));
		CALL(pmc_release(id));
	}

	printf("calls %" PRIu64 " tsc %" PRIu64 " ebusy %" PRIu64
	    " counted %" PRIu64 "\n", calls, tsc, ebusy, counted);
	if (failures != 0) {
		fprintf(stderr, "%d checks failed after %" PRIu64
		    " iterations\n", failures, iterations);
		return (1);
	}
	printf("ok %" PRIu64 "\n", iterations);
	return (0);
}
