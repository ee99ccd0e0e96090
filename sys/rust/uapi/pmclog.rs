//! `sys/sys/pmclog.h`: the hwpmc(4) log file format.
//!
//! A log is a stream of records in the writer's native byte order. Each
//! record starts with a 16-byte header: a word holding the magic 0xEE, the
//! type and the record length (header included, a multiple of 4), a spare
//! word and the timestamp. The C structs below give the full-size layouts;
//! records with a path name or a call chain are written only as long as
//! their contents need.
//!
//! [`PmclogRecord::encode`] and [`decode`] convert between bytes and typed
//! records without allocating, so the kernel's log writer and every reader
//! share one definition of the format.

use core::mem::{offset_of, size_of};

use crate::plain::impl_plain;
use crate::pmc::{PMC_CALLCHAIN_DEPTH_MAX, PMC_CC_F_USERSPACE, PMC_CPUID_LEN, PMC_NAME_MAX};
use crate::{MAXCOMLEN, PATH_MAX};

/// Bits 31..24 of every record's header word.
pub const PMCLOG_HEADER_MAGIC: u32 = 0xEE;

abi_enum! {
    /// `enum pmclog_type`. Value 4 is retired (it was MAPPINGCHANGE).
    pub enum PmclogType: u32 {
        Closelog = 1 => ("CLOSELOG", "log closed"),
        Dropnotify = 2 => ("DROPNOTIFY", "samples were dropped"),
        Initialize = 3 => ("INITIALIZE", "start of log"),
        Pmcallocate = 5 => ("PMCALLOCATE", "PMC allocated"),
        Pmcattach = 6 => ("PMCATTACH", "PMC attached to a process"),
        Pmcdetach = 7 => ("PMCDETACH", "PMC detached from a process"),
        Proccsw = 8 => ("PROCCSW", "value at a context switch"),
        Procexec = 9 => ("PROCEXEC", "process exec"),
        Procexit = 10 => ("PROCEXIT", "value at process exit"),
        Procfork = 11 => ("PROCFORK", "process fork"),
        Sysexit = 12 => ("SYSEXIT", "process exit seen by a system PMC"),
        Userdata = 13 => ("USERDATA", "cookie from PMC_OP_WRITELOG"),
        MapIn = 14 => ("MAP_IN", "executable mapping added"),
        MapOut = 15 => ("MAP_OUT", "executable mapping removed"),
        Callchain = 16 => ("CALLCHAIN", "sample with call chain"),
        Pmcallocatedyn = 17 => ("PMCALLOCATEDYN", "dynamic-event PMC allocated"),
        ThrCreate = 18 => ("THR_CREATE", "thread created"),
        ThrExit = 19 => ("THR_EXIT", "thread exited"),
        ProcCreate = 20 => ("PROC_CREATE", "process seen"),
    }
}

/// `_PMCLOG_TO_HEADER`: the header word of a record of `len` bytes.
pub const fn pmclog_to_header(kind: PmclogType, len: u32) -> u32 {
    (PMCLOG_HEADER_MAGIC << 24) | ((kind as u32) << 16) | (len & 0xFFFF)
}
/// `PMCLOG_HEADER_TO_LENGTH`.
pub const fn pmclog_header_to_length(h: u32) -> u32 {
    h & 0x0000_FFFF
}
/// `PMCLOG_HEADER_TO_TYPE`.
pub const fn pmclog_header_to_type(h: u32) -> u32 {
    (h & 0x00FF_0000) >> 16
}
/// `PMCLOG_HEADER_TO_MAGIC`.
pub const fn pmclog_header_to_magic(h: u32) -> u32 {
    (h & 0xFF00_0000) >> 24
}
/// `PMCLOG_HEADER_CHECK_MAGIC`.
pub const fn pmclog_header_check_magic(h: u32) -> bool {
    pmclog_header_to_magic(h) == PMCLOG_HEADER_MAGIC
}
/// `PMC_CALLCHAIN_CPUFLAGS_TO_CPU`.
pub const fn pmc_callchain_cpuflags_to_cpu(cf: u32) -> u32 {
    (cf >> 16) & 0xFFFF
}
/// `PMC_CALLCHAIN_CPUFLAGS_TO_USERMODE`.
pub const fn pmc_callchain_cpuflags_to_usermode(cf: u32) -> u32 {
    cf & PMC_CC_F_USERSPACE
}
/// `PMC_CALLCHAIN_TO_CPUFLAGS`.
pub const fn pmc_callchain_to_cpuflags(cpu: u32, flags: u32) -> u32 {
    (cpu << 16) | (flags & 0xFFFF)
}

/// `struct timespec` of the writer: `time_t` and `long` are both
/// pointer-sized on FreeBSD's amd64, arm64 and i386.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timespec {
    /// Seconds.
    pub tv_sec: isize,
    /// Nanoseconds.
    pub tv_nsec: isize,
}

