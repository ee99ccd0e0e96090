/*
 * rdpmc syscall [rounds [getmsr]]: what a program using pmc(3) for a
 * self-counting PMC does, through hwpmc's system call (number `syscall`,
 * which modfind(2) gives pmc(3)): allocates an IAP counting PMC for
 * INST_RETIRED.ANY_P in user mode, attaches it to itself, starts it and,
 * unless getmsr is 0, asks for its RDPMC index (PMC_OP_PMCGETMSR, as
 * pmc_get_msr(3)).  Then it reads the counter with the rdpmc instruction
 * around `rounds` rounds of a loop and prints "rdpmc: DELTA msr: INDEX";
 * exits 0.  Without PMC_OP_PMCGETMSR the kernel leaves CR4.PCE off and
 * rdpmc faults (SIGBUS).  A failed call prints "error: OP ERRNO", exits 2.
 * On arm64 (no rdpmc) it exits 1 after the calls.
 */
#include "ksim_workload.h"

/* sys/pmc.h's operations and layouts (amd64). */
#define	PMC_OP_PMCALLOCATE	7
#define	PMC_OP_PMCATTACH	8
#define	PMC_OP_PMCGETMSR	10
#define	PMC_OP_PMCSTART		14
#define	PMC_CLASS_IAP		0x07
#define	PMC_MODE_TC		3
#define	PMC_CAP_USER		0x0002
#define	PMC_CAP_READ		0x0020
#define	PMC_CAP_WRITE		0x0040
#define	PMC_F_EV_PMU		0x0200
#define	PMC_CPU_ANY		0xFFFFFFFFu
#define	IAP_USR			(1ul << 16)

struct pmc_op_pmcallocate {
	uint32_t	pm_caps;
	uint32_t	pm_cpu;
	uint32_t	pm_class;
	uint32_t	pm_ev;
	uint32_t	pm_flags;
	uint32_t	pm_mode;
	uint32_t	pm_pmcid;
	uint64_t	pm_count;
	uint64_t	pm_md[4];	/* pm_iap_config, pm_iap_rsp, ... */
};

struct pmc_op_pmcattach {
	uint32_t	pm_pmc;
	int		pm_pid;
};

struct pmc_op_getmsr {
	uint32_t	pm_msr;
	uint32_t	pm_pmcid;
};

static long
pmc_call(long number, long op, void *arg)
{
	long r = __ksim_syscall2(number, op, (long)arg);

	if (r < 0) {
		put_str("error: ");
		put_u64((uint64_t)op);
		put_str(" ");
		put_u64((uint64_t)errno);
		put_str("\n");
		_exit(2);
	}
	return (r);
}

static uint64_t
read_counter(uint64_t index)
{
#if defined(__x86_64__)
	uint32_t lo, hi;

	__asm__ __volatile__("rdpmc" : "=a"(lo), "=d"(hi) : "c"((uint32_t)index));
	return ((uint64_t)hi << 32 | lo);
#else
	(void)index;
	return (0);
#endif
}

static __attribute__((noinline)) uint64_t
spin(uint64_t rounds)
{
	volatile uint64_t acc = 0;

	for (uint64_t r = 0; r < rounds; r++)
		acc += r ^ (acc << 1);
	return (acc);
}

int
main(int argc, char **argv)
{
	long number = (long)arg_u64(argc, argv, 1, 210);
	uint64_t rounds = arg_u64(argc, argv, 2, 1000);
	uint64_t getmsr = arg_u64(argc, argv, 3, 1);
	struct pmc_op_pmcallocate a;
	struct pmc_op_pmcattach at;
	struct pmc_op_getmsr gm;
	uint32_t id;
	uint64_t before, after;

	memset(&a, 0, sizeof(a));
	a.pm_caps = PMC_CAP_USER | PMC_CAP_READ | PMC_CAP_WRITE;
	a.pm_cpu = PMC_CPU_ANY;
	a.pm_class = PMC_CLASS_IAP;
	a.pm_flags = PMC_F_EV_PMU;
	a.pm_mode = PMC_MODE_TC;
	a.pm_md[0] = 0xC0 | IAP_USR;	/* INST_RETIRED.ANY_P, user mode */
	pmc_call(number, PMC_OP_PMCALLOCATE, &a);
	id = a.pm_pmcid;
	at.pm_pmc = id;
	at.pm_pid = getpid();
	pmc_call(number, PMC_OP_PMCATTACH, &at);
	pmc_call(number, PMC_OP_PMCSTART, &id);
	gm.pm_msr = 0;
	gm.pm_pmcid = id;
	if (getmsr != 0)
		pmc_call(number, PMC_OP_PMCGETMSR, &gm);
	before = read_counter(gm.pm_msr);
	spin(rounds);
	after = read_counter(gm.pm_msr);
#if defined(__x86_64__)
	put_str("rdpmc: ");
	put_u64(after - before);
	put_str(" msr: ");
	put_u64(gm.pm_msr);
	put_str("\n");
	return (0);
#else
	(void)before;
	(void)after;
	return (1);
#endif
}
