/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * The FreeBSD side of kpi_glue.h: each function wraps one kernel KPI so
 * that the Rust crates see neither macros nor structure layouts.  Built
 * for amd64 and arm64 kernel modules.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/malloc.h>
#include <sys/lock.h>
#include <sys/mutex.h>
#include <sys/rwlock.h>
#include <sys/sx.h>
#include <sys/proc.h>
#include <sys/sched.h>
#include <sys/priv.h>
#include <sys/jail.h>
#include <sys/ucred.h>
#include <sys/signalvar.h>
#include <sys/sysctl.h>
#include <sys/counter.h>
#include <sys/eventhandler.h>
#include <sys/linker.h>
#include <sys/kthread.h>
#include <sys/file.h>
#include <sys/filio.h>
#include <sys/event.h>
#include <sys/poll.h>
#include <sys/selinfo.h>
#include <sys/stat.h>
#include <sys/fcntl.h>
#include <sys/user.h>
#include <sys/filedesc.h>
#include <sys/buf.h>
#include <sys/uio.h>
#include <sys/unistd.h>
#include <sys/capsicum.h>
#include <sys/ktr.h>
#include <sys/pcpu.h>
#include <sys/smp.h>
#include <sys/epoch.h>
#include <sys/bus.h>
#include <sys/interrupt.h>
#include <sys/pmc.h>
#include <sys/pmckern.h>
/*
 * exterror(9) came with FreeBSD 15.0, hwpmc's categories after it: the
 * glue records extended errors only in a tree that has them.
 */
#if __has_include(<sys/exterr_cat.h>)
#include <sys/exterr_cat.h>
#endif
#ifdef EXTERR_CAT_HWPMC_MOD
#define	EXTERR_CATEGORY	EXTERR_CAT_HWPMC_MOD
#include <sys/exterrvar.h>
/* uapi's value (the 2026 tree's), which the Rust driver passes. */
_Static_assert(EXTERR_CAT_HWPMC_MOD == 21, "EXTERR_CAT_HWPMC_MOD moved");
#endif

#include <sys/conf.h>
#include <sys/ioccom.h>
#include <sys/refcount.h>
#include <sys/hwt_record.h>

#include <vm/vm.h>
#include <vm/pmap.h>
#include <vm/vm_kern.h>
#include <vm/vm_map.h>
#include <vm/vm_object.h>
#include <vm/vm_page.h>
#include <vm/vm_pageout.h>
#include <vm/vm_pager.h>
#include <vm/vm_param.h>
#include <vm/vm_extern.h>

#include <machine/atomic.h>
#include <machine/cpu.h>
#include <machine/cpufunc.h>
#include <machine/frame.h>
#include <machine/pmc_mdep.h>
#include <machine/stack.h>
#include <machine/vmparam.h>
#if defined(__amd64__)
#include <machine/cputypes.h>
#include <machine/md_var.h>
#include <machine/psl.h>
#include <machine/specialreg.h>
#include <x86/clock.h>
#include <x86/x86_var.h>
#elif defined(__aarch64__)
#include <machine/armreg.h>
#endif

#include "kpi_glue.h"

/*
 * From <sys/vnode.h>, which needs the generated vnode_if.h; declared
 * here so that this file builds without the generated headers.
 */
struct vnode;
int	vn_fullpath(struct vnode *vp, char **retbuf, char **freebuf);
void	vref(struct vnode *vp);
void	vrele(struct vnode *vp);

/*
 * kern_pmc.c already defines the "pmc" malloc type (M_PMC, declared by
 * <sys/pmc.h>); hwpmc(4) allocates from it, and a second type with the
 * same name would split vmstat -m's accounting.
 */
#define	M_HWPMC		M_PMC

/*
 * What names the hwpmc module's own glue (its system call slot, its
 * sysctl table, pmc_cpuid) is in kpi_glue_pmc.c, which only hwpmc links:
 * other modules (hwt) take this file alone.
 */

#define	KPI_NAME_MAX	64	/* sysctl leaf names, kenv names */
#define	KPI_KENV_MAX	128	/* KENV_MNAMELEN */

/*
 * Copies a name passed by length into a NUL-terminated buffer (also
 * kpi_glue_pmc.c's).
 */
int
kpi_cstr(char *dst, size_t dstlen, const char *src, size_t len)
{
	size_t i;

	if (len >= dstlen)
		return (ENAMETOOLONG);
	for (i = 0; i < len; i++) {
		if (src[i] == '\0')
			return (EINVAL);
		dst[i] = src[i];
	}
	dst[len] = '\0';
	return (0);
}

/*
 * Console and tracing.
 */

void
kpi_printf(const char *line, size_t len)
{
	printf("%.*s\n", (int)MIN(len, INT_MAX), line);
}

#ifdef KTR
/* ktr(4) keeps the argument pointer, so each line needs storage. */
#define	KPI_KTR_LINES	64
#define	KPI_KTR_LEN	128
static char kpi_ktr_lines[KPI_KTR_LINES][KPI_KTR_LEN];
static u_int kpi_ktr_next;
#endif

void
kpi_ktr(const char *line, size_t len)
{
#ifdef KTR
	char *slot;
	size_t n;

	slot = kpi_ktr_lines[atomic_fetchadd_int(&kpi_ktr_next, 1) %
	    KPI_KTR_LINES];
	n = MIN(len, KPI_KTR_LEN - 1);
	memcpy(slot, line, n);
	slot[n] = '\0';
	CTR1(KTR_GEN, "%s", slot);
#endif
}

void
kpi_panic(const char *msg, size_t len)
{
	panic("%.*s", (int)MIN(len, INT_MAX), msg);
}

/*
 * CPUs.
 */

uint32_t
kpi_curcpu(void)
{
	return (curcpu);
}

uint32_t
kpi_ncpu_ids(void)
{
	return (pmc_cpu_max());
}

int
kpi_cpu_exists(uint32_t cpu)
{
	return (cpu < pmc_cpu_max() && pmc_cpu_is_present(cpu));
}

int
kpi_cpu_active(uint32_t cpu)
{
	return (cpu < pmc_cpu_max() && pmc_cpu_is_active(cpu));
}

uint32_t
kpi_bind(uint32_t cpu)
{
	struct thread *td;
	uint32_t prev;

	td = curthread;
	thread_lock(td);
	/* A bound thread runs on the CPU it is bound to. */
	prev = sched_is_bound(td) ? (uint32_t)td->td_oncpu : ~0u;
	sched_bind(td, cpu);
	thread_unlock(td);
	return (prev);
}

void
kpi_unbind(uint32_t previous)
{
	struct thread *td;

	td = curthread;
	thread_lock(td);
	if (previous == ~0u)
		sched_unbind(td);
	else
		sched_bind(td, previous);
	thread_unlock(td);
}

/*
 * The interrupted context.  A hardware interrupt leaves its frame in
 * td_intr_frame; a software event passes its own frame with the hook
 * call (struct pmckern_soft), kept here per CPU while the hook runs, and
 * a user call chain request passes the user frame likewise.
 */
static struct trapframe *kpi_soft_tf[MAXCPU];
static struct trapframe *kpi_user_tf[MAXCPU];
static struct trapframe *kpi_nmi_tf[MAXCPU];

static bool
kpi_intr_enabled(void)
{
#if defined(__amd64__)
	return ((read_rflags() & PSL_I) != 0);
#elif defined(__aarch64__)
	return ((READ_SPECIALREG(daif) & PSR_I) == 0);
#else
	return (true);
#endif
}

static struct trapframe *
kpi_frame(void)
{
	struct trapframe *tf;

	/* An NMI may interrupt a software event's hook: its frame first. */
	tf = atomic_load_ptr(&kpi_nmi_tf[curcpu]);
	if (tf != NULL)
		return (tf);
	tf = atomic_load_ptr(&kpi_soft_tf[curcpu]);
	if (tf != NULL)
		return (tf);
	return (curthread->td_intr_frame);
}

int
kpi_in_interrupt(void)
{
	struct thread *td;

	td = curthread;
	return (td->td_intr_frame != NULL || td->td_intr_nesting_level > 0 ||
	    atomic_load_ptr(&kpi_soft_tf[curcpu]) != NULL ||
	    atomic_load_ptr(&kpi_nmi_tf[curcpu]) != NULL);
}

/* In one of kpi's NMI handlers on this CPU. */
int
kpi_in_nmi(void)
{
	return (atomic_load_ptr(&kpi_nmi_tf[curcpu]) != NULL);
}

/* Sleep mutexes may be taken: no spin lock, critical section or filter. */
static bool
kpi_may_block(void)
{
	struct thread *td;

	td = curthread;
	return (td->td_critnest == 0 && td->td_intr_frame == NULL &&
	    td->td_intr_nesting_level == 0 && kpi_intr_enabled() &&
	    atomic_load_ptr(&kpi_soft_tf[curcpu]) == NULL);
}

int
kpi_can_sleep(void)
{
	return (THREAD_CAN_SLEEP() && kpi_may_block());
}

void
kpi_critical_enter(void)
{
	critical_enter();
}

void
kpi_critical_exit(void)
{
	critical_exit();
}

/*
 * Time.
 */

uint64_t
kpi_cyclecount(void)
{
#if defined(__amd64__)
	/* As hwpmc's pmc_rdtsc(): rdtscp orders against earlier loads. */
	if ((amd_feature & AMDID_RDTSCP) != 0)
		return (rdtscp());
	return (rdtsc());
#else
	return (get_cyclecount());
#endif
}

uint64_t
kpi_cyclecount_freq(void)
{
#if defined(__amd64__)
	return (tsc_freq);
#else
	/* hwpmc logs 0 where there is no TSC. */
	return (0);
#endif
}

void
kpi_nanotime(int64_t *sec, int64_t *nsec)
{
	struct timespec ts;

	nanotime(&ts);
	*sec = ts.tv_sec;
	*nsec = ts.tv_nsec;
}

/*
 * Memory.
 */

void *
kpi_malloc(size_t size, size_t align, int kflags)
{
	int flags;

	/* The caller's flag, as it asked: malloc(9) checks the context. */
	flags = (kflags & KPI_M_WAITOK) != 0 ? M_WAITOK : M_NOWAIT;
	if ((kflags & KPI_M_ZERO) != 0)
		flags |= M_ZERO;
	if (align <= sizeof(void *) * 2)
		return (malloc(size, M_HWPMC, flags));
	/* malloc_aligned(9) takes power-of-two alignments up to a page. */
	if (!powerof2(align) || align > PAGE_SIZE)
		return (NULL);
	return (malloc_aligned(size, align, M_HWPMC, flags));
}

void
kpi_free(void *ptr)
{
	free(ptr, M_HWPMC);
}

/*
 * Locks.
 */