// Records with a body are packed in C; the three header-only ones are not,
// so they keep the 8-byte alignment of `pl_tsc`.
macro_rules! pmclog_struct {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        pmclog_struct!(@repr (C, packed) $(#[$m])* $name { $($(#[$fm])* $field: $ty),* });
    };
    (@unpacked $(#[$m:meta])* $name:ident {}) => {
        pmclog_struct!(@repr (C) $(#[$m])* $name {});
    };
    (@repr $repr:tt $(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr $repr]
        #[derive(Debug, Clone, Copy)]
        pub struct $name {
            /// Magic, type and length.
            pub pl_header: u32,
            /// Unused.
            pub pl_spare: u32,
            /// Timestamp.
            pub pl_tsc: u64,
            $($(#[$fm])* pub $field: $ty,)*
        }
    };
}

pmclog_struct!(@unpacked
    /// `struct pmclog_header`.
    PmclogHeader {}
);
pmclog_struct!(
    /// `struct pmclog_callchain` at its largest.
    PmclogCallchain {
        /// Process.
        pl_pid: u32,
        /// Thread.
        pl_tid: u32,
        /// PMC.
        pl_pmcid: u32,
        /// CPU in bits 31..16, `PMC_CC_F_*` in bits 15..0.
        pl_cpuflags: u32,
        /// Program counters, innermost first.
        pl_pc: [usize; PMC_CALLCHAIN_DEPTH_MAX],
    }
);
pmclog_struct!(@unpacked
    /// `struct pmclog_closelog`.
    PmclogCloselog {}
);
pmclog_struct!(@unpacked
    /// `struct pmclog_dropnotify`.
    PmclogDropnotify {}
);
pmclog_struct!(
    /// `struct pmclog_initialize`.
    PmclogInitialize {
        /// Driver version ([`crate::pmc::PMC_VERSION`]).
        pl_version: u32,
        /// `enum pmc_cputype`.
        pl_cpu: u32,
        /// TSC frequency in Hz (0 where unknown).
        pl_tsc_freq: u64,
        /// Wall-clock time when the log started.
        pl_ts: Timespec,
        /// `kern.hwpmc.cpuid`.
        pl_cpuid: [u8; PMC_CPUID_LEN],
    }
);
pmclog_struct!(
    /// `struct pmclog_map_in` at its largest.
    PmclogMapIn {
        /// Process.
        pl_pid: u32,
        /// Zero.
        pl_pad: u32,
        /// Start address of the mapping.
        pl_start: usize,
        /// Path of the mapped object.
        pl_pathname: [u8; PATH_MAX],
    }
);
pmclog_struct!(
    /// `struct pmclog_map_out`.
    PmclogMapOut {
        /// Process.
        pl_pid: u32,
        /// Zero.
        pl_pad: u32,
        /// Start address.
        pl_start: usize,
        /// End address.
        pl_end: usize,
    }
);
pmclog_struct!(
    /// `struct pmclog_pmcallocate`.
    PmclogPmcallocate {
        /// PMC.
        pl_pmcid: u32,
        /// Event code.
        pl_event: u32,
        /// `PMC_F_*`.
        pl_flags: u32,
        /// Zero.
        pl_pad: u32,
        /// Reload count.
        pl_rate: u64,
    }
);
pmclog_struct!(
    /// `struct pmclog_pmcattach` at its largest.
    PmclogPmcattach {
        /// PMC.
        pl_pmcid: u32,
        /// Target process.
        pl_pid: u32,
        /// Target's executable.
        pl_pathname: [u8; PATH_MAX],
    }
);
pmclog_struct!(
    /// `struct pmclog_pmcdetach`.
    PmclogPmcdetach {
        /// PMC.
        pl_pmcid: u32,
        /// Target process.
        pl_pid: u32,
    }
);
pmclog_struct!(
    /// `struct pmclog_proccsw`.
    PmclogProccsw {
        /// Counter delta over the time slice.
        pl_value: u64,
        /// PMC.
        pl_pmcid: u32,
        /// Process.
        pl_pid: u32,
        /// Thread.
        pl_tid: u32,
        /// Zero.
        pl_pad: u32,
    }
);
pmclog_struct!(
    /// `struct pmclog_proccreate`.
    PmclogProccreate {
        /// Process.
        pl_pid: u32,
        /// `p_flag`.
        pl_flags: u32,
        /// Command name.
        pl_pcomm: [u8; MAXCOMLEN + 1],
    }
);
pmclog_struct!(
    /// `struct pmclog_procexec` at its largest.
    PmclogProcexec {
        /// Process.
        pl_pid: u32,
        /// PMC.
        pl_pmcid: u32,
        /// Interpreter base (AT_BASE).
        pl_base: usize,
        /// Load base of a position-independent executable.
        pl_dyn: usize,
        /// Executable path.
        pl_pathname: [u8; PATH_MAX],
    }
);
pmclog_struct!(
    /// `struct pmclog_procexit`.
    PmclogProcexit {
        /// PMC.
        pl_pmcid: u32,
        /// Process.
        pl_pid: u32,
        /// Accumulated value.
        pl_value: u64,
    }
);
pmclog_struct!(
    /// `struct pmclog_procfork`.
    PmclogProcfork {
        /// Parent.
        pl_oldpid: u32,
        /// Child.
        pl_newpid: u32,
    }
);
pmclog_struct!(
    /// `struct pmclog_sysexit`.
    PmclogSysexit {
        /// Process.
        pl_pid: u32,
        /// Zero.
        pl_pad: u32,
    }
);
pmclog_struct!(
    /// `struct pmclog_threadcreate`.
    PmclogThreadcreate {
        /// Thread.
        pl_tid: u32,
        /// Process.
        pl_pid: u32,
        /// `p_flag` of the process.
        pl_flags: u32,
        /// Zero.
        pl_pad: u32,
        /// Thread name.
        pl_tdname: [u8; MAXCOMLEN + 1],
    }
);
pmclog_struct!(
    /// `struct pmclog_threadexit`.
    PmclogThreadexit {
        /// Thread.
        pl_tid: u32,
        /// Zero.
        pl_pad: u32,
    }
);
pmclog_struct!(
    /// `struct pmclog_userdata`.
    PmclogUserdata {
        /// Cookie.
        pl_userdata: u32,
        /// Zero.
        pl_pad: u32,
    }
);
pmclog_struct!(
    /// `struct pmclog_pmcallocatedyn`.
    PmclogPmcallocatedyn {
        /// PMC.
        pl_pmcid: u32,
        /// Event code.
        pl_event: u32,
        /// `PMC_F_*`.
        pl_flags: u32,
        /// Zero.
        pl_pad: u32,
        /// Event name.
        pl_evname: [u8; PMC_NAME_MAX],
    }
);

/// `union pmclog_entry`: every record, to size scratch areas.
#[repr(C)]
#[derive(Clone, Copy)]
pub union PmclogEntry {
    /// CALLCHAIN.
    pub pl_cc: PmclogCallchain,
    /// CLOSELOG.
    pub pl_cl: PmclogCloselog,
    /// DROPNOTIFY.
    pub pl_dn: PmclogDropnotify,
    /// INITIALIZE.
    pub pl_i: PmclogInitialize,
    /// MAP_IN.
    pub pl_mi: PmclogMapIn,
    /// MAP_OUT.
    pub pl_mo: PmclogMapOut,
    /// PMCALLOCATE.
    pub pl_a: PmclogPmcallocate,
    /// PMCALLOCATEDYN.
    pub pl_ad: PmclogPmcallocatedyn,
    /// PMCATTACH.
    pub pl_t: PmclogPmcattach,
    /// PMCDETACH.
    pub pl_d: PmclogPmcdetach,
    /// PROCCSW.
    pub pl_c: PmclogProccsw,
    /// PROC_CREATE.
    pub pl_pc: PmclogProccreate,
    /// PROCEXEC.
    pub pl_x: PmclogProcexec,
    /// PROCEXIT.
    pub pl_e: PmclogProcexit,
    /// PROCFORK.
    pub pl_f: PmclogProcfork,
    /// SYSEXIT.
    pub pl_se: PmclogSysexit,
    /// THR_CREATE.
    pub pl_tc: PmclogThreadcreate,
    /// THR_EXIT.
    pub pl_te: PmclogThreadexit,
    /// USERDATA.
    pub pl_u: PmclogUserdata,
}

impl core::fmt::Debug for PmclogEntry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Which member is meant depends on the header; show none.
        f.debug_struct("PmclogEntry").finish_non_exhaustive()
    }
}

impl_plain!(
    Timespec,
    PmclogEntry,
    PmclogHeader,
    PmclogCallchain,
    PmclogCloselog,
    PmclogDropnotify,
    PmclogInitialize,
    PmclogMapIn,
    PmclogMapOut,
    PmclogPmcallocate,
    PmclogPmcattach,
    PmclogPmcdetach,
    PmclogProccsw,
    PmclogProccreate,
    PmclogProcexec,
    PmclogProcexit,
    PmclogProcfork,
    PmclogSysexit,
    PmclogThreadcreate,
    PmclogThreadexit,
    PmclogUserdata,
    PmclogPmcallocatedyn,
);

/// Size of the common header.
pub const PMCLOG_HEADER_SIZE: usize = size_of::<PmclogHeader>();
const ADDR: usize = size_of::<usize>();
const MAP_IN_PATH: usize = offset_of!(PmclogMapIn, pl_pathname);
const PMCATTACH_PATH: usize = offset_of!(PmclogPmcattach, pl_pathname);
const PROCEXEC_PATH: usize = offset_of!(PmclogProcexec, pl_pathname);
const CALLCHAIN_PCS: usize = offset_of!(PmclogCallchain, pl_pc);
/// Longest record a reader must accept (a full call chain):
/// `sizeof(union pmclog_entry)`.
pub const PMCLOG_MAX_RECORD: usize = size_of::<PmclogEntry>();

/// The program counters of a CALLCHAIN record, innermost first.
#[derive(Clone, Copy)]
pub struct PcList<'a>(PcRepr<'a>);

#[derive(Clone, Copy)]
enum PcRepr<'a> {
    Words(&'a [usize]),
    /// Native-endian words as found in a log, possibly unaligned.
    Bytes(&'a [u8]),
}

impl<'a> PcList<'a> {
    /// Program counters held in memory.
    pub const fn from_words(pcs: &'a [usize]) -> Self {
        PcList(PcRepr::Words(pcs))
    }

    /// Number of program counters.
    #[inline]
    pub const fn len(&self) -> usize {
        match self.0 {
            PcRepr::Words(w) => w.len(),
            PcRepr::Bytes(b) => b.len() / ADDR,
        }
    }

    /// True when the chain is empty.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`th program counter.
    #[inline]
    pub fn get(&self, i: usize) -> Option<usize> {
        match self.0 {
            PcRepr::Words(w) => w.get(i).copied(),
            PcRepr::Bytes(b) => {
                let chunk = b.get(i * ADDR..(i + 1) * ADDR)?;
                let mut word = [0u8; ADDR];
                word.copy_from_slice(chunk);
                Some(usize::from_ne_bytes(word))
            }
        }
    }

    /// Copies the program counters to the start of `out`, as many as fit;
    /// returns how many were copied. Faster than [`PcList::iter`] for a
    /// chain still in a log's bytes.
    #[inline]
    pub fn copy_to(&self, out: &mut [usize]) -> usize {
        match self.0 {
            PcRepr::Words(w) => {
                let n = w.len().min(out.len());
                out[..n].copy_from_slice(&w[..n]);
                n
            }
            PcRepr::Bytes(b) => {
                let mut n = 0;
                for (slot, word) in out.iter_mut().zip(b.chunks_exact(ADDR)) {
                    let mut w = [0u8; ADDR];
                    w.copy_from_slice(word);
                    *slot = usize::from_ne_bytes(w);
                    n += 1;
                }
                n
            }
        }
    }

    /// The program counters in order.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.len()).filter_map(move |i| self.get(i))
    }
}

impl PartialEq for PcList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}
impl Eq for PcList<'_> {}

impl core::fmt::Debug for PcList<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The contents of a record, by type. Strings are the bytes before the
/// first NUL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // field names repeat the C fields without `pl_`
pub enum PmclogBody<'a> {
    Closelog,
    Dropnotify,
    Initialize {
        version: u32,
        cpu: u32,
        tsc_freq: u64,
        ts: Timespec,
        cpuid: &'a [u8],
    },
    Pmcallocate {
        pmcid: u32,
        event: u32,
        flags: u32,
        rate: u64,
    },
    Pmcattach {
        pmcid: u32,
        pid: u32,
        pathname: &'a [u8],
    },
    Pmcdetach {
        pmcid: u32,
        pid: u32,
    },
    Proccsw {
        value: u64,
        pmcid: u32,
        pid: u32,
        tid: u32,
    },
    Procexec {
        pid: u32,
        pmcid: u32,
        base: usize,
        dyn_base: usize,
        pathname: &'a [u8],
    },
    Procexit {
        pmcid: u32,
        pid: u32,
        value: u64,
    },
    Procfork {
        oldpid: u32,
        newpid: u32,
    },
    Sysexit {
        pid: u32,
    },
    Userdata {
        userdata: u32,
    },
    MapIn {
        pid: u32,
        start: usize,
        pathname: &'a [u8],
    },
    MapOut {
        pid: u32,
        start: usize,
        end: usize,
    },
    Callchain {
        pid: u32,
        tid: u32,
        pmcid: u32,
        cpuflags: u32,
        pcs: PcList<'a>,
    },
    Pmcallocatedyn {
        pmcid: u32,
        event: u32,
        flags: u32,
        evname: &'a [u8],
    },
    ThrCreate {
        tid: u32,
        pid: u32,
        flags: u32,
        tdname: &'a [u8],
    },
    ThrExit {
        tid: u32,
    },
    ProcCreate {
        pid: u32,
        flags: u32,
        pcomm: &'a [u8],
    },
}

/// One log record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmclogRecord<'a> {
    /// Timestamp of the header.
    pub tsc: u64,
    /// Contents.
    pub body: PmclogBody<'a>,
}

