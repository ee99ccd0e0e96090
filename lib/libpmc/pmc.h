/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * pmc(3): the library interface to hwpmc(4).  Source-compatible with
 * FreeBSD's <pmc.h>: the same types, structures and prototypes.
 */

#ifndef _PMC_H_
#define	_PMC_H_

#include <sys/cdefs.h>
#include <sys/pmc.h>

/* What pmc_get_driver_stats() returns: the driver's counters. */
struct pmc_driverstats {
	unsigned int	pm_intr_ignored;	/* interrupts not for hwpmc */
	unsigned int	pm_intr_processed;	/* interrupts handled */
	unsigned int	pm_intr_bufferfull;	/* samples lost to full rings */
	unsigned int	pm_syscalls;		/* system calls */
	unsigned int	pm_syscall_errors;	/* system calls that failed */
	unsigned int	pm_buffer_requests;	/* log buffers asked for */
	unsigned int	pm_buffer_requests_failed; /* ... and not had */
	unsigned int	pm_log_sweeps;		/* sample ring drains */
};

/* The machine as pmc_init() found it (pmc_cpuinfo()). */
struct pmc_cpuinfo {
	enum pmc_cputype pm_cputype;	/* kind of CPU */
	uint32_t	pm_ncpu;	/* highest CPU number plus one */
	uint32_t	pm_npmc;	/* rows per CPU */
	uint32_t	pm_nclass;	/* valid entries of pm_classes */
	struct pmc_classinfo pm_classes[PMC_CLASS_MAX];
};

/* The rows of one CPU (pmc_pmcinfo(); free(3) it when done). */
struct pmc_pmcinfo {
	int32_t		pm_cpu;		/* the CPU */
	struct pmc_info	pm_pmcs[];	/* pmc_npmc() rows */
};

/*
 * Overflow notification (pmc_notify(3)): an extension of this hwpmc that
 * FreeBSD's does not have; pmc_extcaps() says whether the kernel has it.
 */
#define	PMC_EXTCAP_NOTIFY	0x1	/* pmc_notify() works */
#define	PMC_NOTIFY_BYTES	0x1	/* count log bytes, not samples */
#define	PMC_NOTIFICATION_END	0x1	/* pn_flags: no notification follows */

/* What a read(2) of a notification descriptor returns. */
struct pmc_notification {
	pmc_id_t	pn_pmcid;	/* the PMC */
	uint32_t	pn_flags;	/* PMC_NOTIFICATION_* */
	uint32_t	pn_cpu;		/* CPU of the last sample counted */
	uint32_t	pn_spare;
	uint64_t	pn_notifications; /* notifications so far */
	uint64_t	pn_samples;	/* samples so far */
	uint64_t	pn_dropped;	/* samples lost on a full ring so far */
};

__BEGIN_DECLS
int	pmc_allocate(const char *_ctrspec, enum pmc_mode _mode, uint32_t _flags,
	    int _cpu, pmc_id_t *_pmcid, uint64_t _count);
int	pmc_attach(pmc_id_t _pmcid, pid_t _pid);
int	pmc_capabilities(pmc_id_t _pmc, uint32_t *_caps);
int	pmc_configure_logfile(int _fd);
int	pmc_flush_logfile(void);
int	pmc_close_logfile(void);
int	pmc_detach(pmc_id_t _pmcid, pid_t _pid);
int	pmc_disable(int _cpu, int _pmc);
int	pmc_enable(int _cpu, int _pmc);
int	pmc_get_driver_stats(struct pmc_driverstats *_gms);
int	pmc_extcaps(uint32_t *_caps);
int	pmc_get_msr(pmc_id_t _pmc, uint32_t *_msr);
int	pmc_init(void);
int	pmc_notify(pmc_id_t _pmc, uint32_t _flags, uint32_t _count,
	    uint32_t _refresh, int _signo, int *_fdp);
int	pmc_read(pmc_id_t _pmc, pmc_value_t *_value);
int	pmc_release(pmc_id_t _pmc);
int	pmc_rw(pmc_id_t _pmc, pmc_value_t _newvalue, pmc_value_t *_oldvalue);
int	pmc_set(pmc_id_t _pmc, pmc_value_t _value);
int	pmc_start(pmc_id_t _pmc);
int	pmc_stop(pmc_id_t _pmc);
int	pmc_width(pmc_id_t _pmc, uint32_t *_width);
int	pmc_write(pmc_id_t _pmc, pmc_value_t _value);
int	pmc_writelog(uint32_t _udata);

int	pmc_ncpu(void);
int	pmc_npmc(int _cpu);
int	pmc_cpuinfo(const struct pmc_cpuinfo **_cpu_info);
int	pmc_pmcinfo(int _cpu, struct pmc_pmcinfo **_pmc_info);

const char	*pmc_name_of_capability(enum pmc_caps _c);
const char	*pmc_name_of_class(enum pmc_class _pc);
const char	*pmc_name_of_cputype(enum pmc_cputype _cp);
const char	*pmc_name_of_disposition(enum pmc_disp _pd);
const char	*pmc_name_of_event(enum pmc_event _pe);
const char	*pmc_name_of_mode(enum pmc_mode _pm);
const char	*pmc_name_of_state(enum pmc_state _ps);

int	pmc_event_names_of_class(enum pmc_class _cl, const char ***_eventnames,
	    int *_nevents);

/* The PMU event tables of the running CPU (kern.hwpmc.cpuid). */
struct pmc_op_pmcallocate;	/* <sys/pmc.h> */
int	pmc_pmu_enabled(void);
void	pmc_pmu_print_counters(const char *_event_name);
void	pmc_pmu_print_counter_desc(const char *_event_name);
void	pmc_pmu_print_counter_desc_long(const char *_event_name);
void	pmc_pmu_print_counter_full(const char *_event_name);
uint64_t pmc_pmu_sample_rate_get(const char *_event_name);
int	pmc_pmu_pmcallocate(const char *_event_name,
	    struct pmc_op_pmcallocate *_pm);
const char	*pmc_pmu_event_get_by_idx(const char *_cpuid, int _idx);
int	pmc_pmu_idx_get_by_event(const char *_cpuid, const char *_event);
__END_DECLS

#endif /* !_PMC_H_ */
