/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * The C side of kpi's FreeBSD backend: the kernel interfaces the Rust
 * kernel crates use, as plain functions.  Macros, inline functions and
 * kernel structure fields stay on this side, so the Rust code never
 * depends on a kernel structure's layout; bindgen reads this header (with
 * the module's own CFLAGS) to declare these functions to Rust.
 *
 * Conventions: pids and thread ids are the kernel's; an int result is 0
 * or an errno value; strings passed in carry their length.
 */

#ifndef _KPI_GLUE_H_
#define	_KPI_GLUE_H_

#include <sys/types.h>

/* A name passed by length into a NUL-terminated buffer (the C glue's). */
int	kpi_cstr(char *dst, size_t dstlen, const char *src, size_t len);

/* Console and tracing. */
void	kpi_printf(const char *line, size_t len);
void	kpi_ktr(const char *line, size_t len);
void	kpi_panic(const char *msg, size_t len) __dead2;

/* CPUs. */
uint32_t kpi_curcpu(void);
uint32_t kpi_ncpu_ids(void);		/* mp_maxid + 1 */
int	kpi_cpu_exists(uint32_t cpu);	/* !CPU_ABSENT(cpu) */
int	kpi_cpu_active(uint32_t cpu);	/* present, not halted */
uint32_t kpi_bind(uint32_t cpu);	/* sched_bind; previous binding or ~0 */
void	kpi_unbind(uint32_t previous);
int	kpi_in_interrupt(void);		/* an interrupt frame is current */
int	kpi_in_nmi(void);		/* 1: in one of kpi's NMI handlers */
int	kpi_can_sleep(void);		/* no critical section, no spin lock */
void	kpi_critical_enter(void);
void	kpi_critical_exit(void);

/* Time. */
uint64_t kpi_cyclecount(void);
uint64_t kpi_cyclecount_freq(void);
void	kpi_nanotime(int64_t *sec, int64_t *nsec);

/* Memory (malloc(9) with the M_HWPMC type). */
#define	KPI_M_NOWAIT	0x0	/* M_NOWAIT */
#define	KPI_M_WAITOK	0x1	/* M_WAITOK */
#define	KPI_M_ZERO	0x2	/* M_ZERO */
void	*kpi_malloc(size_t size, size_t align, int flags);	/* KPI_M_* */
void	kpi_free(void *ptr);

/* Locks: storage is sized by the kernel's own struct mtx and struct sx. */
#define	KPI_LOCK_SLEEP	0	/* mtx, MTX_DEF */
#define	KPI_LOCK_SPIN	1	/* mtx, MTX_SPIN */
#define	KPI_LOCK_SX	2	/* sx */
size_t	kpi_lock_size(void);		/* bytes of the largest of the three */
void	kpi_lock_init(void *lock, const char *name, int kind);
void	kpi_lock_destroy(void *lock, int kind);
void	kpi_lock_exclusive(void *lock, int kind);
void	kpi_lock_shared(void *lock, int kind);
void	kpi_unlock_exclusive(void *lock, int kind);
void	kpi_unlock_shared(void *lock, int kind);
void	kpi_may_sleep(void);		/* WITNESS_WARN of a sleep point */
void	kpi_pause_one_tick(void);	/* pause(9) for a tick */

/* Processes and credentials. */
struct kpi_proc_info {
	uint32_t	pid;
	uint32_t	ppid;
	uint32_t	flags;		/* P_* of p_flag */
	int		zombie;
	uint32_t	nthreads;	/* threads, even beyond the buffer */
	char		comm[20];	/* MAXCOMLEN + 1 */
};
uint32_t kpi_curthread(void);		/* td_tid */
uint32_t kpi_curproc(void);		/* p_pid */
/* ESRCH when there is no such process; tids gets at most ntids ids. */
int	kpi_proc_info(uint32_t pid, struct kpi_proc_info *info,
	    uint32_t *tids, uint32_t ntids);