/// Why bytes are not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmclogDecodeError {
    /// The buffer ends before the record does; `needed` bytes in all
    /// would complete it (16 when not even the header is there).
    Truncated {
        /// Bytes the record needs from its start.
        needed: usize,
    },
    /// The header's magic byte is not 0xEE.
    BadMagic {
        /// The header word.
        header: u32,
    },
    /// A length of zero, not a multiple of 4, or wrong for the type.
    BadLength {
        /// Record type from the header.
        kind: u32,
        /// Length from the header.
        len: u32,
    },
    /// A path name with no terminating NUL inside the record.
    UnterminatedString {
        /// Record type from the header.
        kind: u32,
    },
    /// A type number no record has.
    UnknownType {
        /// Record type from the header.
        kind: u32,
    },
}

impl core::fmt::Display for PmclogDecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Truncated { needed } => write!(f, "record truncated: {needed} bytes needed"),
            Self::BadMagic { header } => write!(f, "bad record magic in header {header:#010x}"),
            Self::BadLength { kind, len } => write!(f, "bad length {len} for record type {kind}"),
            Self::UnterminatedString { kind } => {
                write!(f, "unterminated path in record type {kind}")
            }
            Self::UnknownType { kind } => write!(f, "unknown record type {kind}"),
        }
    }
}