size_t
kpi_lock_size(void)
{
	return (MAX(sizeof(struct mtx), sizeof(struct sx)));
}

void
kpi_lock_init(void *lock, const char *name, int kind)
{
	/* lock_init() checks LO_INITIALIZED, so start from zeroes. */
	switch (kind) {
	case KPI_LOCK_SLEEP:
		bzero(lock, sizeof(struct mtx));
		mtx_init((struct mtx *)lock, name, NULL, MTX_DEF);
		break;
	case KPI_LOCK_SPIN:
		bzero(lock, sizeof(struct mtx));
		mtx_init((struct mtx *)lock, name, NULL, MTX_SPIN);
		break;
	case KPI_LOCK_SX:
		bzero(lock, sizeof(struct sx));
		sx_init((struct sx *)lock, name);
		break;
	default:
		panic("kpi_lock_init: lock kind %d", kind);
	}
}

void
kpi_lock_destroy(void *lock, int kind)
{
	if (kind == KPI_LOCK_SX)
		sx_destroy((struct sx *)lock);
	else
		mtx_destroy((struct mtx *)lock);
}

void
kpi_lock_exclusive(void *lock, int kind)
{
	switch (kind) {
	case KPI_LOCK_SLEEP:
		mtx_lock((struct mtx *)lock);
		break;
	case KPI_LOCK_SPIN:
		mtx_lock_spin((struct mtx *)lock);
		break;
	default:
		sx_xlock((struct sx *)lock);
		break;
	}
}

void
kpi_lock_shared(void *lock, int kind)
{
	/* Mutexes have no shared mode. */
	if (kind == KPI_LOCK_SX)
		sx_slock((struct sx *)lock);
	else
		kpi_lock_exclusive(lock, kind);
}

void
kpi_unlock_exclusive(void *lock, int kind)
{
	switch (kind) {
	case KPI_LOCK_SLEEP:
		mtx_unlock((struct mtx *)lock);
		break;
	case KPI_LOCK_SPIN:
		mtx_unlock_spin((struct mtx *)lock);
		break;
	default:
		sx_xunlock((struct sx *)lock);
		break;
	}
}

void
kpi_unlock_shared(void *lock, int kind)
{
	if (kind == KPI_LOCK_SX)
		sx_sunlock((struct sx *)lock);
	else
		kpi_unlock_exclusive(lock, kind);
}

void
kpi_may_sleep(void)
{
	WITNESS_WARN(WARN_GIANTOK | WARN_SLEEPOK, NULL, "kpi_may_sleep");
}

void
kpi_pause_one_tick(void)
{
	/* pause(9), not mi_switch(): only a sleep forces a switch. */
	pause("pmcctx", 1);
}

/*
 * Processes and credentials.
 */

uint32_t
kpi_curthread(void)
{
	return (curthread->td_tid);
}

uint32_t
kpi_curproc(void)
{
	return (curproc->p_pid);
}

int
kpi_proc_info(uint32_t pid, struct kpi_proc_info *info, uint32_t *tids,
    uint32_t ntids)
{
	struct proc *p;
	struct thread *td;
	uint32_t n;

	/* pfind_any() finds zombies too and returns the process locked. */
	if ((p = pfind_any(pid)) == NULL)
		return (ESRCH);
	bzero(info, sizeof(*info));
	info->pid = p->p_pid;
	info->ppid = p->p_pptr != NULL ? p->p_pptr->p_pid : 0;
	info->flags = p->p_flag;
	info->zombie = p->p_state == PRS_ZOMBIE;
	strlcpy(info->comm, p->p_comm, sizeof(info->comm));
	n = 0;
	FOREACH_THREAD_IN_PROC(p, td) {
		if (n < ntids)
			tids[n] = td->td_tid;
		n++;
	}
	info->nthreads = n;
	PROC_UNLOCK(p);
	return (0);
}

static int
kpi_copy_path(char *buf, size_t len, const char *path)
{
	size_t n;

	n = strlen(path);
	if (len > 0)
		strlcpy(buf, path, len);
	return ((int)MIN(n, INT_MAX));
}

int
kpi_proc_path(uint32_t pid, char *buf, size_t len)
{
	struct proc *p;
	struct vnode *vp;
	char *fullpath, *freepath;
	int n;

	if ((p = pfind(pid)) == NULL)
		return (-1);
	if ((p->p_flag & P_KPROC) != 0) {
		/* Kernel processes run the kernel, as hwpmc reports them. */
		PROC_UNLOCK(p);
		return (kpi_copy_path(buf, len, kernelname));
	}
	/* Hold the text vnode: vn_fullpath() may sleep. */
	vp = p->p_textvp;
	if (vp != NULL)
		vref(vp);
	PROC_UNLOCK(p);
	if (vp == NULL)
		return (-1);
	freepath = NULL;
	if (vn_fullpath(vp, &fullpath, &freepath) == 0)
		n = kpi_copy_path(buf, len, fullpath);
	else
		n = -1;
	free(freepath, M_TEMP);
	vrele(vp);
	return (n);
}

uint32_t
kpi_proc_children(uint32_t pid, uint32_t *pids, uint32_t npids)
{
	struct proc *p, *c;
	uint32_t n;

	n = 0;
	/* proctree_lock keeps p_children still; it goes before the proc. */
	sx_slock(&proctree_lock);
	if ((p = pfind_any(pid)) != NULL) {
		LIST_FOREACH(c, &p->p_children, p_sibling) {
			if (n < npids)
				pids[n] = c->p_pid;
			n++;
		}
		PROC_UNLOCK(p);
	}
	sx_sunlock(&proctree_lock);
	return (n);
}

uint32_t
kpi_all_pids(uint32_t *pids, uint32_t npids)
{
	struct proc *p;
	uint32_t n;

	n = 0;
	sx_slock(&allproc_lock);
	FOREACH_PROC_IN_SYSTEM(p) {
		/* A process still being forked is not there yet. */
		if (p->p_state == PRS_NEW)
			continue;
		if (n < npids)
			pids[n] = p->p_pid;
		n++;
	}
	sx_sunlock(&allproc_lock);
	return (n);
}

int
kpi_thread_pid(uint32_t tid, uint32_t *pid)
{
	struct thread *td;

	/* tdfind() takes sleep locks, unusable in interrupt context. */
	if (!kpi_may_block())
		return (EWOULDBLOCK);
	if ((td = tdfind(tid, -1)) == NULL)
		return (ESRCH);
	*pid = td->td_proc->p_pid;
	PROC_UNLOCK(td->td_proc);
	return (0);
}

void
kpi_proc_flags(uint32_t pid, uint32_t set, uint32_t clear)
{
	struct proc *p;

	if ((p = pfind_any(pid)) == NULL)
		return;
	p->p_flag |= set;
	p->p_flag &= ~clear;
	PROC_UNLOCK(p);
}

int
kpi_p_candebug(uint32_t pid)
{
	struct proc *p;
	int error;

	if ((p = pfind(pid)) == NULL)
		return (ESRCH);
	/* An exiting process counts as gone, as for PMCATTACH. */
	if ((p->p_flag & P_WEXIT) != 0)
		error = ESRCH;
	else
		error = p_candebug(curthread, p);
	PROC_UNLOCK(p);
	return (error);
}

int
kpi_priv_check(int privilege)
{
	return (priv_check(curthread, privilege));
}

static struct ucred *
kpi_proc_cred(uint32_t pid)
{
	struct proc *p;
	struct ucred *cr;

	if ((p = pfind_any(pid)) == NULL)
		return (NULL);
	cr = crhold(p->p_ucred);
	PROC_UNLOCK(p);
	return (cr);
}

int
kpi_cred_covers(uint32_t owner, uint32_t target)
{
	struct ucred *oc, *tc;
	bool ok;
	int i;

	if (owner == target)
		return (1);
	if ((oc = kpi_proc_cred(owner)) == NULL)
		return (0);
	if ((tc = kpi_proc_cred(target)) == NULL) {
		crfree(oc);
		return (0);
	}
	if (oc->cr_uid == 0 && !jailed(oc)) {
		ok = true;
	} else {
		/* The owner's euid is one of the target's uids ... */
		ok = oc->cr_uid == tc->cr_uid || oc->cr_uid == tc->cr_ruid ||
		    oc->cr_uid == tc->cr_svuid;
		/* ... and every group of the target is one of the owner's. */
		for (i = 0; ok && i < tc->cr_ngroups; i++)
			ok = groupmember(tc->cr_groups[i], oc);
		ok = ok && groupmember(tc->cr_gid, oc) &&
		    groupmember(tc->cr_rgid, oc) &&
		    groupmember(tc->cr_svgid, oc);
	}
	crfree(tc);
	crfree(oc);
	return (ok);
}

int
kpi_jailed(void)
{
	return (jailed(curthread->td_ucred));
}

/* The current process's p_flag, read without its lock (in interrupt
 * context and under spin locks too): good for the bits that never change
 * (P_KPROC) and for those the current thread sets itself (P_WEXIT). */
int
kpi_curproc_flags(void)
{
	return (curproc->p_flag);
}

void
kpi_psignal(uint32_t pid, int sig)
{
	struct proc *p;

	if ((p = pfind(pid)) == NULL)
		return;
	kern_psignal(p, sig);
	PROC_UNLOCK(p);
}

void
kpi_request_userret(void)
{
	struct thread *td;
	struct trapframe *tf;
	u_int cpu;

	td = curthread;
	/* Kernel processes never return to user mode. */
	if ((td->td_proc->p_flag & P_KPROC) != 0)
		return;
	cpu = curcpu;
	tf = kpi_frame();
	if (tf == NULL || !TRAPF_USERMODE(tf)) {
		/*
		 * Interrupted in the kernel: userret() calls the hook with
		 * PMC_FN_THR_USERRET while td_pmcpend is set.
		 */
		atomic_add_int((volatile u_int *)&td->td_pmcpend, 1);
		return;
	}
	/* One request per return to user mode. */
	if ((td->td_pflags & TDP_CALLCHAIN) != 0)
		return;
	/*
	 * The thread was in user mode, so its private flags are ours to
	 * touch; it stays on this CPU, whose ring holds the sample, until
	 * the chain is taken.
	 */
	td->td_pflags |= TDP_CALLCHAIN;
	sched_pin();
	/*
	 * The return from a hardware PMC interrupt calls the hook with
	 * PMC_FN_USER_CALLCHAIN by itself; a software event needs the AST.
	 * (ast_sched() takes the thread lock, never done from an NMI.)
	 */
	if (atomic_load_ptr(&kpi_soft_tf[cpu]) != NULL)
		ast_sched(td, TDA_HWPMC);
}

/*
 * User memory.
 */

