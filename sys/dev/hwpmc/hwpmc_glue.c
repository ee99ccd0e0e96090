/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * hwpmc(4): the part of the driver that has to be C.  Module and system
 * call registration and the sysctls are linker-set entries made by kernel
 * macros, so they stay here; everything else is in the Rust archive,
 * entered through hwpmc_rs_modevent() and, for the system call, kpi's
 * dispatcher (sys/rust/kpi/kpi_glue.c), which calls the handler the
 * driver registers.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/counter.h>
#include <sys/kernel.h>
#include <sys/module.h>
#include <sys/pmc.h>
#include <sys/sysctl.h>
#include <sys/sysent.h>

#include "kpi_glue.h"

/* In the Rust archive (sys/modules/hwpmc/hwpmc_kmod.rs). */
int	hwpmc_rs_modevent(struct module *module, int cmd, void *arg);

/*
 * The driver's sysctls and loader tunables, declared as hwpmc_mod.c and
 * hwpmc_logging.c declare them: same names, types, access and defaults.
 * The kernel loads the CTLFLAG_TUN ones from the environment when it
 * links the module in; the driver reads them at load (resetting bad
 * values, as FreeBSD's does) through kpi_module_knobs below.
 *
 * kern.hwpmc itself belongs to kern_pmc.c, which every kernel with
 * HWPMC_HOOKS has; defining it again here would clash with it.
 */
SYSCTL_DECL(_kern_hwpmc);
SYSCTL_NODE(_kern_hwpmc, OID_AUTO, stats, CTLFLAG_RW | CTLFLAG_MPSAFE, 0,
    "HWPMC stats");

/* Allocated and freed by the driver (kpi::sysctl::Counter). */
struct pmc_driverstats pmc_stats;
SYSCTL_COUNTER_U64(_kern_hwpmc_stats, OID_AUTO, intr_ignored, CTLFLAG_RW,
    &pmc_stats.pm_intr_ignored, "# of interrupts ignored");
SYSCTL_COUNTER_U64(_kern_hwpmc_stats, OID_AUTO, intr_processed, CTLFLAG_RW,
    &pmc_stats.pm_intr_processed, "# of interrupts processed");
SYSCTL_COUNTER_U64(_kern_hwpmc_stats, OID_AUTO, intr_bufferfull, CTLFLAG_RW,
    &pmc_stats.pm_intr_bufferfull, "# of interrupts where buffer was full");
SYSCTL_COUNTER_U64(_kern_hwpmc_stats, OID_AUTO, syscalls, CTLFLAG_RW,
    &pmc_stats.pm_syscalls, "# of syscalls");
SYSCTL_COUNTER_U64(_kern_hwpmc_stats, OID_AUTO, syscall_errors, CTLFLAG_RW,
    &pmc_stats.pm_syscall_errors, "# of syscall_errors");
SYSCTL_COUNTER_U64(_kern_hwpmc_stats, OID_AUTO, buffer_requests, CTLFLAG_RW,
    &pmc_stats.pm_buffer_requests, "# of buffer requests");
SYSCTL_COUNTER_U64(_kern_hwpmc_stats, OID_AUTO, buffer_requests_failed,
    CTLFLAG_RW, &pmc_stats.pm_buffer_requests_failed,
    "# of buffer requests which failed");
SYSCTL_COUNTER_U64(_kern_hwpmc_stats, OID_AUTO, log_sweeps, CTLFLAG_RW,
    &pmc_stats.pm_log_sweeps, "# of times samples were processed");
SYSCTL_COUNTER_U64(_kern_hwpmc_stats, OID_AUTO, merges, CTLFLAG_RW,
    &pmc_stats.pm_merges, "# of times kernel stack was found for user trace");
SYSCTL_COUNTER_U64(_kern_hwpmc_stats, OID_AUTO, overwrites, CTLFLAG_RW,
    &pmc_stats.pm_overwrites,
    "# of times a sample was overwritten before being logged");

static int hwpmc_callchaindepth = PMC_CALLCHAIN_DEPTH;
SYSCTL_INT(_kern_hwpmc, OID_AUTO, callchaindepth, CTLFLAG_RDTUN,
    &hwpmc_callchaindepth, 0, "depth of call chain records");

