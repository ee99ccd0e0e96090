/*
 * faults <what>: does one wrong thing, for the tests of how the kernel
 * handles it: "segv" stores to an unmapped address, "ill" executes an
 * undefined instruction, "nosys" makes a system call the kernel does not
 * have, "badfd" writes to a descriptor that is not open and exits with
 * the errno it got.
 */
#include "ksim_workload.h"

static int
same(const char *a, const char *b)
{
	while (*a != '\0' && *a == *b) {
		a++;
		b++;
	}
	return (*a == *b);
}

int
main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "";

	if (same(what, "segv")) {
		*(volatile int *)0x10 = 1;
	} else if (same(what, "ill")) {
#if defined(__x86_64__)
		__asm__ volatile("ud2");
#else
		__asm__ volatile("udf #0");
#endif
	} else if (same(what, "nosys")) {
		__ksim_syscall_number(9999);
	} else if (same(what, "badfd")) {
		if (write(99, "x", 1) != -1)
			return (100);
		return (errno);
	}
	return (1);
}