int
kpi_copyin(uint64_t uaddr, void *kaddr, size_t len)
{
	return (copyin((const void *)(uintptr_t)uaddr, kaddr, len));
}

int
kpi_copyout(const void *kaddr, uint64_t uaddr, size_t len)
{
	return (copyout(kaddr, (void *)(uintptr_t)uaddr, len));
}

/*
 * Tunables and sysctls.
 */

int
kpi_kenv_str(const char *name, size_t namelen, char *buf, size_t len)
{
	char kname[KPI_KENV_MAX];
	char *v;
	int n;

	if (kpi_cstr(kname, sizeof(kname), name, namelen) != 0)
		return (-1);
	if ((v = kern_getenv(kname)) == NULL)
		return (-1);
	n = kpi_copy_path(buf, len, v);
	freeenv(v);
	return (n);
}

/*
 * The module's own oids: its glue declares them and lists their
 * variables in kpi_module_knobs[] (found by kpi_knob_find(), in
 * kpi_glue_pmc.c).
 */
int
kpi_knob_int_get(const struct kpi_knob *k)
{
	return (atomic_load_int((volatile u_int *)k->var));
}

void
kpi_knob_int_set(const struct kpi_knob *k, int value)
{
	atomic_store_int((volatile u_int *)k->var, (u_int)value);
}

void
kpi_knob_counter_alloc(const struct kpi_knob *k)
{
	*(counter_u64_t *)k->var = counter_u64_alloc(M_WAITOK);
}

void
kpi_knob_counter_free(const struct kpi_knob *k)
{
	counter_u64_t c;

	c = *(counter_u64_t *)k->var;
	*(counter_u64_t *)k->var = NULL;
	if (c != NULL)
		counter_u64_free(c);
}

void
kpi_knob_counter_add(const struct kpi_knob *k, uint64_t n)
{
	counter_u64_add(*(counter_u64_t *)k->var, n);
}

uint64_t
kpi_knob_counter_fetch(const struct kpi_knob *k)
{
	return (counter_u64_fetch(*(counter_u64_t *)k->var));
}

int
kpi_sysctl_int(const char *name, size_t len, int64_t *value)
{
	char buf[KPI_KENV_MAX];
	union {
		int	i;
		int64_t	q;
	} v;
	size_t olen;
	int error;

	if ((error = kpi_cstr(buf, sizeof(buf), name, len)) != 0)
		return (error);
	olen = sizeof(v);
	v.q = 0;
	error = kernel_sysctlbyname(curthread, buf, &v, &olen, NULL, 0, NULL,
	    0);
	if (error != 0)
		return (error);
	if (olen == sizeof(int))
		*value = v.i;
	else if (olen == sizeof(int64_t))
		*value = v.q;
	else
		return (EINVAL);
	return (0);
}

/*
 * pmc_hook.
 */
static kpi_hook_t *volatile kpi_hook_fn;
static void *volatile kpi_hook_arg;
static volatile u_int kpi_hook_active;	/* calls inside kpi_hook_fn */

static int
kpi_call_hook(const struct kpi_hook_args *call)
{
	kpi_hook_t *fn;
	int error;

	error = 0;
	atomic_add_int(&kpi_hook_active, 1);
	/* Pairs with the fence in kpi_set_pmc_hook(): see fn, or be seen. */
	atomic_thread_fence_seq_cst();
	fn = atomic_load_ptr(&kpi_hook_fn);
	if (fn != NULL)
		error = fn(atomic_load_ptr(&kpi_hook_arg), call);
	atomic_subtract_rel_int(&kpi_hook_active, 1);
	return (error);
}

static int
kpi_pmc_hook(struct thread *td, int function, void *arg)
{
	struct kpi_hook_args call;
	struct pmckern_procexec *pe;
	struct pmckern_soft *ks;
	struct pmckern_map_in *mi;
	struct pmckern_map_out *mo;
	struct proc *p;
	u_int cpu;
	int error;

	bzero(&call, sizeof(call));
	switch (function) {
	case PMC_FN_CSW_IN:
		call.hook = KPI_HOOK_CSW_IN;
		break;
	case PMC_FN_CSW_OUT:
		call.hook = KPI_HOOK_CSW_OUT;
		break;
	case PMC_FN_PROCESS_EXEC:
		pe = arg;
		call.hook = KPI_HOOK_PROCESS_EXEC;
		call.credentials_changed = pe->pm_credentialschanged;
		call.base = pe->pm_baseaddr;
		call.dyn_base = pe->pm_dynaddr;
		break;
	case PMC_FN_SOFT_SAMPLING:
		/* Called with interrupts disabled: curcpu cannot change. */
		ks = arg;
		call.hook = KPI_HOOK_SOFT_SAMPLING;
		call.ev = ks->pm_ev;
		call.cpu = ks->pm_cpu;
		cpu = curcpu;
		atomic_store_ptr(&kpi_soft_tf[cpu], ks->pm_tf);
		error = kpi_call_hook(&call);
		atomic_store_ptr(&kpi_soft_tf[cpu], NULL);
		return (error);
	case PMC_FN_THR_CREATE:
	case PMC_FN_THR_CREATE_LOG:
		/*
		 * Called by the creator, about the new thread td (or, from
		 * thr_set_name(2), about a renamed one).  Unlocked reads of
		 * p_flag and td_name, as hwpmc's log records make.
		 */
		call.hook = function == PMC_FN_THR_CREATE ?
		    KPI_HOOK_THR_CREATE : KPI_HOOK_THR_CREATE_LOG;
		call.tid = td->td_tid;
		call.pid = td->td_proc->p_pid;
		call.flags = td->td_proc->p_flag;
		strlcpy(call.name, td->td_name, sizeof(call.name));
		break;
	case PMC_FN_THR_EXIT:
	case PMC_FN_THR_EXIT_LOG:
		/* With the process's spin lock held (thread_exit()). */
		call.hook = function == PMC_FN_THR_EXIT ?
		    KPI_HOOK_THR_EXIT : KPI_HOOK_THR_EXIT_LOG;
		call.tid = td->td_tid;
		break;
	case PMC_FN_PROC_CREATE_LOG:
		/* kproc_create(): arg is the new process. */
		p = arg;
		call.hook = KPI_HOOK_PROC_CREATE_LOG;
		call.pid = p->p_pid;
		call.flags = p->p_flag;
		strlcpy(call.name, p->p_comm, sizeof(call.name));
		break;
	case PMC_FN_USER_CALLCHAIN:
	case PMC_FN_USER_CALLCHAIN_SOFT:
		/* td is curthread, pinned by kpi_request_userret(). */
		call.hook = KPI_HOOK_USER_RET;
		cpu = curcpu;
		atomic_store_ptr(&kpi_user_tf[cpu], (struct trapframe *)arg);
		error = kpi_call_hook(&call);
		atomic_store_ptr(&kpi_user_tf[cpu], NULL);
		/* Even without a hook, undo what the request did. */
		if ((td->td_pflags & TDP_CALLCHAIN) != 0) {
			td->td_pflags &= ~TDP_CALLCHAIN;
			sched_unpin();
		}
		return (error);
	case PMC_FN_THR_USERRET:
		/* Samples taken in the kernel wanting the user chain. */
		call.hook = KPI_HOOK_USER_RET;
		(void)atomic_readandclear_int((volatile u_int *)&td->td_pmcpend);
		sched_pin();
		cpu = curcpu;
		atomic_store_ptr(&kpi_user_tf[cpu], td->td_frame);
		error = kpi_call_hook(&call);
		atomic_store_ptr(&kpi_user_tf[cpu], NULL);
		sched_unpin();
		return (error);
	case PMC_FN_DO_SAMPLES:
		/* Cleared first: a sample taken meanwhile sets it again. */
		DPCPU_SET(pmc_sampled, 0);
		call.hook = KPI_HOOK_DO_SAMPLES;
		break;
	case PMC_FN_MMAP:
		mi = arg;
		call.hook = KPI_HOOK_MMAP;
		call.base = mi->pm_address;
		break;
	case PMC_FN_MUNMAP:
		mo = arg;
		call.hook = KPI_HOOK_MUNMAP;
		call.base = mo->pm_address;
		call.size = mo->pm_size;
		break;
	default:
		return (0);
	}
	return (kpi_call_hook(&call));
}

void
kpi_set_pmc_hook(kpi_hook_t *hook, void *arg)
{
	/* pmc_hook changes only under pmc_sx held exclusively. */
	sx_xlock(&pmc_sx);
	if (hook != NULL) {
		atomic_store_ptr(&kpi_hook_arg, arg);
		atomic_store_rel_ptr((volatile uintptr_t *)&kpi_hook_fn,
		    (uintptr_t)hook);
		pmc_hook = kpi_pmc_hook;
		sx_xunlock(&pmc_sx);
		return;
	}
	pmc_hook = NULL;
	atomic_store_ptr(&kpi_hook_fn, NULL);
	atomic_thread_fence_seq_cst();
	sx_xunlock(&pmc_sx);

	/*
	 * Wait for the callers that still saw the hook: those inside an
	 * epoch section, then every call still running the old hook.
	 */
	epoch_wait_preempt(global_epoch_preempt);
	while (atomic_load_acq_int(&kpi_hook_active) != 0)
		pause("kpihook", 1);
	atomic_store_ptr(&kpi_hook_arg, NULL);
}

/*
 * Event handlers: one registration takes the four events, under a tag
 * that indexes a small table.
 */
#define	KPI_NEVENTHANDLERS	8

struct kpi_evh {
	kpi_event_t		*handler;	/* NULL if free */
	void			*arg;
	eventhandler_tag	fork_tag;
	eventhandler_tag	exit_tag;
	eventhandler_tag	load_tag;
	eventhandler_tag	unload_tag;
};

static struct sx kpi_evh_sx;
SX_SYSINIT(kpi_evh, &kpi_evh_sx, "kpi eventhandler");
static struct kpi_evh kpi_evhs[KPI_NEVENTHANDLERS];

static void
kpi_evh_fork(void *arg, struct proc *p1, struct proc *p2, int flags)
{
	struct kpi_evh *h;
	struct kpi_event_args ev;

	h = arg;
	bzero(&ev, sizeof(ev));
	ev.event = KPI_EVENT_FORK;
	ev.parent = p1->p_pid;
	ev.pid = p2->p_pid;
	h->handler(h->arg, &ev);
}

static void
kpi_evh_exit(void *arg, struct proc *p)
{
	struct kpi_evh *h;
	struct kpi_event_args ev;

	h = arg;
	bzero(&ev, sizeof(ev));
	ev.event = KPI_EVENT_EXIT;
	ev.pid = p->p_pid;
	h->handler(h->arg, &ev);
}

