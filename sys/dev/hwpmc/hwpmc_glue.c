/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * hwpmc(4): the part of the driver that has to be C.  Module and system
 * call registration are linker-set entries made by kernel macros, so they
 * stay here; everything else is in the Rust archive, entered through
 * hwpmc_rs_modevent() and, for the system call, kpi's dispatcher
 * (sys/rust/kpi/kpi_glue.c), which calls the handler the driver
 * registers.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/module.h>
#include <sys/pmc.h>
#include <sys/sysctl.h>
#include <sys/sysent.h>

#include "kpi_glue.h"

/* In the Rust archive (sys/modules/hwpmc/hwpmc_kmod.rs). */
int	hwpmc_rs_modevent(struct module *module, int cmd, void *arg);

/*
 * kern.hwpmc itself belongs to kern_pmc.c, which every kernel with
 * HWPMC_HOOKS has; defining it again here would clash with it.
 */
SYSCTL_DECL(_kern_hwpmc);
SYSCTL_NODE(_kern_hwpmc, OID_AUTO, stats, CTLFLAG_RW | CTLFLAG_MPSAFE, 0,
    "HWPMC stats");

/*
 * As hwpmc_mod.c: system-wide PMCs need privilege unless this is set.
 * The driver reads it by name.
 */
static int pmc_unprivileged_syspmcs = 0;
SYSCTL_INT(_security_bsd, OID_AUTO, unprivileged_syspmcs, CTLFLAG_RWTUN,
    &pmc_unprivileged_syspmcs, 0,
    "Allow unprivileged processes to allocate system PMCs");

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