/// Why a record cannot be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmclogEncodeError {
    /// The output buffer is shorter than the record.
    BufferTooSmall {
        /// Bytes the record takes.
        needed: usize,
    },
    /// A path longer than `PATH_MAX - 1` bytes.
    PathTooLong,
    /// A call chain deeper than `PMC_CALLCHAIN_DEPTH_MAX`.
    CallchainTooDeep,
}

const fn round4(n: usize) -> usize {
    (n + 3) & !3
}

/// Bytes before the first NUL.
#[inline]
fn c_str(bytes: &[u8]) -> &[u8] {
    crate::pmc::c_field_str(bytes)
}

impl PmclogRecord<'_> {
    /// The record's type.
    pub const fn kind(&self) -> PmclogType {
        use PmclogBody as B;
        match self.body {
            B::Closelog => PmclogType::Closelog,
            B::Dropnotify => PmclogType::Dropnotify,
            B::Initialize { .. } => PmclogType::Initialize,
            B::Pmcallocate { .. } => PmclogType::Pmcallocate,
            B::Pmcattach { .. } => PmclogType::Pmcattach,
            B::Pmcdetach { .. } => PmclogType::Pmcdetach,
            B::Proccsw { .. } => PmclogType::Proccsw,
            B::Procexec { .. } => PmclogType::Procexec,
            B::Procexit { .. } => PmclogType::Procexit,
            B::Procfork { .. } => PmclogType::Procfork,
            B::Sysexit { .. } => PmclogType::Sysexit,
            B::Userdata { .. } => PmclogType::Userdata,
            B::MapIn { .. } => PmclogType::MapIn,
            B::MapOut { .. } => PmclogType::MapOut,
            B::Callchain { .. } => PmclogType::Callchain,
            B::Pmcallocatedyn { .. } => PmclogType::Pmcallocatedyn,
            B::ThrCreate { .. } => PmclogType::ThrCreate,
            B::ThrExit { .. } => PmclogType::ThrExit,
            B::ProcCreate { .. } => PmclogType::ProcCreate,
        }
    }

    /// Bytes the record takes in the log, header included: the C struct
    /// size for fixed records, and the used prefix plus the NUL-terminated
    /// string (rounded up to 4) or the PCs for variable ones.
    pub fn encoded_len(&self) -> usize {
        use PmclogBody as B;
        match self.body {
            B::Closelog => size_of::<PmclogCloselog>(),
            B::Dropnotify => size_of::<PmclogDropnotify>(),
            B::Initialize { .. } => size_of::<PmclogInitialize>(),
            B::Pmcallocate { .. } => size_of::<PmclogPmcallocate>(),
            B::Pmcattach { pathname, .. } => round4(PMCATTACH_PATH + pathname.len() + 1),
            B::Pmcdetach { .. } => size_of::<PmclogPmcdetach>(),
            B::Proccsw { .. } => size_of::<PmclogProccsw>(),
            B::Procexec { pathname, .. } => round4(PROCEXEC_PATH + pathname.len() + 1),
            B::Procexit { .. } => size_of::<PmclogProcexit>(),
            B::Procfork { .. } => size_of::<PmclogProcfork>(),
            B::Sysexit { .. } => size_of::<PmclogSysexit>(),
            B::Userdata { .. } => size_of::<PmclogUserdata>(),
            B::MapIn { pathname, .. } => round4(MAP_IN_PATH + pathname.len() + 1),
            B::MapOut { .. } => size_of::<PmclogMapOut>(),
            B::Callchain { pcs, .. } => CALLCHAIN_PCS + pcs.len() * ADDR,
            B::Pmcallocatedyn { .. } => size_of::<PmclogPmcallocatedyn>(),
            B::ThrCreate { .. } => size_of::<PmclogThreadcreate>(),
            B::ThrExit { .. } => size_of::<PmclogThreadexit>(),
            B::ProcCreate { .. } => size_of::<PmclogProccreate>(),
        }
    }

    /// Writes the record at the start of `out` and returns its length.
    /// Padding and unused string bytes are zero.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, PmclogEncodeError> {
        use PmclogBody as B;
        let path_ok = |p: &[u8]| {
            if p.len() < PATH_MAX {
                Ok(())
            } else {
                Err(PmclogEncodeError::PathTooLong)
            }
        };
        match self.body {
            B::Pmcattach { pathname, .. }
            | B::Procexec { pathname, .. }
            | B::MapIn { pathname, .. } => path_ok(pathname)?,
            B::Callchain { pcs, .. } if pcs.len() > PMC_CALLCHAIN_DEPTH_MAX => {
                return Err(PmclogEncodeError::CallchainTooDeep);
            }
            _ => {}
        }
        let len = self.encoded_len();
        let out = out
            .get_mut(..len)
            .ok_or(PmclogEncodeError::BufferTooSmall { needed: len })?;
        out.fill(0);
        let mut w = Writer { out, pos: 0 };
        w.u32(pmclog_to_header(self.kind(), len as u32));
        w.u32(0);
        w.u64(self.tsc);
        match self.body {
            B::Closelog | B::Dropnotify => {}
            B::Initialize {
                version,
                cpu,
                tsc_freq,
                ts,
                cpuid,
            } => {
                w.u32(version);
                w.u32(cpu);
                w.u64(tsc_freq);
                w.addr(ts.tv_sec as usize);
                w.addr(ts.tv_nsec as usize);
                w.fixed_str(cpuid, PMC_CPUID_LEN);
            }
            B::Pmcallocate {
                pmcid,
                event,
                flags,
                rate,
            } => {
                w.u32(pmcid);
                w.u32(event);
                w.u32(flags);
                w.u32(0);
                w.u64(rate);
            }
            B::Pmcattach {
                pmcid,
                pid,
                pathname,
            } => {
                w.u32(pmcid);
                w.u32(pid);
                w.bytes(pathname);
            }
            B::Pmcdetach { pmcid, pid } => {
                w.u32(pmcid);
                w.u32(pid);
            }
            B::Proccsw {
                value,
                pmcid,
                pid,
                tid,
            } => {
                w.u64(value);
                w.u32(pmcid);
                w.u32(pid);
                w.u32(tid);
            }
            B::Procexec {
                pid,
                pmcid,
                base,
                dyn_base,
                pathname,
            } => {
                w.u32(pid);
                w.u32(pmcid);
                w.addr(base);
                w.addr(dyn_base);
                w.bytes(pathname);
            }
            B::Procexit { pmcid, pid, value } => {
                w.u32(pmcid);
                w.u32(pid);
                w.u64(value);
            }
            B::Procfork { oldpid, newpid } => {
                w.u32(oldpid);
                w.u32(newpid);
            }
            B::Sysexit { pid } => w.u32(pid),
            B::Userdata { userdata } => w.u32(userdata),
            B::MapIn {
                pid,
                start,
                pathname,
            } => {
                w.u32(pid);
                w.u32(0);
                w.addr(start);
                w.bytes(pathname);
            }
            B::MapOut { pid, start, end } => {
                w.u32(pid);
                w.u32(0);
                w.addr(start);
                w.addr(end);
            }
            B::Callchain {
                pid,
                tid,
                pmcid,
                cpuflags,
                pcs,
            } => {
                w.u32(pid);
                w.u32(tid);
                w.u32(pmcid);
                w.u32(cpuflags);
                for pc in pcs.iter() {
                    w.addr(pc);
                }
            }
            B::Pmcallocatedyn {
                pmcid,
                event,
                flags,
                evname,
            } => {
                w.u32(pmcid);
                w.u32(event);
                w.u32(flags);
                w.u32(0);
                w.fixed_str(evname, PMC_NAME_MAX);
            }
            B::ThrCreate {
                tid,
                pid,
                flags,
                tdname,
            } => {
                w.u32(tid);
                w.u32(pid);
                w.u32(flags);
                w.u32(0);
                w.fixed_str(tdname, MAXCOMLEN + 1);
            }
            B::ThrExit { tid } => w.u32(tid),
            B::ProcCreate { pid, flags, pcomm } => {
                w.u32(pid);
                w.u32(flags);
                w.fixed_str(pcomm, MAXCOMLEN + 1);
            }
        }
        Ok(len)
    }
}