static void
kpi_evh_kld_load(void *arg, linker_file_t lf)
{
	struct kpi_evh *h;
	struct kpi_event_args ev;

	h = arg;
	bzero(&ev, sizeof(ev));
	ev.event = KPI_EVENT_KLD_LOAD;
	ev.addr = (uintptr_t)lf->address;
	ev.size = lf->size;
	h->handler(h->arg, &ev);
}

static void
kpi_evh_kld_unload(void *arg, const char *filename, caddr_t address,
    size_t size)
{
	struct kpi_evh *h;
	struct kpi_event_args ev;

	h = arg;
	bzero(&ev, sizeof(ev));
	ev.event = KPI_EVENT_KLD_UNLOAD;
	ev.addr = (uintptr_t)address;
	ev.size = size;
	h->handler(h->arg, &ev);
}

uint64_t
kpi_eventhandler_register(kpi_event_t *handler, void *arg)
{
	struct kpi_evh *h;
	int i;

	sx_xlock(&kpi_evh_sx);
	for (i = 0; i < KPI_NEVENTHANDLERS; i++)
		if (kpi_evhs[i].handler == NULL)
			break;
	if (i == KPI_NEVENTHANDLERS) {
		sx_xunlock(&kpi_evh_sx);
		printf("kpi: no room for another event handler\n");
		return (0);
	}
	h = &kpi_evhs[i];
	h->handler = handler;
	h->arg = arg;
	h->fork_tag = EVENTHANDLER_REGISTER(process_fork, kpi_evh_fork, h,
	    EVENTHANDLER_PRI_ANY);
	h->exit_tag = EVENTHANDLER_REGISTER(process_exit, kpi_evh_exit, h,
	    EVENTHANDLER_PRI_ANY);
	h->load_tag = EVENTHANDLER_REGISTER(kld_load, kpi_evh_kld_load, h,
	    EVENTHANDLER_PRI_ANY);
	h->unload_tag = EVENTHANDLER_REGISTER(kld_unload, kpi_evh_kld_unload,
	    h, EVENTHANDLER_PRI_ANY);
	sx_xunlock(&kpi_evh_sx);
	return (i + 1);
}

void
kpi_eventhandler_deregister(uint64_t tag)
{
	struct kpi_evh *h;

	if (tag == 0 || tag > KPI_NEVENTHANDLERS)
		return;
	sx_xlock(&kpi_evh_sx);
	h = &kpi_evhs[tag - 1];
	if (h->handler != NULL) {
		/* Each deregistration waits for that event's running calls. */
		EVENTHANDLER_DEREGISTER(process_fork, h->fork_tag);
		EVENTHANDLER_DEREGISTER(process_exit, h->exit_tag);
		EVENTHANDLER_DEREGISTER(kld_load, h->load_tag);
		EVENTHANDLER_DEREGISTER(kld_unload, h->unload_tag);
		bzero(h, sizeof(*h));
	}
	sx_xunlock(&kpi_evh_sx);
}

/*
 * kern_pmc.c facts.
 */

uint32_t
kpi_pmc_kernel_version(void)
{
	return ((uint32_t)pmc_kernel_version);
}

void
kpi_pmc_ss_count_add(int delta)
{
	if (delta >= 0)
		atomic_add_rel_int((volatile u_int *)&pmc_ss_count, delta);
	else
		atomic_subtract_rel_int((volatile u_int *)&pmc_ss_count,
		    -delta);
}

int
kpi_pmc_ss_count(void)
{
	return ((int)atomic_load_acq_int((volatile u_int *)&pmc_ss_count));
}

void
kpi_pmc_ss_count_reset(void)
{
	atomic_store_rel_int((volatile u_int *)&pmc_ss_count, 0);
}

uint32_t
kpi_pmc_module_version(void)
{
	return (PMC_VERSION);
}

int
kpi_exterr_set(int error, u_int category, const char *msg, uint64_t p1,
    uint64_t p2, int line)
{
#ifdef EXTERR_CAT_HWPMC_MOD
	/* As EXTERROR(): the message only in kernels with EXTERR_STRINGS. */
	return (exterr_set(error, category, SET_ERROR_MSG(msg), (uintptr_t)p1,
	    (uintptr_t)p2, line));
#else
	(void)category;
	(void)msg;
	(void)p1;
	(void)p2;
	(void)line;
	return (error);
#endif
}

uint32_t
kpi_soft_events(struct kpi_soft_event *evs, uint32_t nevs)
{
	struct pmc_soft *ps;
	uint32_t n;
	int ev;

	n = 0;
	for (ev = PMC_EV_SOFT_FIRST; ev <= PMC_EV_SOFT_LAST; ev++) {
		/* Holds pmc_softs_mtx (a spin lock) until released. */
		if ((ps = pmc_soft_ev_acquire(ev)) == NULL)
			continue;
		if (n < nevs) {
			evs[n].code = ps->ps_ev.pm_ev_code;
			strlcpy(evs[n].name, ps->ps_ev.pm_ev_name,
			    sizeof(evs[n].name));
		}
		pmc_soft_ev_release(ps);
		n++;
	}
	return (n);
}

static bool
kpi_soft_code(uint32_t code)
{
	return (code >= PMC_EV_SOFT_FIRST && code <= PMC_EV_SOFT_LAST);
}

int
kpi_soft_event_registered(uint32_t code)
{
	struct pmc_soft *ps;

	if (!kpi_soft_code(code) || (ps = pmc_soft_ev_acquire(code)) == NULL)
		return (0);
	pmc_soft_ev_release(ps);
	return (1);
}

int
kpi_soft_event_running(uint32_t code, int delta)
{
	struct pmc_soft *ps;

	if (!kpi_soft_code(code) || (ps = pmc_soft_ev_acquire(code)) == NULL)
		return (0);
	/* The probes test ps_running without the lock. */
	atomic_add_int((volatile u_int *)&ps->ps_running, delta);
	pmc_soft_ev_release(ps);
	return (1);
}

void
kpi_set_cpu_sampled(uint32_t cpu)
{
	/* Tells hardclock to call the hook with PMC_FN_DO_SAMPLES. */
	DPCPU_ID_SET(cpu, pmc_sampled, 1);
}

/*
 * Files.
 */

/*
 * Notification descriptors.  The object is shared by the file (until its
 * last close) and the kernel (until kpi_notify_release); the last of the
 * two frees it.  Its mutex protects the record and is the knlist's lock.
 */
#define	KPI_NOTIFY_RECORD_MAX	64

struct kpi_notify {
	struct mtx	kn_mtx;
	struct selinfo	kn_sel;
	size_t		kn_len;
	bool		kn_pending;
	bool		kn_hup;
	u_int		kn_refs;
	uint8_t		kn_record[KPI_NOTIFY_RECORD_MAX];
};

static void
kpi_notify_unref(struct kpi_notify *n)
{
	mtx_lock(&n->kn_mtx);
	if (--n->kn_refs > 0) {
		mtx_unlock(&n->kn_mtx);
		return;
	}
	mtx_unlock(&n->kn_mtx);
	seldrain(&n->kn_sel);
	knlist_destroy(&n->kn_sel.si_note);
	mtx_destroy(&n->kn_mtx);
	free(n, M_HWPMC);
}

/* Wakes readers, pollers and knotes; the mutex is held. */
static void
kpi_notify_wake(struct kpi_notify *n)
{
	mtx_assert(&n->kn_mtx, MA_OWNED);
	wakeup(n);
	selwakeup(&n->kn_sel);
	KNOTE_LOCKED(&n->kn_sel.si_note, 0);
}

static int
kpi_notify_read(struct file *fp, struct uio *uio, struct ucred *cred __unused,
    int flags __unused, struct thread *td __unused)
{
	struct kpi_notify *n;
	uint8_t record[KPI_NOTIFY_RECORD_MAX];
	size_t len;
	int error;

	n = fp->f_data;
	if (uio->uio_resid < (ssize_t)n->kn_len)
		return (EINVAL);
	mtx_lock(&n->kn_mtx);
	while (!n->kn_pending && !n->kn_hup) {
		if ((fp->f_flag & FNONBLOCK) != 0) {
			mtx_unlock(&n->kn_mtx);
			return (EAGAIN);
		}
		error = msleep(n, &n->kn_mtx, PCATCH, "pmcntf", 0);
		if (error != 0) {
			mtx_unlock(&n->kn_mtx);
			return (error);
		}
	}
	if (!n->kn_pending) {
		/* Hung up: end of file. */
		mtx_unlock(&n->kn_mtx);
		return (0);
	}
	len = n->kn_len;
	memcpy(record, n->kn_record, len);
	n->kn_pending = false;
	mtx_unlock(&n->kn_mtx);
	return (uiomove(record, len, uio));
}

static int
kpi_notify_ioctl(struct file *fp __unused, u_long cmd, void *data __unused,
    struct ucred *cred __unused, struct thread *td __unused)
{
	switch (cmd) {
	case FIONBIO:
	case FIOASYNC:
		return (0);
	default:
		return (ENOTTY);
	}
}

static int
kpi_notify_poll(struct file *fp, int events, struct ucred *cred __unused,
    struct thread *td)
{
	struct kpi_notify *n;
	int revents;

	n = fp->f_data;
	revents = 0;
	mtx_lock(&n->kn_mtx);
	if (n->kn_pending)
		revents |= events & (POLLIN | POLLRDNORM);
	if (n->kn_hup)
		revents |= POLLHUP;
	if (revents == 0 && (events & (POLLIN | POLLRDNORM)) != 0)
		selrecord(td, &n->kn_sel);
	mtx_unlock(&n->kn_mtx);
	return (revents);
}

static void
kpi_notify_filt_detach(struct knote *kn)
{
	struct kpi_notify *n;

	n = kn->kn_hook;
	knlist_remove(&n->kn_sel.si_note, kn, 0);
}

static int
kpi_notify_filt_read(struct knote *kn, long hint __unused)
{
	struct kpi_notify *n;

	n = kn->kn_hook;
	mtx_assert(&n->kn_mtx, MA_OWNED);
	kn->kn_data = n->kn_pending ? n->kn_len : 0;
	if (n->kn_hup) {
		kn->kn_flags |= EV_EOF;
		return (1);
	}
	return (n->kn_pending);
}

static const struct filterops kpi_notify_filtops = {
	.f_isfd = 1,
	.f_detach = kpi_notify_filt_detach,
	.f_event = kpi_notify_filt_read,
};

static int
kpi_notify_kqfilter(struct file *fp, struct knote *kn)
{
	struct kpi_notify *n;

	n = fp->f_data;
	if (kn->kn_filter != EVFILT_READ)
		return (EINVAL);
	kn->kn_fop = &kpi_notify_filtops;
	kn->kn_hook = n;
	knlist_add(&n->kn_sel.si_note, kn, 0);
	return (0);
}

