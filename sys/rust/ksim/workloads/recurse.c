/*
 * recurse [depth]: recursion deeper than short call-chain limits: a
 * linear descent `depth` frames deep (frame pointers kept, so every frame
 * is on the chain) and a tree recursion (Fibonacci).  Prints both
 * results; exits 0.
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

	put_str("recurse: ");
	put_u64(descend(depth, 1));
	put_str(" ");
	put_u64(fib(17));
	put_str("\n");
	return (0);
}
