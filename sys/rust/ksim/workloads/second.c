/*
 * libsecond.so: a position-independent shared object with no relocations,
 * whose entry point (the ELF header's e_entry) is second_entry; mapobj
 * maps it with mmap(2) and calls it.
 */
#include "ksim_workload.h"
#include "second.h"

static __attribute__((noinline)) uint64_t
second_step(uint64_t n)
{
	return (second_work(n));
}

uint64_t
second_entry(uint64_t n)
{
	return (second_step(n));
}