/* Full path of the process's executable; the length, or -1. */
int	kpi_proc_path(uint32_t pid, char *buf, size_t len);
/* Children, all processes: the count, even beyond the buffer. */
uint32_t kpi_proc_children(uint32_t pid, uint32_t *pids, uint32_t npids);
uint32_t kpi_all_pids(uint32_t *pids, uint32_t npids);
/* 0, ESRCH, or EWOULDBLOCK where the lookup cannot lock (interrupts). */
int	kpi_thread_pid(uint32_t tid, uint32_t *pid);
void	kpi_proc_flags(uint32_t pid, uint32_t set, uint32_t clear);
int	kpi_p_candebug(uint32_t pid);
int	kpi_priv_check(int privilege);
int	kpi_cred_covers(uint32_t owner, uint32_t target);
int	kpi_jailed(void);
int	kpi_curproc_flags(void);
void	kpi_psignal(uint32_t pid, int sig);
void	kpi_request_userret(void);	/* TDP_CALLCHAIN and an AST */

/* User memory. */
int	kpi_copyin(uint64_t uaddr, void *kaddr, size_t len);
int	kpi_copyout(const void *kaddr, uint64_t uaddr, size_t len);

/* Tunables (kenv) and sysctls. */
/* The length of the value, or -1; at most len - 1 bytes and a NUL. */
int	kpi_kenv_str(const char *name, size_t namelen, char *buf, size_t len);
int	kpi_sysctl_int(const char *name, size_t len, int64_t *value);
/*
 * The module's own oids are declared statically in its C glue, as
 * FreeBSD's C drivers declare theirs, and the glue lists the variables
 * behind them in kpi_module_knobs[] (kpi_module_nknobs entries) for the
 * Rust code to find by full name.
 */
#define	KPI_KNOB_NODE		0
#define	KPI_KNOB_INT		1	/* var: int * */
#define	KPI_KNOB_COUNTER	2	/* var: counter_u64_t * */
#define	KPI_KNOB_STRING		3	/* var: unused; kpi_sysctl_str_proc */
struct kpi_knob {
	const char	*name;
	int		kind;		/* KPI_KNOB_* */
	void		*var;
};
extern const struct kpi_knob kpi_module_knobs[];
extern const size_t kpi_module_nknobs;
/* The entry of `name` of that kind, or NULL. */
const struct kpi_knob *kpi_knob_find(const char *name, size_t len, int kind);
int	kpi_knob_int_get(const struct kpi_knob *k);
void	kpi_knob_int_set(const struct kpi_knob *k, int value);
/* counter_u64_alloc(M_WAITOK) into the entry's variable, and back. */
void	kpi_knob_counter_alloc(const struct kpi_knob *k);
void	kpi_knob_counter_free(const struct kpi_knob *k);
void	kpi_knob_counter_add(const struct kpi_knob *k, uint64_t n);
uint64_t kpi_knob_counter_fetch(const struct kpi_knob *k);
/*
 * A string under kern.hwpmc whose writes go to the handler (0 accepts the
 * new value, an errno refuses it).  The oid itself is the glue's
 * SYSCTL_PROC with kpi_sysctl_str_proc as its handler; ENOENT when no
 * such string is declared, ENOSPC when the table is full.
 */
typedef int kpi_sysctl_str_handler_t(void *arg, const char *value,
    size_t len);
int	kpi_sysctl_str_register(const char *name, size_t namelen,
	    const char *value, size_t valuelen,
	    kpi_sysctl_str_handler_t *handler, void *arg);
void	kpi_sysctl_str_remove(const char *name, size_t len);
struct sysctl_oid;
struct sysctl_req;
int	kpi_sysctl_str_proc(struct sysctl_oid *oidp, void *arg1,
	    intmax_t arg2, struct sysctl_req *req);

/* The hwpmc system call: the slot the module registered (kpi side). */
typedef int kpi_syscall_t(void *arg, const uint64_t *args, size_t nargs,
    int64_t *retval);
uint32_t kpi_syscall_register(kpi_syscall_t *handler, void *arg);
void	kpi_syscall_deregister(uint32_t num);
/*
 * The sysent's sy_call (for the module's C glue, not for Rust): decodes
 * struct pmc_syscall_args into args[0] = op, args[1] = data, calls the
 * registered handler, sets td_retval[0]; 0 or an errno.
 */
struct thread;
int	kpi_syscall_dispatch(struct thread *td, void *uap);

