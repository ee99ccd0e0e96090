//! The driver's sysctls and loader tunables, as hwpmc_mod.c and
//! hwpmc_logging.c declare them: names, types, access and defaults. On
//! FreeBSD they are declared in the C glue (hwpmc_glue.c), which must
//! agree with this table (the load checks that each is there; a test
//! compares both, and the simulator's tree, with the FreeBSD sources).

use kpi::KResult;
use kpi::sysctl::{
    CTLFLAG_MPSAFE, CTLFLAG_NOFETCH, CTLFLAG_RD, CTLFLAG_RDTUN, CTLFLAG_RW, CTLFLAG_RWTUN,
    CTLFLAG_STATS, Counter, IntKnob, SysctlDecl, SysctlType,
};
use uapi::pmc::{
    PMC_CALLCHAIN_DEPTH, PMC_HASH_SIZE, PMC_LOG_BUFFER_SIZE, PMC_MTXPOOL_SIZE,
    PMC_NLOGBUFFERS_PCPU, PMC_NSAMPLES, PMC_THREADLIST_MAX,
};

/// Default `kern.hwpmc.mincount`.
pub const PMC_MINCOUNT: i64 = 1000;

const fn int(name: &'static str, flags: u32, default: i64) -> SysctlDecl {
    // SYSCTL_INT adds CTLFLAG_MPSAFE itself.
    SysctlDecl {
        name,
        kind: SysctlType::Int,
        flags: flags | CTLFLAG_MPSAFE,
        default,
    }
}

const fn counter(name: &'static str) -> SysctlDecl {
    // SYSCTL_COUNTER_U64 adds CTLFLAG_MPSAFE and CTLFLAG_STATS itself.
    SysctlDecl {
        name,
        kind: SysctlType::Counter,
        flags: CTLFLAG_RW | CTLFLAG_MPSAFE | CTLFLAG_STATS,
        default: 0,
    }
}

/// Every oid of the driver, in hwpmc_mod.c's order, then hwpmc_logging.c's.
pub static SYSCTLS: [SysctlDecl; 23] = [
    SysctlDecl {
        name: "kern.hwpmc.stats",
        kind: SysctlType::Node,
        flags: CTLFLAG_RW | CTLFLAG_MPSAFE,
        default: 0,
    },
    counter("kern.hwpmc.stats.intr_ignored"),
    counter("kern.hwpmc.stats.intr_processed"),
    counter("kern.hwpmc.stats.intr_bufferfull"),
    counter("kern.hwpmc.stats.syscalls"),
    counter("kern.hwpmc.stats.syscall_errors"),
    counter("kern.hwpmc.stats.buffer_requests"),
    counter("kern.hwpmc.stats.buffer_requests_failed"),
    counter("kern.hwpmc.stats.log_sweeps"),
    counter("kern.hwpmc.stats.merges"),
    counter("kern.hwpmc.stats.overwrites"),
    int(
        "kern.hwpmc.callchaindepth",
        CTLFLAG_RDTUN,
        PMC_CALLCHAIN_DEPTH as i64,
    ),
    // SYSCTL_STRING adds CTLFLAG_MPSAFE too.
    SysctlDecl {
        name: "kern.hwpmc.cpuid",
        kind: SysctlType::String,
        flags: CTLFLAG_RD | CTLFLAG_MPSAFE,
        default: 0,
    },
    SysctlDecl {
        name: "kern.hwpmc.debugflags",
        kind: SysctlType::String,
        flags: CTLFLAG_RWTUN | CTLFLAG_NOFETCH | CTLFLAG_MPSAFE,
        default: 0,
    },
    int("kern.hwpmc.hashsize", CTLFLAG_RDTUN, PMC_HASH_SIZE as i64),
    int("kern.hwpmc.nsamples", CTLFLAG_RDTUN, PMC_NSAMPLES as i64),
    int(
        "kern.hwpmc.mtxpoolsize",
        CTLFLAG_RDTUN,
        PMC_MTXPOOL_SIZE as i64,
    ),
    int("kern.hwpmc.threadfreelist_entries", CTLFLAG_RD, 0),
    int(
        "kern.hwpmc.threadfreelist_max",
        CTLFLAG_RW,
        PMC_THREADLIST_MAX as i64,
    ),
    int("kern.hwpmc.mincount", CTLFLAG_RWTUN, PMC_MINCOUNT),
    int("security.bsd.unprivileged_syspmcs", CTLFLAG_RWTUN, 0),
    int(
        "kern.hwpmc.logbuffersize",
        CTLFLAG_RDTUN,
        PMC_LOG_BUFFER_SIZE as i64,
    ),
    int(
        "kern.hwpmc.nbuffers_pcpu",
        CTLFLAG_RDTUN,
        PMC_NLOGBUFFERS_PCPU as i64,
    ),
];