/* Filled by the machine-dependent part (kpi_glue.c). */
char pmc_cpuid[PMC_CPUID_LEN];
SYSCTL_STRING(_kern_hwpmc, OID_AUTO, cpuid, CTLFLAG_RD, pmc_cpuid, 0,
    "cpu version string");

/*
 * The driver parses the tunable itself at load (CTLFLAG_NOFETCH); the
 * value and the parser are the driver's, behind kpi_sysctl_str_proc.
 * FreeBSD has it only in HWPMC_DEBUG kernels; this driver always has its
 * trace points.
 */
SYSCTL_PROC(_kern_hwpmc, OID_AUTO, debugflags,
    CTLTYPE_STRING | CTLFLAG_RWTUN | CTLFLAG_NOFETCH | CTLFLAG_MPSAFE,
    0, 0, kpi_sysctl_str_proc, "A", "debug flags");

static int hwpmc_hashsize = PMC_HASH_SIZE;
SYSCTL_INT(_kern_hwpmc, OID_AUTO, hashsize, CTLFLAG_RDTUN,
    &hwpmc_hashsize, 0, "rows in hash tables");

static int hwpmc_nsamples = PMC_NSAMPLES;
SYSCTL_INT(_kern_hwpmc, OID_AUTO, nsamples, CTLFLAG_RDTUN,
    &hwpmc_nsamples, 0, "number of PC samples per CPU");

static int hwpmc_mtxpoolsize = PMC_MTXPOOL_SIZE;
SYSCTL_INT(_kern_hwpmc, OID_AUTO, mtxpoolsize, CTLFLAG_RDTUN,
    &hwpmc_mtxpoolsize, 0, "size of spin mutex pool");

static int hwpmc_threadfreelist_entries = 0;
SYSCTL_INT(_kern_hwpmc, OID_AUTO, threadfreelist_entries, CTLFLAG_RD,
    &hwpmc_threadfreelist_entries, 0, "number of available thread entries");

static int hwpmc_threadfreelist_max = PMC_THREADLIST_MAX;
SYSCTL_INT(_kern_hwpmc, OID_AUTO, threadfreelist_max, CTLFLAG_RW,
    &hwpmc_threadfreelist_max, 0,
    "maximum number of available thread entries before freeing some");

static u_int hwpmc_mincount = 1000;
SYSCTL_INT(_kern_hwpmc, OID_AUTO, mincount, CTLFLAG_RWTUN,
    &hwpmc_mincount, 0, "minimum count for sampling counters");

/* System-wide PMCs need privilege unless this is set. */
static int hwpmc_unprivileged_syspmcs = 0;
SYSCTL_INT(_security_bsd, OID_AUTO, unprivileged_syspmcs, CTLFLAG_RWTUN,
    &hwpmc_unprivileged_syspmcs, 0,
    "allow unprivileged process to allocate system PMCs");

/* hwpmc_logging.c's. */
static int hwpmc_logbuffersize = PMC_LOG_BUFFER_SIZE;
SYSCTL_INT(_kern_hwpmc, OID_AUTO, logbuffersize, CTLFLAG_RDTUN,
    &hwpmc_logbuffersize, 0, "size of log buffers in kilobytes");

static int hwpmc_nbuffers_pcpu = PMC_NLOGBUFFERS_PCPU;
SYSCTL_INT(_kern_hwpmc, OID_AUTO, nbuffers_pcpu, CTLFLAG_RDTUN,
    &hwpmc_nbuffers_pcpu, 0, "number of log buffers per cpu");

/*
 * What the driver finds by name; its table of the same oids is
 * sys/dev/hwpmc/sysctls.rs, which the load checks against this one.
 */