struct Writer<'b> {
    out: &'b mut [u8],
    pos: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, b: &[u8]) {
        self.out[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_ne_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_ne_bytes());
    }
    fn addr(&mut self, v: usize) {
        self.bytes(&v.to_ne_bytes());
    }
    /// A C char array: truncated so a NUL always ends it (the buffer was
    /// zero-filled before).
    fn fixed_str(&mut self, s: &[u8], field: usize) {
        let n = s.len().min(field - 1);
        self.out[self.pos..self.pos + n].copy_from_slice(&s[..n]);
        self.pos += field;
    }
}

struct Reader<'a> {
    rec: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    #[inline(always)]
    fn take(&mut self, n: usize) -> &'a [u8] {
        let s = &self.rec[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    #[inline(always)]
    fn u32(&mut self) -> u32 {
        u32::from_ne_bytes(self.take(4).try_into().unwrap_or_default())
    }
    #[inline(always)]
    fn u64(&mut self) -> u64 {
        u64::from_ne_bytes(self.take(8).try_into().unwrap_or_default())
    }
    #[inline(always)]
    fn addr(&mut self) -> usize {
        usize::from_ne_bytes(self.take(ADDR).try_into().unwrap_or_default())
    }
    #[inline(always)]
    fn rest(&mut self) -> &'a [u8] {
        self.take(self.rec.len() - self.pos)
    }
    /// The NUL-terminated path that ends a variable-length record.
    #[inline]
    fn path(&mut self, kind: u32) -> Result<&'a [u8], PmclogDecodeError> {
        let rest = self.rest();
        match rest.iter().position(|&b| b == 0) {
            Some(end) => Ok(&rest[..end]),
            None => Err(PmclogDecodeError::UnterminatedString { kind }),
        }
    }
}