/* pmc_hook: the kernel's calls into the driver, decoded. */
#define	KPI_HOOK_CSW_IN		1
#define	KPI_HOOK_CSW_OUT	2
#define	KPI_HOOK_PROCESS_EXEC	3
#define	KPI_HOOK_SOFT_SAMPLING	4
#define	KPI_HOOK_THR_CREATE	5
#define	KPI_HOOK_THR_EXIT	6
#define	KPI_HOOK_USER_RET	7
#define	KPI_HOOK_DO_SAMPLES	8
#define	KPI_HOOK_MMAP		9
#define	KPI_HOOK_MUNMAP		10
#define	KPI_HOOK_THR_CREATE_LOG	11
#define	KPI_HOOK_THR_EXIT_LOG	12
#define	KPI_HOOK_PROC_CREATE_LOG 13
#define	KPI_COMLEN		20	/* MAXCOMLEN + 1 */
struct kpi_hook_args {
	int		hook;		/* KPI_HOOK_* */
	int		credentials_changed;
	uint64_t	base;		/* exec base, mmap/munmap address */
	uint64_t	dyn_base;	/* exec: dynamic linker base */
	uint64_t	size;		/* munmap size */
	uint32_t	ev;		/* soft event */
	uint32_t	cpu;		/* soft event's CPU */
	uint32_t	tid;		/* thread create/exit: the thread */
	uint32_t	pid;		/* thread create: its process; proc create */
	uint32_t	flags;		/* that process's p_flag */
	char		name[KPI_COMLEN]; /* td_name, or p_comm (proc create) */
};
typedef int kpi_hook_t(void *arg, const struct kpi_hook_args *call);
/* NULL removes the hook. */
void	kpi_set_pmc_hook(kpi_hook_t *hook, void *arg);

#if defined(__amd64__)
/* The x86 PMU: MSRs, CPUID, the local APIC's PMC entry, the NMI handler. */
uint64_t kpi_rdmsr(uint32_t msr);
void	kpi_wrmsr(uint32_t msr, uint64_t value);
void	kpi_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t *regs);
int	kpi_lapic_enable_pcint(void);	/* 0: no PMC LVT entry */
void	kpi_lapic_disable_pcint(void);
void	kpi_lapic_reenable_pcint(void);
typedef int kpi_pmc_intr_t(void);	/* 1: the NMI was the PMU's */
/* NULL removes the handler. */
void	kpi_set_pmc_intr(kpi_pmc_intr_t *handler);
void	kpi_set_user_rdpmc(int enabled);	/* CR4.PCE */
void	kpi_delay(int usec);		/* DELAY(9): a busy wait */
int	kpi_vm_guest(void);		/* 1: vm_guest != VM_GUEST_NO */
/* rdmsr_safe and wrmsr_safe: 0, or EFAULT where the access faults. */
int	kpi_rdmsr_safe(uint32_t msr, uint64_t *value);
int	kpi_wrmsr_safe(uint32_t msr, uint64_t value);
/*
 * Further NMI handlers (nmi_register_handler): a few slots, each its own
 * C function.  Register returns the slot or -1 (all taken); remove waits
 * until no NMI runs the handler and returns its argument.
 */
typedef int kpi_nmi_fn_t(void *arg);	/* 1: the NMI was this handler's */
int	kpi_nmi_register(kpi_nmi_fn_t *fn, void *arg);
void	*kpi_nmi_remove(int slot);
/*
 * XSAVES / XRSTORS of the Intel PT state component on the current CPU
 * (kpi_glue_pt.c): RTIT_CTL, OUTPUT_BASE, OUTPUT_MASK_PTRS, STATUS,
 * CR3_MATCH, ADDR0_A, ADDR0_B, ADDR1_A, ADDR1_B.  In a critical section
 * or an NMI handler.
 */
#define	KPI_PT_STATE_WORDS	9
void	kpi_xsaves_pt(uint64_t *state);
void	kpi_xrstors_pt(const uint64_t *state);
#endif

/*
 * Software interrupts: handlers of clk_intr_event (swi_add(9)).
 * kpi_swi_sched passes SWI_FROMNMI when called from a kpi NMI handler.
 * kpi_swi_remove returns once the handler is off the event.
 */
