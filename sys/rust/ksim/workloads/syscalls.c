/*
 * syscalls [rounds]: enters the kernel often: getpid and sched_yield every
 * round, write every eighth.  Exits 0 when getpid kept its value.
 */
#include "ksim_workload.h"

int
main(int argc, char **argv)
{
	uint64_t rounds = arg_u64(argc, argv, 1, 64);
	pid_t pid = getpid();
	int same = 1;

	for (uint64_t r = 0; r < rounds; r++) {
		if (getpid() != pid)
			same = 0;
		sched_yield();
		if (r % 8 == 0) {
			put_str("syscalls: round ");
			put_u64(r);
			put_str("\n");
		}
	}
	return (same ? 0 : 1);
}
