/*
 * recurse [depth [rounds]]: recursion deeper than short call-chain
 * limits: a linear descent `depth` frames deep (frame pointers kept, so
 * every frame is on the chain) and a tree recursion (Fibonacci), `rounds`
 * times.  Prints both results; exits 0.
 */
#include "ksim_workload.h"

static __attribute__((noinline)) uint64_t
descend(uint64_t n, uint64_t acc)
{
	volatile uint64_t local = acc * 31 + n;

	if (n == 0)
		return (local);
	return (descend(n - 1, local) + 1);
}

static __attribute__((noinline)) uint64_t
fib(uint64_t n)
{
	if (n < 2)
		return (n);
	return (fib(n - 1) + fib(n - 2));
}

int
main(int argc, char **argv)
{
	uint64_t depth = arg_u64(argc, argv, 1, 600);
	uint64_t rounds = arg_u64(argc, argv, 2, 1);
	uint64_t deep = 0, tree = 0;

	for (uint64_t r = 0; r < rounds; r++) {
		deep = descend(depth, 1);
		tree = fib(17);
	}
	put_str("recurse: ");
	put_u64(deep);
	put_str(" ");
	put_u64(tree);
	put_str("\n");
	return (0);
}