/// The `int` variables behind the driver's oids.
#[derive(Debug)]
pub(crate) struct Knobs {
    pub callchaindepth: IntKnob,
    pub hashsize: IntKnob,
    pub nsamples: IntKnob,
    pub mtxpoolsize: IntKnob,
    pub threadfreelist_entries: IntKnob,
    pub threadfreelist_max: IntKnob,
    pub mincount: IntKnob,
    pub unprivileged_syspmcs: IntKnob,
    pub logbuffersize: IntKnob,
    pub nbuffers_pcpu: IntKnob,
}

impl Knobs {
    /// The declared variables.
    pub fn find() -> KResult<Knobs> {
        Ok(Knobs {
            callchaindepth: IntKnob::find("kern.hwpmc.callchaindepth")?,
            hashsize: IntKnob::find("kern.hwpmc.hashsize")?,
            nsamples: IntKnob::find("kern.hwpmc.nsamples")?,
            mtxpoolsize: IntKnob::find("kern.hwpmc.mtxpoolsize")?,
            threadfreelist_entries: IntKnob::find("kern.hwpmc.threadfreelist_entries")?,
            threadfreelist_max: IntKnob::find("kern.hwpmc.threadfreelist_max")?,
            mincount: IntKnob::find("kern.hwpmc.mincount")?,
            unprivileged_syspmcs: IntKnob::find("security.bsd.unprivileged_syspmcs")?,
            logbuffersize: IntKnob::find("kern.hwpmc.logbuffersize")?,
            nbuffers_pcpu: IntKnob::find("kern.hwpmc.nbuffers_pcpu")?,
        })
    }
}

/// The driver's statistics: the counter(9)s behind `kern.hwpmc.stats`.
/// The first eight are also what PMC_OP_GETDRIVERSTATS returns.
#[derive(Debug)]
pub struct Stats {
    /// Interrupts that concerned no PMC.
    pub intr_ignored: Counter,
    /// Interrupts handled.
    pub intr_processed: Counter,
    /// Samples dropped on a full ring.
    pub intr_bufferfull: Counter,
    /// System calls.
    pub syscalls: Counter,
    /// System calls that failed.
    pub syscall_errors: Counter,
    /// Log buffer requests.
    pub buffer_requests: Counter,
    /// Log buffer requests that failed.
    pub buffer_requests_failed: Counter,
    /// Sample processing passes.
    pub log_sweeps: Counter,
    /// User call chains merged into samples at the return to user mode.
    pub merges: Counter,
    /// Samples whose user call chain was given up on (the thread did not
    /// return to user mode in time).
    pub overwrites: Counter,
}

impl Stats {
    /// Allocates the counters (`counter_u64_alloc`).
    pub(crate) fn attach() -> KResult<Stats> {
        Ok(Stats {
            intr_ignored: Counter::attach("kern.hwpmc.stats.intr_ignored")?,
            intr_processed: Counter::attach("kern.hwpmc.stats.intr_processed")?,
            intr_bufferfull: Counter::attach("kern.hwpmc.stats.intr_bufferfull")?,
            syscalls: Counter::attach("kern.hwpmc.stats.syscalls")?,
            syscall_errors: Counter::attach("kern.hwpmc.stats.syscall_errors")?,
            buffer_requests: Counter::attach("kern.hwpmc.stats.buffer_requests")?,
            buffer_requests_failed: Counter::attach("kern.hwpmc.stats.buffer_requests_failed")?,
            log_sweeps: Counter::attach("kern.hwpmc.stats.log_sweeps")?,
            merges: Counter::attach("kern.hwpmc.stats.merges")?,
            overwrites: Counter::attach("kern.hwpmc.stats.overwrites")?,
        })
    }
}
