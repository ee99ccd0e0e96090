/* Host shim for building FreeBSD's pmclog.c on an LP64 Linux host: only
 * what that file takes from <machine/pmc_mdep.h>. Written for the
 * benchmark (see tools/bench/freebsd-pmclog); tools/pmclog-compat/check
 * uses it too. */
#ifndef BENCH_SHIM_PMC_MDEP_H
#define BENCH_SHIM_PMC_MDEP_H
#if !defined(__LP64__)
#error "the side-by-side benchmark shim assumes an LP64 host"
#endif
/* An address in a log record is a 64-bit value on LP64 hosts. */
#define PMCLOG_READADDR PMCLOG_READ64
#endif