/// Reads the header word and length at the start of `buf` and checks them
/// against the record type's size rules; returns (header word, length).
#[inline(always)]
pub fn check_header(buf: &[u8]) -> Result<(u32, usize), PmclogDecodeError> {
    let Some(word) = buf.get(..4) else {
        return Err(PmclogDecodeError::Truncated {
            needed: PMCLOG_HEADER_SIZE,
        });
    };
    let header = u32::from_ne_bytes([word[0], word[1], word[2], word[3]]);
    if !pmclog_header_check_magic(header) {
        return Err(PmclogDecodeError::BadMagic { header });
    }
    let raw_kind = pmclog_header_to_type(header);
    let len = pmclog_header_to_length(header) as usize;
    let bad = PmclogDecodeError::BadLength {
        kind: raw_kind,
        len: len as u32,
    };
    if len == 0 || len % 4 != 0 || len < PMCLOG_HEADER_SIZE {
        return Err(bad);
    }
    let Some(kind) = PmclogType::from_raw(raw_kind) else {
        return Err(PmclogDecodeError::UnknownType { kind: raw_kind });
    };
    let fixed = |size: usize| if len == size { Ok(()) } else { Err(bad) };
    // A path record holds at least its NUL and at most PATH_MAX bytes.
    let path = |prefix: usize| {
        if len >= prefix + 4 && len <= round4(prefix + PATH_MAX) {
            Ok(())
        } else {
            Err(bad)
        }
    };
    match kind {
        PmclogType::Closelog => fixed(size_of::<PmclogCloselog>()),
        PmclogType::Dropnotify => fixed(size_of::<PmclogDropnotify>()),
        PmclogType::Initialize => fixed(size_of::<PmclogInitialize>()),
        PmclogType::Pmcallocate => fixed(size_of::<PmclogPmcallocate>()),
        PmclogType::Pmcattach => path(PMCATTACH_PATH),
        PmclogType::Pmcdetach => fixed(size_of::<PmclogPmcdetach>()),
        PmclogType::Proccsw => fixed(size_of::<PmclogProccsw>()),
        PmclogType::Procexec => path(PROCEXEC_PATH),
        PmclogType::Procexit => fixed(size_of::<PmclogProcexit>()),
        PmclogType::Procfork => fixed(size_of::<PmclogProcfork>()),
        PmclogType::Sysexit => fixed(size_of::<PmclogSysexit>()),
        PmclogType::Userdata => fixed(size_of::<PmclogUserdata>()),
        PmclogType::MapIn => path(MAP_IN_PATH),
        PmclogType::MapOut => fixed(size_of::<PmclogMapOut>()),
        PmclogType::Callchain => {
            if len >= CALLCHAIN_PCS && (len - CALLCHAIN_PCS) % ADDR == 0 && len <= PMCLOG_MAX_RECORD
            {
                Ok(())
            } else {
                Err(bad)
            }
        }
        PmclogType::Pmcallocatedyn => fixed(size_of::<PmclogPmcallocatedyn>()),
        PmclogType::ThrCreate => fixed(size_of::<PmclogThreadcreate>()),
        PmclogType::ThrExit => fixed(size_of::<PmclogThreadexit>()),
        PmclogType::ProcCreate => fixed(size_of::<PmclogProccreate>()),
    }?;
    Ok((header, len))
}