static int
kpi_notify_stat(struct file *fp, struct stat *sb, struct ucred *cred __unused)
{
	struct kpi_notify *n;

	n = fp->f_data;
	bzero(sb, sizeof(*sb));
	sb->st_mode = S_IFIFO | S_IRUSR;
	mtx_lock(&n->kn_mtx);
	sb->st_size = n->kn_pending ? n->kn_len : 0;
	mtx_unlock(&n->kn_mtx);
	return (0);
}

static int
kpi_notify_close(struct file *fp, struct thread *td __unused)
{
	struct kpi_notify *n;

	n = fp->f_data;
	fp->f_data = NULL;
	if (n != NULL)
		kpi_notify_unref(n);
	return (0);
}

static int
kpi_notify_fill_kinfo(struct file *fp __unused, struct kinfo_file *kif,
    struct filedesc *fdp __unused)
{
	kif->kf_type = KF_TYPE_UNKNOWN;
	return (0);
}

static const struct fileops kpi_notify_fileops = {
	.fo_read = kpi_notify_read,
	.fo_write = invfo_rdwr,
	.fo_truncate = invfo_truncate,
	.fo_ioctl = kpi_notify_ioctl,
	.fo_poll = kpi_notify_poll,
	.fo_kqfilter = kpi_notify_kqfilter,
	.fo_stat = kpi_notify_stat,
	.fo_close = kpi_notify_close,
	.fo_chmod = invfo_chmod,
	.fo_chown = invfo_chown,
	.fo_sendfile = invfo_sendfile,
	.fo_fill_kinfo = kpi_notify_fill_kinfo,
	.fo_flags = DFLAG_PASSABLE,
};

int
kpi_notify_create(size_t record_len, void **notify, int *fd)
{
	struct thread *td;
	struct kpi_notify *n;
	struct file *fp;
	int error;

	if (record_len == 0 || record_len > KPI_NOTIFY_RECORD_MAX)
		return (EINVAL);
	td = curthread;
	error = falloc_noinstall(td, &fp);
	if (error != 0)
		return (error);
	n = malloc(sizeof(*n), M_HWPMC, M_WAITOK | M_ZERO);
	mtx_init(&n->kn_mtx, "pmcnotify", NULL, MTX_DEF);
	knlist_init_mtx(&n->kn_sel.si_note, &n->kn_mtx);
	n->kn_len = record_len;
	n->kn_refs = 2;		/* the file's and the kernel's */
	finit(fp, FREAD, DTYPE_NONE, n, &kpi_notify_fileops);
	error = finstall(td, fp, fd, O_CLOEXEC, NULL);
	/* The descriptor holds the file now, or closing it freed ours. */
	fdrop(fp, td);
	if (error != 0) {
		kpi_notify_unref(n);
		return (error);
	}
	*notify = n;
	return (0);
}

void
kpi_notify_post(void *notify, const void *record, size_t len)
{
	struct kpi_notify *n;

	n = notify;
	mtx_lock(&n->kn_mtx);
	bzero(n->kn_record, n->kn_len);
	memcpy(n->kn_record, record, MIN(len, n->kn_len));
	n->kn_pending = true;
	kpi_notify_wake(n);
	mtx_unlock(&n->kn_mtx);
}

void
kpi_notify_hangup(void *notify)
{
	struct kpi_notify *n;

	n = notify;
	mtx_lock(&n->kn_mtx);
	n->kn_hup = true;
	kpi_notify_wake(n);
	mtx_unlock(&n->kn_mtx);
}

void
kpi_notify_release(void *notify)
{
	kpi_notify_unref(notify);
}

int
kpi_tdsignal(uint32_t pid, uint32_t tid, int sig, int value)
{
	struct proc *p;
	struct thread *td;
	ksiginfo_t ksi;

	if ((p = pfind(pid)) == NULL)
		return (0);
	FOREACH_THREAD_IN_PROC(p, td) {
		if (td->td_tid == (lwpid_t)tid)
			break;
	}
	ksiginfo_init(&ksi);
	ksi.ksi_signo = sig;
	ksi.ksi_code = SI_QUEUE;
	ksi.ksi_pid = 0;
	ksi.ksi_value.sival_int = value;
	/* A thread that is gone leaves the signal to its process. */
	tdsendsignal(p, td, sig, &ksi);
	PROC_UNLOCK(p);
	return (1);
}

int
kpi_fget_write(int fd, void **file)
{
	struct file *fp;
	int error;

	if ((error = fget_write(curthread, fd, &cap_write_rights, &fp)) != 0)
		return (error);
	*file = fp;
	return (0);
}

void
kpi_fdrop(void *file)
{
	fdrop((struct file *)file, curthread);
}

int
kpi_file_write(void *file, const void *data, size_t len, size_t *written)
{
	struct file *fp;
	struct uio auio;
	struct iovec aiov;
	size_t before;
	int error;

	*written = 0;
	if (len > IOSIZE_MAX)
		return (EINVAL);
	fp = file;
	aiov.iov_base = __DECONST(void *, data);
	aiov.iov_len = len;
	auio.uio_iov = &aiov;
	auio.uio_iovcnt = 1;
	auio.uio_offset = -1;		/* the file's own offset */
	auio.uio_resid = len;
	auio.uio_segflg = UIO_SYSSPACE;
	auio.uio_rw = UIO_WRITE;
	auio.uio_td = curthread;
	error = 0;
	while (auio.uio_resid > 0) {
		if (fp->f_type == DTYPE_VNODE)
			bwillwrite();
		before = auio.uio_resid;
		/*
		 * The credential the file was opened with: the writer may be
		 * a kernel process, which has root's.
		 */
		error = fo_write(fp, &auio, fp->f_cred, 0, curthread);
		if (error != 0)
			break;
		/* A writer that takes nothing would loop forever. */
		if ((size_t)auio.uio_resid == before) {
			error = EIO;
			break;
		}
	}
	/* What was taken, even before an error (EAGAIN on a full pipe). */
	*written = len - auio.uio_resid;
	return (error);
}

/*
 * Kernel processes.  The state words are under one spin mutex so that a
 * wakeup may come from any context but an NMI.
 */
struct kpi_kproc {
	kpi_kproc_body_t	*body;
	void			*arg;
	pid_t			pid;
	bool			pending;	/* woken since the last pass */
	bool			stopping;	/* one last pass, then exit */
	bool			gone;		/* no longer touches this */
};

static struct mtx kpi_kproc_mtx;
MTX_SYSINIT(kpi_kproc, &kpi_kproc_mtx, "kpi kproc", MTX_SPIN);

static void
kpi_kproc_main(void *v)
{
	struct kpi_kproc *k;
	bool last;

	k = v;
	mtx_lock_spin(&kpi_kproc_mtx);
	for (;;) {
		while (!k->pending && !k->stopping)
			msleep_spin(k, &kpi_kproc_mtx, "kpiwait", 0);
		last = k->stopping;
		k->pending = false;
		mtx_unlock_spin(&kpi_kproc_mtx);
		k->body(k->arg);
		mtx_lock_spin(&kpi_kproc_mtx);
		if (last)
			break;
	}
	k->gone = true;
	wakeup(&k->gone);
	mtx_unlock_spin(&kpi_kproc_mtx);
	kproc_exit(0);
}

int
kpi_kproc_create(const char *name, size_t len, kpi_kproc_body_t *body,
    void *arg, void **kproc)
{
	struct kpi_kproc *k;
	struct proc *p;
	int error;

	k = malloc(sizeof(*k), M_HWPMC, M_WAITOK | M_ZERO);
	k->body = body;
	k->arg = arg;
	error = kproc_create(kpi_kproc_main, k, &p, RFHIGHPID, 0, "%.*s",
	    (int)MIN(len, MAXCOMLEN), name);
	if (error != 0) {
		free(k, M_HWPMC);
		return (error);
	}
	k->pid = p->p_pid;
	*kproc = k;
	return (0);
}

void
kpi_kproc_wakeup(void *kproc)
{
	struct kpi_kproc *k;

	k = kproc;
	mtx_lock_spin(&kpi_kproc_mtx);
	k->pending = true;
	wakeup(k);
	mtx_unlock_spin(&kpi_kproc_mtx);
}

void
kpi_kproc_stop(void *kproc)
{
	struct kpi_kproc *k;

	k = kproc;
	mtx_lock_spin(&kpi_kproc_mtx);
	k->stopping = true;
	wakeup(k);
	while (!k->gone)
		msleep_spin(&k->gone, &kpi_kproc_mtx, "kpistop", 0);
	mtx_unlock_spin(&kpi_kproc_mtx);
	free(k, M_HWPMC);
}

uint32_t
kpi_kproc_pid(void *kproc)
{
	return (((struct kpi_kproc *)kproc)->pid);
}

/*
 * The interrupted context and call chains, by frame pointers.
 */

int
kpi_interrupted(uint64_t *pc)
{
	struct trapframe *tf;

	if ((tf = kpi_frame()) == NULL) {
		*pc = 0;
		return (0);
	}
	*pc = PMC_TRAPFRAME_TO_PC(tf);
	return (TRAPF_USERMODE(tf) ? 1 : 0);
}

/* [va, va + len) lies in the current thread's kernel stack. */
static bool
kpi_on_kstack(uintptr_t va, size_t len)
{
	struct thread *td;
	uintptr_t lo, hi;

	td = curthread;
	lo = td->td_kstack;
	hi = lo + (uintptr_t)td->td_kstack_pages * PAGE_SIZE;
	return (va >= lo && va < hi && len <= hi - va);
}

/* Frame records are two words: the caller's frame, then the return. */
#define	KPI_FP_NEXT(fp)	(*(uintptr_t *)(fp))
#define	KPI_FP_RET(fp)	(*(uintptr_t *)((fp) + sizeof(uintptr_t)))