typedef void kpi_swi_fn_t(void *arg);
int	kpi_swi_add(const char *name, size_t len, kpi_swi_fn_t *fn, void *arg,
	    void **cookie);
void	kpi_swi_sched(void *cookie);
void	kpi_swi_remove(void *cookie);

/* process_fork, process_exit, kld_load, kld_unload event handlers. */
#define	KPI_EVENT_FORK		1
#define	KPI_EVENT_EXIT		2
#define	KPI_EVENT_KLD_LOAD	3
#define	KPI_EVENT_KLD_UNLOAD	4
struct kpi_event_args {
	int		event;		/* KPI_EVENT_* */
	uint32_t	parent;		/* fork */
	uint32_t	pid;		/* fork: child; exit: the process */
	uint64_t	addr;		/* kld */
	uint64_t	size;		/* kld unload */
};
typedef void kpi_event_t(void *arg, const struct kpi_event_args *ev);
uint64_t kpi_eventhandler_register(kpi_event_t *handler, void *arg);
void	kpi_eventhandler_deregister(uint64_t tag);

/* kern_pmc.c: the kernel's PMC facts. */
uint32_t kpi_pmc_kernel_version(void);
/*
 * pmc_ss_count: owners of running system-wide sampling PMCs, which the
 * kernel tests before calling the *_LOG hooks.
 */
void	kpi_pmc_ss_count_add(int delta);
int	kpi_pmc_ss_count(void);
void	kpi_pmc_ss_count_reset(void);
/* PMC_VERSION of the tree the module is built in. */
uint32_t kpi_pmc_module_version(void);
/*
 * exterr_set(9) where the tree has hwpmc's exterror categories, else
 * nothing; returns error.  msg must be static.
 */
int	kpi_exterr_set(int error, unsigned int category, const char *msg,
	    uint64_t p1, uint64_t p2, int line);
size_t	kpi_pmc_cpuid(char *buf, size_t len);
/* Soft events: the count, even beyond the buffers. */
struct kpi_soft_event {
	uint32_t	code;
	char		name[64];	/* PMC_NAME_MAX */
};
uint32_t kpi_soft_events(struct kpi_soft_event *evs, uint32_t nevs);
int	kpi_soft_event_registered(uint32_t code);
int	kpi_soft_event_running(uint32_t code, int delta);
void	kpi_set_cpu_sampled(uint32_t cpu);	/* DPCPU pmc_sampled */

/* Files (the log). */
int	kpi_fget_write(int fd, void **file);
void	kpi_fdrop(void *file);
int	kpi_file_write(void *file, const void *data, size_t len,
	    size_t *written);	/* one fo_write; bytes taken in *written */

/*
 * Notification descriptors: a file whose read(2) returns the latest record
 * posted (records do not queue), readable for poll(2) and EVFILT_READ while
 * one is pending, at end of file once hung up.
 */
int	kpi_notify_create(size_t record_len, void **notify, int *fd);
void	kpi_notify_post(void *notify, const void *record, size_t len);
void	kpi_notify_hangup(void *notify);
void	kpi_notify_release(void *notify);	/* the kernel's reference */

/* tdsendsignal() with SI_QUEUE and a value; 0 when the process is gone. */
int	kpi_tdsignal(uint32_t pid, uint32_t tid, int sig, int value);

/* Kernel processes running body(arg) once per wakeup until stopped. */
typedef void kpi_kproc_body_t(void *arg);
int	kpi_kproc_create(const char *name, size_t len, kpi_kproc_body_t *body,
	    void *arg, void **kproc);
void	kpi_kproc_wakeup(void *kproc);
void	kpi_kproc_stop(void *kproc);	/* a last pass, then exit; frees */
uint32_t kpi_kproc_pid(void *kproc);

/* The interrupted context and call chains (frame pointers). */
int	kpi_interrupted(uint64_t *pc);	/* 1: user mode */
uint32_t kpi_kernel_callchain(uint64_t *pcs, uint32_t max);
uint32_t kpi_user_callchain(uint64_t *pcs, uint32_t max);

/* Executable mappings of a process, and the kernel's objects. */
struct kpi_mapping {
	uint64_t	start;
	uint64_t	end;
	char		path[1024];	/* MAXPATHLEN */
};
/* The count, even beyond the buffer. */
uint32_t kpi_proc_mappings(uint32_t pid, struct kpi_mapping *maps,
	    uint32_t nmaps);
