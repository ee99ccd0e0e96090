/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * The part of kpi's FreeBSD glue that names symbols of the hwpmc
 * module's own C glue (sys/dev/hwpmc/hwpmc_glue.c): its system call
 * slot, its table of sysctls and pmc_cpuid.  Linked into hwpmc.ko (and
 * `device hwpmc') beside kpi_glue.c; a module without that glue (hwt.ko)
 * links kpi_glue.c alone.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/lock.h>
#include <sys/sx.h>
#include <sys/proc.h>
#include <sys/pcpu.h>
#include <sys/pmc.h>
#include <sys/pmckern.h>

#include <machine/cpu.h>
#if defined(__amd64__)
#include <machine/cputypes.h>
#include <machine/md_var.h>
#include <machine/specialreg.h>
#elif defined(__aarch64__)
#include <machine/armreg.h>
#endif

#include "kpi_glue.h"

/*
 * The sysent slot that hwpmc_glue.c's SYSCALL module data fills in
 * (it must not be static there).
 */
extern int pmc_syscall_num;

const struct kpi_knob *
kpi_knob_find(const char *name, size_t len, int kind)
{
	const struct kpi_knob *k;
	size_t i;

	for (i = 0; i < kpi_module_nknobs; i++) {
		k = &kpi_module_knobs[i];
		if (k->kind == kind && strlen(k->name) == len &&
		    memcmp(k->name, name, len) == 0)
			return (k);
	}
	return (NULL);
}

/*
 * The hwpmc system call.  The shared lock spans each call so that
 * deregistration waits for the calls in progress.
 */
static struct sx kpi_syscall_sx;
SX_SYSINIT(kpi_syscall, &kpi_syscall_sx, "kpi syscall");
static kpi_syscall_t *kpi_syscall_fn;
static void *kpi_syscall_arg;

uint32_t
kpi_syscall_register(kpi_syscall_t *handler, void *arg)
{
	sx_xlock(&kpi_syscall_sx);
	kpi_syscall_fn = handler;
	kpi_syscall_arg = arg;
	sx_xunlock(&kpi_syscall_sx);
	return ((uint32_t)pmc_syscall_num);
}

void
kpi_syscall_deregister(uint32_t num)
{
	sx_xlock(&kpi_syscall_sx);
	kpi_syscall_fn = NULL;
	kpi_syscall_arg = NULL;
	sx_xunlock(&kpi_syscall_sx);
}

int
kpi_syscall_dispatch(struct thread *td, void *uap)
{
	struct pmc_syscall_args *a;
	uint64_t args[2];
	int64_t rv;
	int error;

	a = uap;
	/* hwpmc reads the operation as an int. */
	args[0] = (u_int)(int)a->pmop_code;
	args[1] = (uintptr_t)a->pmop_data;
	rv = 0;
	sx_slock(&kpi_syscall_sx);
	if (kpi_syscall_fn == NULL) {
		/* As hwpmc before its hook is set: not set up yet. */
		sx_sunlock(&kpi_syscall_sx);
		return (EINVAL);
	}
	error = kpi_syscall_fn(kpi_syscall_arg, args, nitems(args), &rv);
	sx_sunlock(&kpi_syscall_sx);
	if (error == 0)
		td->td_retval[0] = rv;
	return (error);
}

/* The MD part of hwpmc's initialisation that names the CPU. */
static void
kpi_pmc_cpuid_init(void *arg __unused)
{
#if defined(__amd64__)
	if (cpu_vendor_id == CPU_VENDOR_INTEL ||
	    cpu_vendor_id == CPU_VENDOR_AMD ||
	    cpu_vendor_id == CPU_VENDOR_HYGON)
		snprintf(pmc_cpuid, sizeof(pmc_cpuid), "%s-%d-%02X-%X",
		    cpu_vendor, CPUID_TO_FAMILY(cpu_id), CPUID_TO_MODEL(cpu_id),
		    CPUID_TO_STEPPING(cpu_id));
#elif defined(__aarch64__)
	uint64_t midr;

	/* CPU 0's MIDR, without variant and revision, as hwpmc does. */
	midr = pcpu_find(0)->pc_midr;
	midr &= ~(uint64_t)(CPU_VAR_MASK | CPU_REV_MASK);
	snprintf(pmc_cpuid, sizeof(pmc_cpuid), "0x%016lx", midr);
#endif
}
SYSINIT(kpi_pmc_cpuid, SI_SUB_DRIVERS, SI_ORDER_FIRST, kpi_pmc_cpuid_init,
    NULL);

size_t
kpi_pmc_cpuid(char *buf, size_t len)
{
	if (len > 0)
		strlcpy(buf, pmc_cpuid, len);
	return (strnlen(pmc_cpuid, sizeof(pmc_cpuid)));
}