uint32_t __nosanitizeaddress __nosanitizememory
kpi_kernel_callchain(uint64_t *pcs, uint32_t max)
{
	struct trapframe *tf;
	uintptr_t fp, pc;
	uint32_t n;
#if defined(__amd64__)
	uintptr_t sp;
	uint32_t instr;
#endif

	tf = kpi_frame();
	if (tf == NULL || max == 0 || TRAPF_USERMODE(tf))
		return (0);
	pc = PMC_TRAPFRAME_TO_PC(tf);
	fp = PMC_TRAPFRAME_TO_FP(tf);
	pcs[0] = pc;
	if (max == 1 || !PMC_IN_KERNEL(pc) ||
	    !kpi_on_kstack(fp, 2 * sizeof(uintptr_t)))
		return (1);
#if defined(__amd64__)
	sp = PMC_TRAPFRAME_TO_KERNEL_SP(tf);
	if (PMC_IN_TRAP_HANDLER(pc) || !kpi_on_kstack(sp, sizeof(uintptr_t)))
		return (1);
	/*
	 * At a function's first instruction or its ret, no frame of its
	 * own is set up and the return address is at the top of the
	 * stack; one push later it is just above it.
	 */
	instr = *(uint32_t *)pc;
	if (PMC_AT_FUNCTION_PROLOGUE_PUSH_BP(instr) ||
	    PMC_AT_FUNCTION_EPILOGUE_RET(instr)) {
		pc = *(uintptr_t *)sp;
	} else if (PMC_AT_FUNCTION_PROLOGUE_MOV_SP_BP(instr)) {
		sp += sizeof(uintptr_t);
		if (!kpi_on_kstack(sp, sizeof(uintptr_t)))
			return (1);
		pc = *(uintptr_t *)sp;
	} else {
		pc = KPI_FP_RET(fp);
		fp = KPI_FP_NEXT(fp);
	}
	for (n = 1; n < max; ) {
		pcs[n++] = pc;
		/* Below the trap handler is another context's frame. */
		if (PMC_IN_TRAP_HANDLER(pc) ||
		    !kpi_on_kstack(fp, 2 * sizeof(uintptr_t)))
			break;
		pc = KPI_FP_RET(fp);
		fp = KPI_FP_NEXT(fp);
	}
#elif defined(__aarch64__)
	/* The interrupted function's own LR is not trusted (leaf code). */
	for (n = 1; n < max; ) {
		pc = KPI_FP_RET(fp);
		if (!PMC_IN_KERNEL(pc))
			break;
		pcs[n++] = pc;
		fp = KPI_FP_NEXT(fp);
		if (!kpi_on_kstack(fp, 2 * sizeof(uintptr_t)))
			break;
	}
#else
	n = 1;
#endif
	return (n);
}

/*
 * Reads user memory: at the return to user mode a fault may be served;
 * anywhere else it must fail instead.
 */
static bool
kpi_user_word(uintptr_t uaddr, void *dst, size_t len)
{
	if (uaddr > VM_MAXUSER_ADDRESS || len > VM_MAXUSER_ADDRESS - uaddr)
		return (false);
	if (kpi_can_sleep())
		return (copyin((const void *)uaddr, dst, len) == 0);
	return (copyin_nofault((const void *)uaddr, dst, len) == 0);
}

uint32_t
kpi_user_callchain(uint64_t *pcs, uint32_t max)
{
	struct thread *td;
	struct trapframe *tf;
	uintptr_t fp, oldfp, pc;
	uint32_t n;
#if defined(__amd64__)
	uintptr_t sp;
	uint32_t instr;
#endif

	td = curthread;
	if (max == 0 || (td->td_proc->p_flag & P_KPROC) != 0)
		return (0);
	/* The hook's user frame, else the one saved at kernel entry. */
	tf = atomic_load_ptr(&kpi_user_tf[curcpu]);
	if (tf == NULL)
		tf = td->td_frame;
	if (tf == NULL || !TRAPF_USERMODE(tf))
		return (0);
	pc = PMC_TRAPFRAME_TO_PC(tf);
	fp = PMC_TRAPFRAME_TO_FP(tf);
	pcs[0] = pc;
	n = 1;
	if (max == 1 || !PMC_IN_USERSPACE(pc))
		return (n);
#if defined(__amd64__)
	/* As in the kernel walk, prologue and ret have no frame yet. */
	sp = PMC_TRAPFRAME_TO_USER_SP(tf);
	oldfp = fp;
	if (!kpi_user_word(pc, &instr, sizeof(instr)))
		return (n);
	if (PMC_AT_FUNCTION_PROLOGUE_PUSH_BP(instr) ||
	    PMC_AT_FUNCTION_EPILOGUE_RET(instr)) {
		if (!kpi_user_word(sp, &pc, sizeof(pc)))
			return (n);
	} else if (PMC_AT_FUNCTION_PROLOGUE_MOV_SP_BP(instr)) {
		if (!kpi_user_word(sp + sizeof(uintptr_t), &pc, sizeof(pc)))
			return (n);
	} else {
		if (!kpi_user_word(fp + sizeof(uintptr_t), &pc, sizeof(pc)) ||
		    !kpi_user_word(fp, &fp, sizeof(fp)))
			return (n);
	}
	while (n < max) {
		if (pc == 0 || !PMC_IN_USERSPACE(pc))
			break;
		pcs[n++] = pc;
		/* Frames go up the stack; anything else is not a chain. */
		if (fp < oldfp)
			break;
		oldfp = fp;
		if (!kpi_user_word(fp + sizeof(uintptr_t), &pc, sizeof(pc)) ||
		    !kpi_user_word(fp, &fp, sizeof(fp)))
			break;
	}
#elif defined(__aarch64__)
	if (!PMC_IN_USERSPACE(fp))
		return (n);
	while (n < max) {
		if (!kpi_user_word(fp + sizeof(uintptr_t), &pc, sizeof(pc)) ||
		    !PMC_IN_USERSPACE(pc))
			break;
		pcs[n++] = pc;
		oldfp = fp;
		if (!kpi_user_word(fp, &fp, sizeof(fp)))
			break;
		/* Frames go strictly up the stack. */
		if (fp <= oldfp || !PMC_IN_USERSPACE(fp))
			break;
	}
#endif
	return (n);
}

/*
 * Executable mappings.
 */

uint32_t
kpi_proc_mappings(uint32_t pid, struct kpi_mapping *maps, uint32_t nmaps)
{
	struct proc *p;
	struct vmspace *vm;
	vm_map_t map;
	vm_map_entry_t entry;
	vm_object_t obj, lobj, tobj;
	struct vnode *vp, *last_vp;
	vm_offset_t last_end;
	char *fullpath, *freepath;
	uint32_t i, n;

	if ((p = pfind(pid)) == NULL)
		return (0);
	/* An exiting process may not be held; its mappings are going. */
	if ((p->p_flag & P_WEXIT) != 0) {
		PROC_UNLOCK(p);
		return (0);
	}
	/* vmspace_acquire_ref() locks the process itself. */
	_PHOLD(p);
	PROC_UNLOCK(p);
	vm = vmspace_acquire_ref(p);
	PRELE(p);
	if (vm == NULL)
		return (0);

	/*
	 * First pass, under the map lock: the executable, vnode-backed
	 * ranges, adjacent entries of one vnode merged.  Each recorded
	 * range keeps a vnode reference in its path field until the names
	 * are looked up, after the lock, as vn_fullpath() may sleep.
	 */
	n = 0;
	last_vp = NULL;
	last_end = 0;
	map = &vm->vm_map;
	vm_map_lock_read(map);
	VM_MAP_ENTRY_FOREACH(entry, map) {
		if ((entry->eflags & MAP_ENTRY_IS_SUB_MAP) != 0 ||
		    (entry->protection & VM_PROT_EXECUTE) == 0 ||
		    entry->object.vm_object == NULL)
			continue;
		/* The file is behind any shadow objects. */
		obj = entry->object.vm_object;
		VM_OBJECT_RLOCK(obj);
		for (lobj = tobj = obj; tobj != NULL;
		    tobj = tobj->backing_object) {
			if (tobj != obj)
				VM_OBJECT_RLOCK(tobj);
			if (lobj != obj)
				VM_OBJECT_RUNLOCK(lobj);
			lobj = tobj;
		}
		vp = vm_object_vnode(lobj);
		if (vp != NULL && vp == last_vp && entry->start == last_end) {
			last_end = entry->end;
			if (n <= nmaps)
				maps[n - 1].end = last_end;
		} else if (vp != NULL) {
			if (n < nmaps) {
				maps[n].start = entry->start;
				maps[n].end = entry->end;
				vref(vp);
				memcpy(maps[n].path, &vp, sizeof(vp));
			}
			n++;
			last_vp = vp;
			last_end = entry->end;
		}
		if (lobj != obj)
			VM_OBJECT_RUNLOCK(lobj);
		VM_OBJECT_RUNLOCK(obj);
	}
	vm_map_unlock_read(map);
	vmspace_free(vm);

	/* Second pass, unlocked: the names. */
	for (i = 0; i < MIN(n, nmaps); i++) {
		memcpy(&vp, maps[i].path, sizeof(vp));
		freepath = NULL;
		if (vn_fullpath(vp, &fullpath, &freepath) != 0)
			fullpath = "unknown";
		strlcpy(maps[i].path, fullpath, sizeof(maps[i].path));
		free(freepath, M_TEMP);
		vrele(vp);
	}
	return (n);
}

uint32_t
kpi_kernel_objects(struct kpi_mapping *maps, uint32_t nmaps)
{
	struct pmckern_map_in *km, *kmbase;
	uint32_t n;

	/* A malloc'd array ending with an empty entry. */
	kmbase = linker_hwpmc_list_objects();
	n = 0;
	for (km = kmbase; km->pm_file != NULL; km++) {
		if (n < nmaps) {
			/* The linker does not say the size: one address. */
			maps[n].start = km->pm_address;
			maps[n].end = km->pm_address;
			strlcpy(maps[n].path, (const char *)km->pm_file,
			    sizeof(maps[n].path));
		}
		n++;
	}
	free(kmbase, M_LINKER);
	return (n);
}

#if defined(__amd64__)
/*
 * The x86 PMU.
 *
 * x86/apicvar.h declares the local APIC's PMC functions, but it needs
 * sys/bus.h and so the generated device_if.h, which a `device hwpmc'
 * object of the kernel build may be compiled without: their prototypes,
 * as local_apic.c defines them.
 */
int	lapic_enable_pcint(void);
void	lapic_disable_pcint(void);
void	lapic_reenable_pcint(void);

uint64_t
kpi_rdmsr(uint32_t msr)
{
	return (rdmsr(msr));
}

void
kpi_wrmsr(uint32_t msr, uint64_t value)
{
	wrmsr(msr, value);
}

void
kpi_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t *regs)
{
	u_int r[4];

	cpuid_count(leaf, subleaf, r);
	regs[0] = r[0];
	regs[1] = r[1];
	regs[2] = r[2];
	regs[3] = r[3];
}

int
kpi_lapic_enable_pcint(void)
{
	return (lapic_enable_pcint());
}

void
kpi_lapic_disable_pcint(void)
{
	lapic_disable_pcint();
}

void
kpi_lapic_reenable_pcint(void)
{
	lapic_reenable_pcint();
}

/*
 * The NMI handler: the trap frame is kept per CPU while the Rust handler
 * runs, for kpi_interrupted() and the kernel call chain.
 */
static kpi_pmc_intr_t *volatile kpi_pmc_intr_fn;