const struct kpi_knob kpi_module_knobs[] = {
	{ "kern.hwpmc.stats", KPI_KNOB_NODE, NULL },
	{ "kern.hwpmc.stats.intr_ignored", KPI_KNOB_COUNTER,
	    &pmc_stats.pm_intr_ignored },
	{ "kern.hwpmc.stats.intr_processed", KPI_KNOB_COUNTER,
	    &pmc_stats.pm_intr_processed },
	{ "kern.hwpmc.stats.intr_bufferfull", KPI_KNOB_COUNTER,
	    &pmc_stats.pm_intr_bufferfull },
	{ "kern.hwpmc.stats.syscalls", KPI_KNOB_COUNTER,
	    &pmc_stats.pm_syscalls },
	{ "kern.hwpmc.stats.syscall_errors", KPI_KNOB_COUNTER,
	    &pmc_stats.pm_syscall_errors },
	{ "kern.hwpmc.stats.buffer_requests", KPI_KNOB_COUNTER,
	    &pmc_stats.pm_buffer_requests },
	{ "kern.hwpmc.stats.buffer_requests_failed", KPI_KNOB_COUNTER,
	    &pmc_stats.pm_buffer_requests_failed },
	{ "kern.hwpmc.stats.log_sweeps", KPI_KNOB_COUNTER,
	    &pmc_stats.pm_log_sweeps },
	{ "kern.hwpmc.stats.merges", KPI_KNOB_COUNTER, &pmc_stats.pm_merges },
	{ "kern.hwpmc.stats.overwrites", KPI_KNOB_COUNTER,
	    &pmc_stats.pm_overwrites },
	{ "kern.hwpmc.callchaindepth", KPI_KNOB_INT, &hwpmc_callchaindepth },
	{ "kern.hwpmc.cpuid", KPI_KNOB_STRING, pmc_cpuid },
	{ "kern.hwpmc.debugflags", KPI_KNOB_STRING, NULL },
	{ "kern.hwpmc.hashsize", KPI_KNOB_INT, &hwpmc_hashsize },
	{ "kern.hwpmc.nsamples", KPI_KNOB_INT, &hwpmc_nsamples },
	{ "kern.hwpmc.mtxpoolsize", KPI_KNOB_INT, &hwpmc_mtxpoolsize },
	{ "kern.hwpmc.threadfreelist_entries", KPI_KNOB_INT,
	    &hwpmc_threadfreelist_entries },
	{ "kern.hwpmc.threadfreelist_max", KPI_KNOB_INT,
	    &hwpmc_threadfreelist_max },
	{ "kern.hwpmc.mincount", KPI_KNOB_INT, &hwpmc_mincount },
	{ "security.bsd.unprivileged_syspmcs", KPI_KNOB_INT,
	    &hwpmc_unprivileged_syspmcs },
	{ "kern.hwpmc.logbuffersize", KPI_KNOB_INT, &hwpmc_logbuffersize },
	{ "kern.hwpmc.nbuffers_pcpu", KPI_KNOB_INT, &hwpmc_nbuffers_pcpu },
};
const size_t kpi_module_nknobs = nitems(kpi_module_knobs);

/*
 * The sysent slot the kernel picks for the pmc system call; kpi's
 * kpi_syscall_register() reports it to the driver.
 */
int pmc_syscall_num = NO_SYSCALL;

static struct sysent pmc_sysent = {
	.sy_narg =	2,
	.sy_call =	(sy_call_t *)kpi_syscall_dispatch,
};

/*
 * syscall_module_handler() registers the system call and then chains the
 * module event to the driver.  SYSCALL_MODULE() would name the module
 * "sys/hwpmc", but libpmc finds the driver with modfind("hwpmc"), so the
 * structures are spelled out as FreeBSD's hwpmc does.
 */
static struct syscall_module_data pmc_syscall_mod = {
	.chainevh =	hwpmc_rs_modevent,
	.chainarg =	NULL,
	.offset =	&pmc_syscall_num,
	.new_sysent =	&pmc_sysent,
	.old_sysent =	{ .sy_narg = 0, .sy_call = NULL },
	.flags =	SY_THR_STATIC_KLD,
};

static moduledata_t pmc_mod = {
	.name =		PMC_MODULE_NAME,
	.evhand =	syscall_module_handler,
	.priv =		&pmc_syscall_mod,
};

#ifdef EARLY_AP_STARTUP
DECLARE_MODULE(pmc, pmc_mod, SI_SUB_SYSCALLS, SI_ORDER_ANY);
#else
DECLARE_MODULE(pmc, pmc_mod, SI_SUB_SMP, SI_ORDER_ANY);
#endif
MODULE_VERSION(pmc, PMC_VERSION);