uint32_t kpi_kernel_objects(struct kpi_mapping *maps, uint32_t nmaps);

/*
 * Sleep and wakeup (sleep(9)).  chan is the address the sleepers name;
 * lock is a KPI_LOCK_SLEEP lock held by the caller, released while
 * asleep and held again on return.  catch: PCATCH; a signal gives
 * EINTR (ERESTART too, so that both backends agree).
 */
int	kpi_msleep(void *lock, uintptr_t chan, const char *wmesg, int catch);
int	kpi_tsleep(uintptr_t chan, const char *wmesg, int catch);
void	kpi_wakeup(uintptr_t chan);

/* p_flag2 under the process lock; 0 when the process is gone. */
uint32_t kpi_proc_flag2(uint32_t pid);
void	kpi_proc_flag2_set(uint32_t pid, uint32_t set, uint32_t clear);
/* hwt(4)'s test of an owner's credentials over a target's: 1 or 0. */
int	kpi_cred_same_user(uint32_t owner, uint32_t target);

/*
 * Character devices.  The driver's methods are called with the arg given
 * at creation: data is the argument area the kernel copied in (len is
 * IOCPARM_LEN(cmd)); mmap returns a page object of kpi_pages_alloc with
 * a reference for the caller.
 */
typedef int kpi_cdev_ioctl_t(void *arg, uint32_t cmd, void *data,
    size_t len);
typedef int kpi_cdev_mmap_t(void *arg, uint64_t offset, uint64_t size,
    int prot, void **pages);
/* Called once the device is gone and no method runs any more. */
typedef void kpi_cdev_gone_t(void *arg);
int	kpi_make_dev(const char *name, size_t len, uint32_t uid, uint32_t gid,
	    int mode, kpi_cdev_ioctl_t *ioctl, kpi_cdev_mmap_t *mmap,
	    kpi_cdev_gone_t *gone, void *arg, void **cdev);
/* destroy_dev_sched_cb(9): gone(arg) runs after the destruction. */
void	kpi_destroy_dev(void *cdev);
/* destroy_dev_drain(9) of kpi's cdevsw: at module unload. */
void	kpi_cdev_drain(void);

/*
 * Device pages: wired, zeroed pages in an OBJT_MGTDEVICE pager object,
 * mapped in kernel space.  Reference counted: freed with the last.
 */
int	kpi_pages_alloc(size_t npages, int wait, void **pages);	/* KPI_M_* */
void	kpi_pages_ref(void *pages);
void	kpi_pages_unref(void *pages);
size_t	kpi_pages_count(void *pages);
uint64_t kpi_pages_phys(void *pages, size_t i);
void	*kpi_pages_kva(void *pages);	/* npages * PAGE_SIZE bytes */

/*
 * hwt_hook: the kernel's calls for hwt(4), decoded.  The codes are
 * sys/dev/hwt/hwt_hook.h's.
 */
#define	KPI_HWT_SWITCH_IN	0
#define	KPI_HWT_SWITCH_OUT	1
#define	KPI_HWT_THREAD_EXIT	2
#define	KPI_HWT_THREAD_CREATE	3
#define	KPI_HWT_THREAD_SET_NAME	4
#define	KPI_HWT_RECORD		5
#define	KPI_HWT_MMAP		6
#define	KPI_HWT_EXEC		7
struct kpi_hwt_hook_args {
	int		func;		/* KPI_HWT_* */
	uint32_t	tid;		/* td_tid */
	uint32_t	pid;		/* td_proc->p_pid */
	uint32_t	flag2;		/* td_proc->p_flag2, read unlocked */
	int		has_record;	/* the fields below are set */
	uint32_t	record_type;
	const char	*fullpath;	/* NULL for none */
	size_t		pathlen;
	uint64_t	addr;
	uint64_t	baseaddr;
};
typedef void kpi_hwt_hook_t(void *arg, const struct kpi_hwt_hook_args *call);
/* NULL removes the hook and waits for the calls still in it. */
void	kpi_set_hwt_hook(kpi_hwt_hook_t *hook, void *arg);

#endif /* !_KPI_GLUE_H_ */