static int
kpi_pmc_nmi(struct trapframe *tf)
{
	kpi_pmc_intr_t *fn;
	int cpu, found;

	fn = atomic_load_ptr(&kpi_pmc_intr_fn);
	if (fn == NULL)
		return (0);
	cpu = curcpu;
	atomic_store_ptr(&kpi_nmi_tf[cpu], tf);
	found = fn();
	atomic_store_ptr(&kpi_nmi_tf[cpu], NULL);
	return (found);
}

void
kpi_set_pmc_intr(kpi_pmc_intr_t *handler)
{
	kpi_pmc_intr_t *old;

	old = atomic_load_ptr(&kpi_pmc_intr_fn);
	atomic_store_rel_ptr((volatile uintptr_t *)&kpi_pmc_intr_fn,
	    (uintptr_t)handler);
	if (old == NULL && handler != NULL)
		nmi_register_handler(kpi_pmc_nmi);
	else if (old != NULL && handler == NULL)
		nmi_remove_handler(kpi_pmc_nmi);
}

/*
 * Further NMI handlers.  nmi_register_handler() refuses the same function
 * twice, so each slot has its own entry point; the slot's function and
 * argument are read by the handler, set before it is registered and
 * cleared after nmi_remove_handler() has waited for running handlers.
 */
#define	KPI_NMI_SLOTS	4

static struct kpi_nmi_slot {
	kpi_nmi_fn_t	*fn;
	void		*arg;
	volatile u_int	used;
} kpi_nmi_slots[KPI_NMI_SLOTS];

static int
kpi_nmi_run(int slot, struct trapframe *tf)
{
	struct kpi_nmi_slot *s;
	kpi_nmi_fn_t *fn;
	int cpu, found;

	s = &kpi_nmi_slots[slot];
	fn = atomic_load_ptr(&s->fn);
	if (fn == NULL)
		return (0);
	cpu = curcpu;
	atomic_store_ptr(&kpi_nmi_tf[cpu], tf);
	found = fn(s->arg);
	atomic_store_ptr(&kpi_nmi_tf[cpu], NULL);
	return (found);
}

static int kpi_nmi_0(struct trapframe *tf) { return (kpi_nmi_run(0, tf)); }
static int kpi_nmi_1(struct trapframe *tf) { return (kpi_nmi_run(1, tf)); }
static int kpi_nmi_2(struct trapframe *tf) { return (kpi_nmi_run(2, tf)); }
static int kpi_nmi_3(struct trapframe *tf) { return (kpi_nmi_run(3, tf)); }

static int (*const kpi_nmi_entry[KPI_NMI_SLOTS])(struct trapframe *) = {
	kpi_nmi_0, kpi_nmi_1, kpi_nmi_2, kpi_nmi_3,
};

int
kpi_nmi_register(kpi_nmi_fn_t *fn, void *arg)
{
	struct kpi_nmi_slot *s;
	int i;

	for (i = 0; i < KPI_NMI_SLOTS; i++) {
		s = &kpi_nmi_slots[i];
		if (atomic_cmpset_int(&s->used, 0, 1) == 0)
			continue;
		s->arg = arg;
		atomic_store_rel_ptr((volatile uintptr_t *)&s->fn,
		    (uintptr_t)fn);
		nmi_register_handler(kpi_nmi_entry[i]);
		return (i);
	}
	return (-1);
}

void *
kpi_nmi_remove(int slot)
{
	struct kpi_nmi_slot *s;
	void *arg;

	if (slot < 0 || slot >= KPI_NMI_SLOTS)
		return (NULL);
	s = &kpi_nmi_slots[slot];
	if (atomic_load_int(&s->used) == 0)
		return (NULL);
	/* Returns when no CPU runs the entry point any more. */
	nmi_remove_handler(kpi_nmi_entry[slot]);
	atomic_store_ptr(&s->fn, NULL);
	arg = s->arg;
	s->arg = NULL;
	atomic_store_rel_int(&s->used, 0);
	return (arg);
}

void
kpi_set_user_rdpmc(int enabled)
{
	if (enabled)
		load_cr4(rcr4() | CR4_PCE);
	else
		load_cr4(rcr4() & ~CR4_PCE);
}

void
kpi_delay(int usec)
{
	DELAY(usec);
}

int
kpi_vm_guest(void)
{
	return (vm_guest != VM_GUEST_NO);
}

int
kpi_rdmsr_safe(uint32_t msr, uint64_t *value)
{
	return (rdmsr_safe(msr, value));
}

int
kpi_wrmsr_safe(uint32_t msr, uint64_t value)
{
	return (wrmsr_safe(msr, value));
}
#endif

/*
 * Software interrupts.
 */

int
kpi_swi_add(const char *name, size_t len, kpi_swi_fn_t *fn, void *arg,
    void **cookie)
{
	char buf[MAXCOMLEN + 1];
	size_t n;

	/* The name comes by length; the event copies it (ih_name). */
	n = MIN(len, sizeof(buf) - 1);
	memcpy(buf, name, n);
	buf[n] = '\0';
	*cookie = NULL;
	return (swi_add(&clk_intr_event, buf, fn, arg, SWI_CLOCK,
	    INTR_MPSAFE, cookie));
}

void
kpi_swi_sched(void *cookie)
{
	int flags;

	flags = 0;
#if defined(__amd64__)
	/* An NMI cannot take the event's locks: an IPI to self schedules. */
	if (kpi_in_nmi())
		flags = SWI_FROMNMI;
#endif
	swi_sched(cookie, flags);
}

void
kpi_swi_remove(void *cookie)
{
	int error __diagused;

	error = swi_remove(cookie);
	KASSERT(error == 0, ("kpi_swi_remove: %d", error));
}

/*
 * Sleep and wakeup.
 */

/* A signal ends a PCATCH sleep with EINTR, restartable or not. */
static int
kpi_sleep_error(int error)
{
	return (error == ERESTART ? EINTR : error);
}

int
kpi_msleep(void *lock, uintptr_t chan, const char *wmesg, int catch)
{
	return (kpi_sleep_error(msleep((void *)chan, (struct mtx *)lock,
	    catch ? PCATCH : 0, wmesg, 0)));
}

int
kpi_tsleep(uintptr_t chan, const char *wmesg, int catch)
{
	return (kpi_sleep_error(tsleep((void *)chan, catch ? PCATCH : 0,
	    wmesg, 0)));
}

void
kpi_wakeup(uintptr_t chan)
{
	wakeup((void *)chan);
}

/*
 * p_flag2 and hwt(4)'s credential test.
 */

uint32_t
kpi_proc_flag2(uint32_t pid)
{
	struct proc *p;
	uint32_t flag2;

	if ((p = pfind_any(pid)) == NULL)
		return (0);
	flag2 = p->p_flag2;
	PROC_UNLOCK(p);
	return (flag2);
}

void
kpi_proc_flag2_set(uint32_t pid, uint32_t set, uint32_t clear)
{
	struct proc *p;

	if ((p = pfind_any(pid)) == NULL)
		return;
	p->p_flag2 = (p->p_flag2 | set) & ~clear;
	PROC_UNLOCK(p);
}

int
kpi_cred_same_user(uint32_t owner, uint32_t target)
{
	struct ucred *oc, *tc;
	bool ok;
	int i;

	if ((oc = kpi_proc_cred(owner)) == NULL)
		return (0);
	if ((tc = kpi_proc_cred(target)) == NULL) {
		crfree(oc);
		return (0);
	}
	/* No privilege overrides it: root traces only its own processes. */
	ok = oc->cr_uid == tc->cr_uid || oc->cr_uid == tc->cr_ruid ||
	    oc->cr_uid == tc->cr_svuid;
	for (i = 0; ok && i < tc->cr_ngroups; i++)
		ok = groupmember(tc->cr_groups[i], oc);
	ok = ok && groupmember(tc->cr_gid, oc) &&
	    groupmember(tc->cr_rgid, oc) && groupmember(tc->cr_svgid, oc);
	crfree(tc);
	crfree(oc);
	return (ok);
}

/*
 * Device pages: an OBJT_MGTDEVICE cdev pager object whose pages are
 * inserted at allocation, so the pager's fault method never finds one
 * missing (if it did, SIGBUS).  At the last reference the pages leave
 * every mapping and the pager goes, as hwt_vm.c's teardown does; a
 * mapping that outlives them holds a dead object.
 */
struct kpi_pages {
	volatile u_int	refs;
	size_t		npages;
	vm_object_t	obj;
	vm_offset_t	kva;
	vm_page_t	pages[];
};

static int
kpi_pages_fault(vm_object_t obj __unused, vm_ooffset_t offset __unused,
    int prot __unused, vm_page_t *mres __unused)
{
	return (VM_PAGER_BAD);
}

static int
kpi_pages_ctor(void *handle __unused, vm_ooffset_t size __unused,
    vm_prot_t prot __unused, vm_ooffset_t foff __unused,
    struct ucred *cred __unused, u_short *color)
{
	*color = 0;
	return (0);
}

static void
kpi_pages_dtor(void *handle __unused)
{
}

static struct cdev_pager_ops kpi_pages_ops = {
	.cdev_pg_fault =	kpi_pages_fault,
	.cdev_pg_ctor =		kpi_pages_ctor,
	.cdev_pg_dtor =		kpi_pages_dtor,
};

/* The pages allocated so far, the mapping and the object, as hwt does. */
static void
kpi_pages_free(struct kpi_pages *kp)
{
	vm_page_t m;
	size_t i;

	if (kp->kva != 0) {
		pmap_qremove(kp->kva, kp->npages);
		kva_free(kp->kva, kp->npages * PAGE_SIZE);
	}
	if (kp->obj != NULL) {
		VM_OBJECT_WLOCK(kp->obj);
		for (i = 0; i < kp->npages && (m = kp->pages[i]) != NULL; i++) {
			vm_page_busy_acquire(m, 0);
			/* Out of the object and of every process's map. */
			cdev_pager_free_page(kp->obj, m);
			m->flags &= ~PG_FICTITIOUS;
			vm_page_unwire_noq(m);
			vm_page_free(m);
		}
		/*
		 * The pager goes now (the object dies, and the handle, this
		 * structure, leaves the pager's list); mappings keep the
		 * dead object until they go.
		 */
		vm_pager_deallocate(kp->obj);
		VM_OBJECT_WUNLOCK(kp->obj);
		vm_object_deallocate(kp->obj);
	}
	free(kp, M_HWPMC);
}

