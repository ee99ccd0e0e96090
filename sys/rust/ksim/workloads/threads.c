/*
 * threads [nthreads [rounds]]: thr_new(2) starts nthreads workers (1 to 8,
 * default 4), each on a stack of its own; each hashes its own sequence
 * `rounds` times (default 200) and stores the result in memory the
 * threads share, then ends with thr_exit(2), which sets its state word.
 * The main thread waits for the state words with sched_yield, checks
 * every result against its own computation, and exits 0 when all match.
 */
#include "ksim_workload.h"

#define	MAX_THREADS	8
#define	STACK_SIZE	(64 * 1024)

struct work {
	uint64_t	index;
	uint64_t	rounds;
};

static char stacks[MAX_THREADS][STACK_SIZE] __attribute__((aligned(16)));
static volatile long done[MAX_THREADS];
static long tids[MAX_THREADS];
static uint64_t results[MAX_THREADS];
static struct work works[MAX_THREADS];

static __attribute__((noinline)) uint64_t
mix(uint64_t h, uint64_t v)
{
	h ^= v;
	return (h * 0x100000001b3UL);
}

static __attribute__((noinline)) uint64_t
compute(uint64_t index, uint64_t rounds)
{
	uint64_t h = 0xcbf29ce484222325UL + index;

	for (uint64_t r = 0; r < rounds; r++)
		for (uint64_t i = 0; i < 1000; i++)
			h = mix(h, i * (index + 1) + r);
	return (h);
}

static void
worker(void *arg)
{
	struct work *w = arg;

	results[w->index] = compute(w->index, w->rounds);
	thr_exit((long *)&done[w->index]);
}

int
main(int argc, char **argv)
{
	uint64_t n = arg_u64(argc, argv, 1, 4);
	uint64_t rounds = arg_u64(argc, argv, 2, 200);
	int bad = 0;

	if (n < 1 || n > MAX_THREADS) {
		put_str("threads: 1 to 8 threads\n");
		return (2);
	}
	for (uint64_t i = 0; i < n; i++) {
		struct thr_param p;

		works[i].index = i;
		works[i].rounds = rounds;
		memset(&p, 0, sizeof(p));
		p.start_func = worker;
		p.arg = &works[i];
		p.stack_base = stacks[i];
		p.stack_size = STACK_SIZE;
		p.child_tid = &tids[i];
		p.parent_tid = &tids[i];
		if (thr_new(&p, sizeof(p)) != 0) {
			put_str("threads: thr_new failed\n");
			return (2);
		}
	}
	for (uint64_t i = 0; i < n; i++)
		while (done[i] == 0)
			sched_yield();
	for (uint64_t i = 0; i < n; i++)
		if (tids[i] == 0 || results[i] != compute(i, rounds))
			bad = 1;
	put_str("threads: ");
	put_u64(n);
	put_str(" workers, ");
	put_u64(results[0]);
	put_str(bad ? " wrong\n" : " ok\n");
	return (bad);
}