/// Decodes the record at the start of `buf`; returns it and its length.
/// Never reads past `buf`; a partial record gives
/// [`PmclogDecodeError::Truncated`] so a streaming reader can wait for more.
// Inlined into readers: returning the decoded record through memory
// costs a store-forwarding stall per record.
#[inline(always)]
pub fn decode(buf: &[u8]) -> Result<(PmclogRecord<'_>, usize), PmclogDecodeError> {
    let (header, len) = check_header(buf)?;
    let rec = buf
        .get(..len)
        .ok_or(PmclogDecodeError::Truncated { needed: len })?;
    let mut r = Reader { rec, pos: 4 };
    let _spare = r.u32();
    let tsc = r.u64();
    use PmclogBody as B;
    let body = match PmclogType::from_raw(pmclog_header_to_type(header)) {
        Some(PmclogType::Closelog) => B::Closelog,
        Some(PmclogType::Dropnotify) => B::Dropnotify,
        Some(PmclogType::Initialize) => B::Initialize {
            version: r.u32(),
            cpu: r.u32(),
            tsc_freq: r.u64(),
            ts: Timespec {
                tv_sec: r.addr() as isize,
                tv_nsec: r.addr() as isize,
            },
            cpuid: c_str(r.take(PMC_CPUID_LEN)),
        },
        Some(PmclogType::Pmcallocate) => {
            let (pmcid, event, flags, _pad) = (r.u32(), r.u32(), r.u32(), r.u32());
            B::Pmcallocate {
                pmcid,
                event,
                flags,
                rate: r.u64(),
            }
        }
        Some(PmclogType::Pmcattach) => B::Pmcattach {
            pmcid: r.u32(),
            pid: r.u32(),
            pathname: r.path(PmclogType::Pmcattach.raw())?,
        },
        Some(PmclogType::Pmcdetach) => B::Pmcdetach {
            pmcid: r.u32(),
            pid: r.u32(),
        },
        Some(PmclogType::Proccsw) => B::Proccsw {
            value: r.u64(),
            pmcid: r.u32(),
            pid: r.u32(),
            tid: r.u32(),
        },
        Some(PmclogType::Procexec) => B::Procexec {
            pid: r.u32(),
            pmcid: r.u32(),
            base: r.addr(),
            dyn_base: r.addr(),
            pathname: r.path(PmclogType::Procexec.raw())?,
        },
        Some(PmclogType::Procexit) => B::Procexit {
            pmcid: r.u32(),
            pid: r.u32(),
            value: r.u64(),
        },
        Some(PmclogType::Procfork) => B::Procfork {
            oldpid: r.u32(),
            newpid: r.u32(),
        },
        Some(PmclogType::Sysexit) => B::Sysexit { pid: r.u32() },
        Some(PmclogType::Userdata) => B::Userdata { userdata: r.u32() },
        Some(PmclogType::MapIn) => {
            let pid = r.u32();
            let _pad = r.u32();
            B::MapIn {
                pid,
                start: r.addr(),
                pathname: r.path(PmclogType::MapIn.raw())?,
            }
        }
        Some(PmclogType::MapOut) => {
            let pid = r.u32();
            let _pad = r.u32();
            B::MapOut {
                pid,
                start: r.addr(),
                end: r.addr(),
            }
        }
        Some(PmclogType::Callchain) => B::Callchain {
            pid: r.u32(),
            tid: r.u32(),
            pmcid: r.u32(),
            cpuflags: r.u32(),
            pcs: PcList(PcRepr::Bytes(r.rest())),
        },
        Some(PmclogType::Pmcallocatedyn) => {
            let (pmcid, event, flags, _pad) = (r.u32(), r.u32(), r.u32(), r.u32());
            B::Pmcallocatedyn {
                pmcid,
                event,
                flags,
                evname: c_str(r.take(PMC_NAME_MAX)),
            }
        }
        Some(PmclogType::ThrCreate) => {
            let (tid, pid, flags, _pad) = (r.u32(), r.u32(), r.u32(), r.u32());
            B::ThrCreate {
                tid,
                pid,
                flags,
                tdname: c_str(r.take(MAXCOMLEN + 1)),
            }
        }
        Some(PmclogType::ThrExit) => B::ThrExit { tid: r.u32() },
        Some(PmclogType::ProcCreate) => B::ProcCreate {
            pid: r.u32(),
            flags: r.u32(),
            pcomm: c_str(r.take(MAXCOMLEN + 1)),
        },
        // check_header accepted only known types.
        None => {
            return Err(PmclogDecodeError::UnknownType {
                kind: pmclog_header_to_type(header),
            });
        }
    };
    Ok((PmclogRecord { tsc, body }, len))
}

/// Iterates over the records of a complete log in memory; stops at the
/// first error, which it yields.
pub fn records(
    mut buf: &[u8],
) -> impl Iterator<Item = Result<PmclogRecord<'_>, PmclogDecodeError>> {
    let mut failed = false;
    core::iter::from_fn(move || {
        if failed || buf.is_empty() {
            return None;
        }
        match decode(buf) {
            Ok((rec, len)) => {
                buf = &buf[len..];
                Some(Ok(rec))
            }
            Err(e) => {
                failed = true;
                Some(Err(e))
            }
        }
    })
}