int
kpi_pages_alloc(size_t npages, int wait, void **pages)
{
	struct kpi_pages *kp;
	vm_paddr_t high;
	vm_page_t m;
	size_t i;
	int pflags, tries;

	if (npages == 0 || npages > SIZE_MAX / PAGE_SIZE / 2)
		return (EINVAL);
	kp = malloc(sizeof(*kp) + npages * sizeof(kp->pages[0]), M_HWPMC,
	    ((wait & KPI_M_WAITOK) ? M_WAITOK : M_NOWAIT) | M_ZERO);
	if (kp == NULL)
		return (ENOMEM);
	refcount_init(&kp->refs, 1);
	kp->npages = npages;
	kp->kva = kva_alloc(npages * PAGE_SIZE);
	if (kp->kva == 0) {
		kpi_pages_free(kp);
		return (ENOMEM);
	}
	kp->obj = cdev_pager_allocate(kp, OBJT_MGTDEVICE, &kpi_pages_ops,
	    npages * PAGE_SIZE, VM_PROT_READ, 0, curthread->td_ucred);
	if (kp->obj == NULL) {
		kpi_pages_free(kp);
		return (ENOMEM);
	}
	/* Zeroed (VM_ALLOC_ZERO zeroes what is not zero already). */
	pflags = VM_ALLOC_NORMAL | VM_ALLOC_WIRED | VM_ALLOC_ZERO;
	high = ~(vm_paddr_t)0;
	for (i = 0; i < npages; i++) {
		tries = 0;
		while ((m = vm_page_alloc_noobj_contig(pflags, 1, 0, high,
		    PAGE_SIZE, 0, VM_MEMATTR_DEFAULT)) == NULL) {
			/* As hwt_vm.c: reclaim or wait, three times at most. */
			if (!(wait & KPI_M_WAITOK) || tries++ == 3) {
				kpi_pages_free(kp);
				return (ENOMEM);
			}
			if (!vm_page_reclaim_contig(pflags, 1, 0, high,
			    PAGE_SIZE, 0))
				vm_wait(NULL);
		}
		/* Managed and fictitious, so that unmapping finds its maps. */
		m->valid = VM_PAGE_BITS_ALL;
		m->oflags &= ~VPO_UNMANAGED;
		m->flags |= PG_FICTITIOUS;
		VM_OBJECT_WLOCK(kp->obj);
		if (vm_page_insert(m, kp->obj, i) != 0) {
			/* No radix node: undo this page, free the others. */
			VM_OBJECT_WUNLOCK(kp->obj);
			m->flags &= ~PG_FICTITIOUS;
			m->oflags |= VPO_UNMANAGED;
			vm_page_unwire_noq(m);
			vm_page_free(m);
			kpi_pages_free(kp);
			return (ENOMEM);
		}
		kp->pages[i] = m;
		VM_OBJECT_WUNLOCK(kp->obj);
		pmap_qenter(kp->kva + i * PAGE_SIZE, &m, 1);
	}
	*pages = kp;
	return (0);
}

void
kpi_pages_ref(void *pages)
{
	struct kpi_pages *kp = pages;

	refcount_acquire(&kp->refs);
}

void
kpi_pages_unref(void *pages)
{
	struct kpi_pages *kp = pages;

	if (refcount_release(&kp->refs))
		kpi_pages_free(kp);
}

size_t
kpi_pages_count(void *pages)
{
	return (((struct kpi_pages *)pages)->npages);
}

uint64_t
kpi_pages_phys(void *pages, size_t i)
{
	struct kpi_pages *kp = pages;

	KASSERT(i < kp->npages, ("kpi_pages_phys: page %zu of %zu", i,
	    kp->npages));
	return (VM_PAGE_TO_PHYS(kp->pages[i]));
}

void *
kpi_pages_kva(void *pages)
{
	return ((void *)((struct kpi_pages *)pages)->kva);
}

/*
 * Character devices: one cdevsw whose methods call the driver's through
 * the struct kpi_cdev in si_drv1.
 */
struct kpi_cdev {
	struct cdev		*dev;
	kpi_cdev_ioctl_t	*ioctl;
	kpi_cdev_mmap_t		*mmap;
	kpi_cdev_gone_t		*gone;
	void			*arg;
};

/* Devices whose destruction is scheduled and not done. */
static volatile u_int kpi_cdev_dying;

static d_ioctl_t kpi_cdev_ioctl;
static d_mmap_single_t kpi_cdev_mmap_single;

static struct cdevsw kpi_cdevsw = {
	.d_version =		D_VERSION,
	.d_name =		"kpi",
	.d_ioctl =		kpi_cdev_ioctl,
	.d_mmap_single =	kpi_cdev_mmap_single,
};

static int
kpi_cdev_ioctl(struct cdev *dev, u_long cmd, caddr_t data,
    int fflag __unused, struct thread *td __unused)
{
	struct kpi_cdev *kc = dev->si_drv1;

	return (kc->ioctl(kc->arg, (uint32_t)cmd, data, IOCPARM_LEN(cmd)));
}

static int
kpi_cdev_mmap_single(struct cdev *dev, vm_ooffset_t *offset, vm_size_t size,
    vm_object_t *objp, int nprot)
{
	struct kpi_cdev *kc = dev->si_drv1;
	struct kpi_pages *kp;
	int error;

	kp = NULL;
	error = kc->mmap(kc->arg, *offset, size, nprot, (void **)&kp);
	if (error != 0)
		return (error);
	if (kp == NULL)
		return (ENODEV);
	/* The mapping holds the object; the driver's reference goes. */
	vm_object_reference(kp->obj);
	*objp = kp->obj;
	kpi_pages_unref(kp);
	return (0);
}

int
kpi_make_dev(const char *name, size_t len, uint32_t uid, uint32_t gid,
    int mode, kpi_cdev_ioctl_t *ioctl, kpi_cdev_mmap_t *mmap,
    kpi_cdev_gone_t *gone, void *arg, void **cdev)
{
	struct make_dev_args args;
	struct kpi_cdev *kc;
	char path[SPECNAMELEN + 1];
	int error, tries;

	if ((error = kpi_cstr(path, sizeof(path), name, len)) != 0)
		return (error);
	kc = malloc(sizeof(*kc), M_HWPMC, M_WAITOK | M_ZERO);
	kc->ioctl = ioctl;
	kc->mmap = mmap;
	kc->gone = gone;
	kc->arg = arg;
	make_dev_args_init(&args);
	args.mda_flags = MAKEDEV_CHECKNAME | MAKEDEV_WAITOK;
	args.mda_devsw = &kpi_cdevsw;
	args.mda_cr = NULL;
	args.mda_uid = uid;
	args.mda_gid = gid;
	args.mda_mode = mode;
	args.mda_si_drv1 = kc;
	for (tries = 0;; tries++) {
		error = make_dev_s(&args, &kc->dev, "%s", path);
		/*
		 * The name may belong to a device on its way out (its drop
		 * only scheduled the destruction): wait for it, a second at
		 * most, as a driver that frees a name expects to reuse it.
		 */
		if (error != EEXIST || tries >= hz ||
		    atomic_load_acq_int(&kpi_cdev_dying) == 0)
			break;
		pause("kpidev", 1);
	}
	if (error != 0) {
		free(kc, M_HWPMC);
		return (error);
	}
	*cdev = kc;
	return (0);
}

static void
kpi_cdev_gone(void *arg)
{
	struct kpi_cdev *kc = arg;

	kc->gone(kc->arg);
	free(kc, M_HWPMC);
	atomic_subtract_rel_int(&kpi_cdev_dying, 1);
}

/*
 * destroy_dev_sched_cb(), not destroy_dev(): the last reference to a
 * device may go inside one of its own methods (hwt: a context freed by
 * its owner's exit while an ioctl on its buffer runs), where destroy_dev
 * would wait for itself.  The driver's methods stay until gone() runs.
 */
void
kpi_destroy_dev(void *cdev)
{
	struct kpi_cdev *kc = cdev;

	atomic_add_int(&kpi_cdev_dying, 1);
	destroy_dev_sched_cb(kc->dev, kpi_cdev_gone, kc);
}

void
kpi_cdev_drain(void)
{
	destroy_dev_drain(&kpi_cdevsw);
}

/*
 * hwt_hook, installed as kpi_set_pmc_hook installs pmc_hook: calls in
 * progress are counted so that removal can wait for them.
 */
extern void (*hwt_hook)(struct thread *td, int func, void *arg);

static kpi_hwt_hook_t *volatile kpi_hwt_fn;
static void *volatile kpi_hwt_arg;
static volatile u_int kpi_hwt_active;

_Static_assert(HWT_RECORD_MMAP >= 0, "sys/hwt_record.h");

static void
kpi_hwt_hook(struct thread *td, int func, void *arg)
{
	struct kpi_hwt_hook_args call;
	struct hwt_record_entry *ent;
	kpi_hwt_hook_t *fn;

	memset(&call, 0, sizeof(call));
	call.func = func;
	call.tid = td->td_tid;
	call.pid = td->td_proc->p_pid;
	/* Unlocked, as hwt's handler reads it: the switch hooks spin. */
	call.flag2 = atomic_load_int(&td->td_proc->p_flag2);
	if ((func == KPI_HWT_RECORD || func == KPI_HWT_MMAP ||
	    func == KPI_HWT_EXEC) && arg != NULL) {
		ent = arg;
		call.has_record = 1;
		call.record_type = ent->record_type;
		if (func != KPI_HWT_RECORD && ent->fullpath != NULL) {
			call.fullpath = ent->fullpath;
			call.pathlen = strlen(ent->fullpath);
		}
		call.addr = ent->addr;
		/* Only exec sets it (mmap and munmap leave it unset). */
		if (func == KPI_HWT_EXEC)
			call.baseaddr = ent->baseaddr;
	}
	atomic_add_int(&kpi_hwt_active, 1);
	/* Pairs with the fence in kpi_set_hwt_hook(). */
	atomic_thread_fence_seq_cst();
	fn = atomic_load_ptr(&kpi_hwt_fn);
	if (fn != NULL)
		fn(atomic_load_ptr(&kpi_hwt_arg), &call);
	atomic_subtract_rel_int(&kpi_hwt_active, 1);
}

void
kpi_set_hwt_hook(kpi_hwt_hook_t *hook, void *arg)
{
	if (hook != NULL) {
		atomic_store_ptr(&kpi_hwt_arg, arg);
		atomic_store_rel_ptr((volatile uintptr_t *)&kpi_hwt_fn,
		    (uintptr_t)hook);
		atomic_store_rel_ptr((volatile uintptr_t *)&hwt_hook,
		    (uintptr_t)kpi_hwt_hook);
		return;
	}
	atomic_store_ptr(&hwt_hook, NULL);
	atomic_store_ptr(&kpi_hwt_fn, NULL);
	atomic_thread_fence_seq_cst();
	/* Every call that saw the old hook has left it. */
	while (atomic_load_acq_int(&kpi_hwt_active) != 0)
		pause("kpihwt", 1);
	atomic_store_ptr(&kpi_hwt_arg, NULL);
}
