//! pmclog(3): reading hwpmc(4) log files.
//!
//! A parser reads records either from a file descriptor (a regular file
//! through a mapping, window by window; anything else with read(2)) or
//! from buffers the caller feeds, accepts any fragmentation, and turns each record into
//! a `struct pmclog_ev` laid out as FreeBSD's `<pmclog.h>` lays it out.
//! Malformed input (bad magic, a zero, unaligned or oversized length, an
//! unknown type) puts the parser in the error state for good; it never
//! reads past what it was given. As in FreeBSD, `pl_ts.tv_sec` carries the
//! record's raw timestamp and `pl_offset` the stream offset just past the
//! record. Two deliberate differences: a PMCALLOCATE of an event this
//! library cannot name gets the name "" instead of failing the whole log,
//! and the EOF of a CLOSELOG record is final.
//!
//! The unsafe code: the C entry points, which turn the caller's pointers
//! into references once and then call the safe parser; the event union's
//! members filled in place; the system calls of descriptor input and the
//! mapped window.

use core::ffi::{c_char, c_int, c_void};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::sync::OnceLock;

use uapi::pmc::{PMC_CALLCHAIN_DEPTH_MAX, PMC_NAME_MAX};
use uapi::pmclog::{
    PMCLOG_HEADER_SIZE, PcList, PmclogBody, PmclogDecodeError, PmclogType, Timespec, check_header,
    decode,
};
use uapi::{MAXCOMLEN, PATH_MAX};

/// `enum pmclog_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum PmclogState {
    /// An event was returned.
    Ok = 0,
    /// The log ended (end of file, or its CLOSELOG record).
    Eof = 1,
    /// A memory-fed parser needs more data (`pmclog_feed`).
    RequireData = 2,
    /// The log is malformed.
    Error = 3,
}

/// `PMCLOG_FD_NONE`: a parser fed from memory.
pub const PMCLOG_FD_NONE: c_int = -1;

/// Bytes read from a descriptor that is not mapped, at a time (FreeBSD
/// reads 512 KiB; a buffer that stays in the cache is faster).
const PMCLOG_BUFFER_SIZE: usize = 64 * 1024;

macro_rules! ev_struct {
    ($(#[$m:meta])* $name:ident { $($f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy)]
        #[allow(missing_docs, missing_debug_implementations)] // a mirror of the C struct
        pub struct $name { $(pub $f: $t),* }
    };
}

ev_struct!(
    /// `struct pmclog_ev_callchain`.
    PmclogEvCallchain { pl_pid: u32, pl_tid: u32, pl_pmcid: u32, pl_cpuflags: u32, pl_cpuflags2: u32, pl_npc: u32, pl_pc: [usize; PMC_CALLCHAIN_DEPTH_MAX] }
);
ev_struct!(
    /// `struct pmclog_ev_initialize`.
    PmclogEvInitialize { pl_version: u32, pl_arch: u32, pl_tsc_freq: u64, pl_ts: Timespec, pl_cpuid: [c_char; PATH_MAX] }
);
ev_struct!(
    /// `struct pmclog_ev_map_in`.
    PmclogEvMapIn { pl_pid: i32, pl_start: usize, pl_pathname: [c_char; PATH_MAX] }
);
ev_struct!(
    /// `struct pmclog_ev_map_out`.
    PmclogEvMapOut { pl_pid: i32, pl_start: usize, pl_end: usize }
);
ev_struct!(
    /// `struct pmclog_ev_pmcallocate`.
    PmclogEvPmcallocate { pl_evname: *const c_char, pl_rate: u64, pl_event: u32, pl_flags: u32, pl_pmcid: u32 }
);
ev_struct!(
    /// `struct pmclog_ev_pmcallocatedyn`.
    PmclogEvPmcallocatedyn { pl_evname: [c_char; PMC_NAME_MAX], pl_event: u32, pl_flags: u32, pl_pmcid: u32 }
);
ev_struct!(
    /// `struct pmclog_ev_pmcattach`.
    PmclogEvPmcattach { pl_pmcid: u32, pl_pid: i32, pl_pathname: [c_char; PATH_MAX] }
);
ev_struct!(
    /// `struct pmclog_ev_pmcdetach`.
    PmclogEvPmcdetach { pl_pmcid: u32, pl_pid: i32 }
);
ev_struct!(
    /// `struct pmclog_ev_proccsw`.
    PmclogEvProccsw { pl_pid: i32, pl_tid: i32, pl_pmcid: u32, pl_value: u64 }
);
ev_struct!(
    /// `struct pmclog_ev_proccreate`.
    PmclogEvProccreate { pl_pid: i32, pl_flags: u32, pl_pcomm: [c_char; MAXCOMLEN + 1] }
);
ev_struct!(
    /// `struct pmclog_ev_procexec`.
    PmclogEvProcexec { pl_pid: i32, pl_pmcid: u32, pl_baseaddr: usize, pl_dynaddr: usize, pl_pathname: [c_char; PATH_MAX] }
);
ev_struct!(
    /// `struct pmclog_ev_procexit`.
    PmclogEvProcexit { pl_pid: u32, pl_pmcid: u32, pl_value: u64 }
);
ev_struct!(
    /// `struct pmclog_ev_procfork`.
    PmclogEvProcfork { pl_oldpid: i32, pl_newpid: i32 }
);
ev_struct!(
    /// `struct pmclog_ev_sysexit`.
    PmclogEvSysexit { pl_pid: i32 }
);
ev_struct!(
    /// `struct pmclog_ev_threadcreate`.
    PmclogEvThreadcreate { pl_tid: i32, pl_pid: i32, pl_flags: u32, pl_tdname: [c_char; MAXCOMLEN + 1] }
);
ev_struct!(
    /// `struct pmclog_ev_threadexit`.
    PmclogEvThreadexit { pl_tid: i32 }
);
ev_struct!(
    /// `struct pmclog_ev_userdata`.
    PmclogEvUserdata { pl_userdata: u32 }
);

/// The union of `struct pmclog_ev` (the empty CLOSELOG and DROPNOTIFY
/// members take no room).
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs, missing_debug_implementations)]
pub union PmclogEvUnion {
    pub pl_cc: PmclogEvCallchain,
    pub pl_i: PmclogEvInitialize,
    pub pl_mi: PmclogEvMapIn,
    pub pl_mo: PmclogEvMapOut,
    pub pl_a: PmclogEvPmcallocate,
    pub pl_ad: PmclogEvPmcallocatedyn,
    pub pl_t: PmclogEvPmcattach,
    pub pl_d: PmclogEvPmcdetach,
    pub pl_c: PmclogEvProccsw,
    pub pl_pc: PmclogEvProccreate,
    pub pl_x: PmclogEvProcexec,
    pub pl_e: PmclogEvProcexit,
    pub pl_f: PmclogEvProcfork,
    pub pl_se: PmclogEvSysexit,
    pub pl_tc: PmclogEvThreadcreate,
    pub pl_te: PmclogEvThreadexit,
    pub pl_u: PmclogEvUserdata,
}

/// `struct pmclog_ev`: one event and where it came from.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PmclogEv {
    /// [`PmclogState`] after the read.
    pub pl_state: u32,
    /// Stream offset just past the record.
    pub pl_offset: i64,
    /// Records read so far.
    pub pl_count: usize,
    /// The record's timestamp (in `tv_sec`; `tv_nsec` is 0).
    pub pl_ts: Timespec,
    /// `enum pmclog_type` of the record.
    pub pl_type: u32,
    /// The record's bytes, valid until the next read.
    pub pl_data: *mut c_void,
    /// Length of the record.
    pub pl_len: c_int,
    /// The record's contents by type.
    pub pl_u: PmclogEvUnion,
}

impl core::fmt::Debug for PmclogEv {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PmclogEv")
            .field("pl_state", &self.pl_state)
            .field("pl_offset", &self.pl_offset)
            .field("pl_count", &self.pl_count)
            .field("pl_type", &self.pl_type)
            .field("pl_len", &self.pl_len)
            .finish_non_exhaustive()
    }
}

impl PmclogEv {
    /// An event with every byte zero.
    pub fn zeroed() -> Box<PmclogEv> {
        // SAFETY: PmclogEv is integers, arrays of them and a raw pointer:
        // all-zero bytes are a valid value of each.
        Box::new(unsafe { core::mem::MaybeUninit::<PmclogEv>::zeroed().assume_init() })
    }

    /// The event name the reader gave a PMCALLOCATE event
    /// (pmc_name_of_event's, `pl_evname`); None for other events and for
    /// an event the library does not know.
    pub fn allocate_event_name(&self) -> Option<&core::ffi::CStr> {
        if PmclogType::from_raw(self.pl_type) != Some(PmclogType::Pmcallocate) {
            return None;
        }
        // SAFETY: pl_type says the reader filled pl_a, whose pl_evname is
        // null or one of the library's static NUL-terminated names.
        unsafe {
            let p = self.pl_u.pl_a.pl_evname;
            (!p.is_null()).then(|| core::ffi::CStr::from_ptr(p))
        }
    }

    /// The contents of the event as `uapi` describes a record (strings up
    /// to their NUL), for Rust users of the reader; None when `pl_type`
    /// is not a record type. PMCALLOCATE's event name is not part of it.
    pub fn body(&self) -> Option<PmclogBody<'_>> {
        fn text(chars: &[c_char]) -> &[u8] {
            let start = chars.as_ptr().cast::<u8>();
            // SAFETY: c_char and u8 have the same size and alignment and
            // every bit pattern is valid for both.
            let bytes = unsafe { core::slice::from_raw_parts(start, chars.len()) };
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            &bytes[..end]
        }
        use PmclogBody as B;
        let u = &self.pl_u;
        // SAFETY: each arm reads the union member that pl_type selects, as
        // the reader filled it (or as a caller that set pl_type did).
        Some(unsafe {
            match PmclogType::from_raw(self.pl_type)? {
                PmclogType::Closelog => B::Closelog,
                PmclogType::Dropnotify => B::Dropnotify,
                PmclogType::Initialize => {
                    let i = &u.pl_i;
                    B::Initialize {
                        version: i.pl_version,
                        cpu: i.pl_arch,
                        tsc_freq: i.pl_tsc_freq,
                        ts: i.pl_ts,
                        cpuid: text(&i.pl_cpuid),
                    }
                }
                PmclogType::Pmcallocate => {
                    let a = &u.pl_a;
                    B::Pmcallocate {
                        pmcid: a.pl_pmcid,
                        event: a.pl_event,
                        flags: a.pl_flags,
                        rate: a.pl_rate,
                    }
                }
                PmclogType::Pmcallocatedyn => {
                    let a = &u.pl_ad;
                    B::Pmcallocatedyn {
                        pmcid: a.pl_pmcid,
                        event: a.pl_event,
                        flags: a.pl_flags,
                        evname: text(&a.pl_evname),
                    }
                }
                PmclogType::Pmcattach => B::Pmcattach {
                    pmcid: u.pl_t.pl_pmcid,
                    pid: u.pl_t.pl_pid as u32,
                    pathname: text(&u.pl_t.pl_pathname),
                },
                PmclogType::Pmcdetach => B::Pmcdetach {
                    pmcid: u.pl_d.pl_pmcid,
                    pid: u.pl_d.pl_pid as u32,
                },
                PmclogType::Proccsw => {
                    let c = &u.pl_c;
                    B::Proccsw {
                        value: c.pl_value,
                        pmcid: c.pl_pmcid,
                        pid: c.pl_pid as u32,
                        tid: c.pl_tid as u32,
                    }
                }
                PmclogType::Procexec => {
                    let x = &u.pl_x;
                    B::Procexec {
                        pid: x.pl_pid as u32,
                        pmcid: x.pl_pmcid,
                        base: x.pl_baseaddr,
                        dyn_base: x.pl_dynaddr,
                        pathname: text(&x.pl_pathname),
                    }
                }
                PmclogType::Procexit => B::Procexit {
                    pmcid: u.pl_e.pl_pmcid,
                    pid: u.pl_e.pl_pid,
                    value: u.pl_e.pl_value,
                },
                PmclogType::Procfork => B::Procfork {
                    oldpid: u.pl_f.pl_oldpid as u32,
                    newpid: u.pl_f.pl_newpid as u32,
                },
                PmclogType::Sysexit => B::Sysexit {
                    pid: u.pl_se.pl_pid as u32,
                },
                PmclogType::Userdata => B::Userdata {
                    userdata: u.pl_u.pl_userdata,
                },
                PmclogType::MapIn => B::MapIn {
                    pid: u.pl_mi.pl_pid as u32,
                    start: u.pl_mi.pl_start,
                    pathname: text(&u.pl_mi.pl_pathname),
                },
                PmclogType::MapOut => B::MapOut {
                    pid: u.pl_mo.pl_pid as u32,
                    start: u.pl_mo.pl_start,
                    end: u.pl_mo.pl_end,
                },
                PmclogType::Callchain => {
                    let c = &u.pl_cc;
                    let n = (c.pl_npc as usize).min(PMC_CALLCHAIN_DEPTH_MAX);
                    B::Callchain {
                        pid: c.pl_pid,
                        tid: c.pl_tid,
                        pmcid: c.pl_pmcid,
                        cpuflags: c.pl_cpuflags,
                        pcs: PcList::from_words(&c.pl_pc[..n]),
                    }
                }
                PmclogType::ThrCreate => {
                    let t = &u.pl_tc;
                    B::ThrCreate {
                        tid: t.pl_tid as u32,
                        pid: t.pl_pid as u32,
                        flags: t.pl_flags,
                        tdname: text(&t.pl_tdname),
                    }
                }
                PmclogType::ThrExit => B::ThrExit {
                    tid: u.pl_te.pl_tid as u32,
                },
                PmclogType::ProcCreate => {
                    let p = &u.pl_pc;
                    B::ProcCreate {
                        pid: p.pl_pid as u32,
                        flags: p.pl_flags,
                        pcomm: text(&p.pl_pcomm),
                    }
                }
            }
        })
    }
}

/// The name of a static event in an allocation record: the one libpmc's
/// tables give it on the log's CPU type (`_pmc_name_of_event`), or, for a
/// code they do not name (an IAF or IAP code, say, which FreeBSD's reader
/// refuses as an "unknown event"), its `PMC_EV_` constant's name without
/// the class; empty for a code that is neither. C strings that live as
/// long as the program.
fn event_cname(code: u32, cputype: Option<u32>) -> *const c_char {
    // u32::MAX: FreeBSD's `ps_arch` of -1 before the INITIALIZE record.
    let table = crate::pmc_event_tables::static_event_name(code, cputype.unwrap_or(u32::MAX));
    if let Some(name) = table {
        return name.as_ptr();
    }
    static NAMES: OnceLock<BTreeMap<u32, CString>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        uapi::pmc_events::PMC_EVENT_CODES
            .iter()
            .filter_map(|(_, code)| {
                let (_, name) = uapi::pmc_events::event_name(*code)?;
                Some((*code, CString::new(name).ok()?))
            })
            .collect()
    });
    names.get(&code).map_or(c"".as_ptr(), |c| c.as_ptr())
}

/// Copies `src` into `dst` as a C string, truncated to fit, and zeroes
/// the rest of `dst`.
fn copy_cstr(dst: &mut [c_char], src: &[u8]) {
    let n = src.len().min(dst.len().saturating_sub(1));
    let start = dst.as_mut_ptr().cast::<u8>();
    // SAFETY: c_char and u8 have the same size and alignment and every
    // bit pattern is valid for both; the slice is `dst` itself.
    let dst = unsafe { core::slice::from_raw_parts_mut(start, dst.len()) };
    dst[..n].copy_from_slice(&src[..n]);
    dst[n..].fill(0);
}

/// Bytes given to a memory-fed parser and not yet consumed.
#[derive(Debug)]
enum Chunk {
    /// A copy made by [`Parser::feed`].
    Owned(Vec<u8>),
    /// The caller's own buffer, given to `pmclog_feed` and kept by
    /// pointer as FreeBSD keeps it ([`Parser::feed_borrowed`]).
    Borrowed { data: *const u8, len: usize },
}

impl Chunk {
    fn bytes(&self) -> &[u8] {
        match self {
            Chunk::Owned(v) => v,
            // SAFETY: feed_borrowed's caller promised that the bytes stay
            // readable until the parser next returns anything but Ok, and
            // the parser drops every borrowed chunk before it does so
            // (`next_fed`, `drop_borrowed`).
            Chunk::Borrowed { data, len } => unsafe { core::slice::from_raw_parts(*data, *len) },
        }
    }
}

#[derive(Debug)]
enum Source {
    /// Fed from memory: the chunks not yet consumed, and how far into
    /// the first one the parser is.
    Memory {
        chunks: std::collections::VecDeque<Chunk>,
        off: usize,
    },
    Fd {
        fd: c_int,
        input: FdInput,
    },
}

/// How a descriptor parser gets the bytes of its log.
#[derive(Debug)]
enum FdInput {
    /// Decided at the first read that finds bytes: a regular file is
    /// mapped, anything else is read.
    Undecided,
    /// read(2) into the parser's buffer: pipes, sockets, terminals, and
    /// files that cannot be mapped.
    Read,
    /// A regular file, mapped one window at a time. `at_end` is set when
    /// the window was found to hold the file's last bytes: the next read
    /// looks at the file's size again before it touches the window, as
    /// the file may have been truncated in between.
    Mapped { window: Window, at_end: bool },
}

/// Bytes of a regular file mapped into memory at a page-aligned offset.
/// Records are decoded where they lie in it, with no copy; it is
/// replaced by the next window when the records in it are used up, so
/// the memory a parser holds stays one window whatever the log's length.
#[derive(Debug)]
struct Window {
    base: *mut u8,
    len: usize,
    /// File offset of `base`.
    file_off: u64,
}

/// Bytes of a file mapped at a time (a whole number of pages on every
/// page size in use, and many times the longest record).
const MAP_WINDOW: usize = 1 << 20;

impl Window {
    /// Maps `len` bytes of `fd` from `file_off`, with the pages read in
    /// at once (fewer faults than touching them one by one), or gives
    /// the errno of the failure.
    fn map(fd: c_int, file_off: u64, len: usize) -> Result<Window, c_int> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        const PREFAULT: c_int = libc::MAP_POPULATE;
        #[cfg(target_os = "freebsd")]
        const PREFAULT: c_int = libc::MAP_PREFAULT_READ;
        #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
        const PREFAULT: c_int = 0;
        let off = libc::off_t::try_from(file_off).map_err(|_| libc::EOVERFLOW)?;
        // SAFETY: a new read-only shared mapping of the descriptor's file
        // at an address the kernel chooses; it overlaps no Rust object.
        let base = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | PREFAULT,
                fd,
                off,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(last_errno());
        }
        Ok(Window {
            base: base.cast(),
            len,
            file_off,
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the window maps `len` readable bytes until it is
        // dropped. They lie below the file's size as last seen; a file
        // truncated by another process afterwards is pmclog(3)'s caveat.
        unsafe { core::slice::from_raw_parts(self.base, self.len) }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: `base` and `len` are the window's own mapping, unmapped
        // once; no reference into it outlives the window (pl_data is
        // valid only until the next read).
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// How far ahead of the record being decoded the log's bytes are asked
/// for: the copy of a call chain then finds them in the cache while the
/// zeroing of the chain's tail runs.
const PREFETCH_AHEAD: usize = 2048;

/// Asks for the cache lines that are `PREFETCH_AHEAD` bytes past the
/// record of `len` bytes at the start of `bytes`, as many as it spans.
#[inline(always)]
fn prefetch_after(bytes: &[u8], len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let mut at = PREFETCH_AHEAD;
        let end = (PREFETCH_AHEAD + len).min(bytes.len());
        while at < end {
            // SAFETY: SSE is part of x86_64; a prefetch is a hint that
            // reads nothing into the program and cannot fault.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(bytes[at..].as_ptr().cast()) };
            at += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, len);
}

fn last_errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn page_size() -> u64 {
    // SAFETY: sysconf(3) has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as u64 } else { 4096 }
}

/// Where a parser is in its log.
#[derive(Debug, Default)]
struct Progress {
    /// Bytes of the records delivered so far.
    offset: i64,
    /// Records delivered so far.
    count: usize,
    /// A CLOSELOG record was read.
    ended: bool,
    /// The PMU table of the CPU the INITIALIZE record names: it names
    /// the events of PMCs allocated with `PMC_F_EV_PMU`.
    pmu: Option<crate::libpmc_pmu_util::PmuTable>,
    /// The CPU type of the INITIALIZE record (`ps_arch`), which chooses
    /// the table of an ARM event's name; none before it.
    cputype: Option<u32>,
}

/// A log parser (`struct pmclog_parse_state`).
#[derive(Debug)]
pub struct Parser {
    source: Source,
    /// A descriptor parser's read buffer, or a memory-fed parser's
    /// record that spans fed chunks (at most one record); records are
    /// decoded from `buf[pos..]`, and `pl_data` points into it or into
    /// the fed chunk the record lies in, until the next read.
    buf: Vec<u8>,
    pos: usize,
    progress: Progress,
    failed: bool,
}

impl Parser {
    /// A parser of the log at `fd`, or of fed buffers with
    /// [`PMCLOG_FD_NONE`].
    pub fn new(fd: c_int) -> Parser {
        let source = if fd == PMCLOG_FD_NONE {
            Source::Memory {
                chunks: Default::default(),
                off: 0,
            }
        } else {
            Source::Fd {
                fd,
                input: FdInput::Undecided,
            }
        };
        Parser {
            source,
            buf: Vec::new(),
            pos: 0,
            progress: Progress::default(),
            failed: false,
        }
    }

    /// True for a parser of fed buffers.
    pub fn is_memory_fed(&self) -> bool {
        matches!(self.source, Source::Memory { .. })
    }

    /// `pmclog_feed` for Rust callers: a copy of `data` is kept until it
    /// is consumed, so `data` may be reused at once. Nothing happens on a
    /// descriptor parser.
    pub fn feed(&mut self, data: &[u8]) {
        if !data.is_empty() {
            self.push(Chunk::Owned(data.to_vec()));
        }
    }

    /// `pmclog_feed` as FreeBSD's: the parser keeps a pointer to the
    /// bytes and copies at most the one record that continues past their
    /// end. Nothing happens on a descriptor parser.
    ///
    /// # Safety
    /// `data` must point to `len` readable bytes that stay readable and
    /// unchanged until the parser's next read returns a state other than
    /// [`PmclogState::Ok`], or until the parser is dropped if no read
    /// does (pmclog(3)'s rule).
    pub unsafe fn feed_borrowed(&mut self, data: *const u8, len: usize) {
        if len != 0 {
            self.push(Chunk::Borrowed { data, len });
        }
    }

    fn push(&mut self, chunk: Chunk) {
        // A parser that has ended or failed reads nothing more.
        if self.failed || self.progress.ended {
            return;
        }
        if let Source::Memory { chunks, .. } = &mut self.source {
            chunks.push_back(chunk);
        }
    }

    /// Forgets the fed chunks: the parser is about to return something
    /// other than Ok, after which the caller may free them.
    fn drop_borrowed(&mut self) {
        if let Source::Memory { chunks, off } = &mut self.source {
            chunks.clear();
            *off = 0;
        }
    }

    /// Gets more of the file: false at its end (for now), the errno of a
    /// failed read(2).
    fn fill(&mut self) -> Result<bool, c_int> {
        let Source::Fd { fd, input } = &mut self.source else {
            unreachable!("fill on a memory-fed parser");
        };
        let fd = *fd;
        if !matches!(input, FdInput::Read) {
            match Self::map_more(fd, input, &mut self.pos) {
                Ok(more) => return Ok(more),
                // Not mappable (after all): read(2) from here on, from
                // the first byte not yet consumed.
                Err(resume) => {
                    *input = FdInput::Read;
                    self.buf.clear();
                    self.pos = 0;
                    if let Some(at) = resume {
                        let at = libc::off_t::try_from(at).map_err(|_| libc::EOVERFLOW)?;
                        // SAFETY: lseek(2) on the parser's descriptor.
                        if unsafe { libc::lseek(fd, at, libc::SEEK_SET) } < 0 {
                            return Err(last_errno());
                        }
                    }
                }
            }
        }
        self.read_more(fd)
    }

    /// Maps the next window of a regular file, from the page that holds
    /// the first byte not yet consumed (`pos` in the current window, made
    /// an index into the new one). Ok(false) when the file has no bytes
    /// past the current window (end of file for now). Err when the
    /// descriptor is not a regular file, cannot be mapped, or was
    /// truncated under the window, with the file offset the parser has
    /// consumed up to if it mapped anything: the caller reads from there.
    fn map_more(fd: c_int, input: &mut FdInput, pos: &mut usize) -> Result<bool, Option<u64>> {
        // The first byte not yet consumed, and the first one not mapped.
        let mapped = match &*input {
            FdInput::Mapped { window, .. } => Some((
                window.file_off + *pos as u64,
                window.file_off + window.len as u64,
            )),
            _ => None,
        };
        let resume = mapped.map(|(next, _)| next);
        let mut st = core::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat(2) fills the stat buffer it is given.
        if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
            return Err(resume);
        }
        // SAFETY: fstat(2) succeeded, so it filled the buffer.
        let st = unsafe { st.assume_init() };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(resume);
        }
        let size = u64::try_from(st.st_size).map_err(|_| resume)?;
        let (next, mapped_end) = match mapped {
            // Truncated since the window was mapped: its pages past the
            // file's end must not be touched.
            Some((_, end)) if size < end => return Err(resume),
            Some(m) => m,
            None => {
                // SAFETY: lseek(2) on the parser's descriptor, which only
                // asks for its offset.
                let at = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
                let at = u64::try_from(at).map_err(|_| resume)?;
                (at, at)
            }
        };
        if size <= mapped_end {
            if let FdInput::Mapped { at_end, .. } = input {
                *at_end = true;
            }
            return Ok(false);
        }
        let first = matches!(input, FdInput::Undecided);
        // The old window goes first, so that at most one is mapped.
        *input = FdInput::Undecided;
        let start = next & !(page_size() - 1);
        let len = usize::try_from(size - start).map_or(MAP_WINDOW, |n| n.min(MAP_WINDOW));
        let window = Window::map(fd, start, len).map_err(|_| Some(next))?;
        if first {
            // SAFETY: advice about the parser's descriptor; no memory is
            // passed.
            unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
        }
        // The descriptor's offset moves past what the parser has, as
        // read(2) would move it.
        if let Ok(end) = libc::off_t::try_from(start + len as u64) {
            // SAFETY: lseek(2) on the parser's descriptor.
            unsafe { libc::lseek(fd, end, libc::SEEK_SET) };
        }
        *pos = (next - start) as usize;
        *input = FdInput::Mapped {
            window,
            at_end: false,
        };
        Ok(true)
    }

    /// Reads more of a descriptor that is not mapped: false at end of
    /// file, the errno of a failed read(2).
    fn read_more(&mut self, fd: c_int) -> Result<bool, c_int> {
        // Read straight into the buffer, after what is left of it; the
        // spare capacity is not zeroed first.
        self.buf.drain(..self.pos);
        self.pos = 0;
        self.buf.reserve(PMCLOG_BUFFER_SIZE);
        let spare = self.buf.spare_capacity_mut();
        let want = spare.len().min(PMCLOG_BUFFER_SIZE);
        // SAFETY: `spare` has at least `want` writable bytes; read(2)
        // writes at most that many and reads none.
        let n = unsafe { libc::read(fd, spare.as_mut_ptr().cast(), want) };
        if n < 0 {
            return Err(last_errno());
        }
        let kept = self.buf.len();
        // SAFETY: read(2) initialized the `n` (at most `want`) bytes past
        // the buffer's length.
        unsafe { self.buf.set_len(kept + n as usize) };
        Ok(n > 0)
    }

    /// `pmclog_read`: the next event, or why there is none.
    pub fn read(&mut self, ev: &mut PmclogEv) -> PmclogState {
        let state = self.next(ev, true);
        ev.pl_state = state as u32;
        state
    }

    /// The next event if the bytes already read hold it, RequireData if
    /// reading it would mean reading (and maybe waiting on) the file: so
    /// that a consumer can show what it has before it blocks.
    pub fn read_buffered(&mut self, ev: &mut PmclogEv) -> PmclogState {
        let state = self.next(ev, false);
        ev.pl_state = state as u32;
        state
    }

    fn next(&mut self, ev: &mut PmclogEv, may_read: bool) -> PmclogState {
        if self.failed {
            return PmclogState::Error;
        }
        if self.progress.ended {
            return PmclogState::Eof;
        }
        let state = match self.source {
            Source::Fd { .. } => self.next_read(ev, may_read),
            Source::Memory { .. } => self.next_fed(ev),
        };
        if state != PmclogState::Ok {
            self.drop_borrowed();
        }
        state
    }

    /// The next record of a descriptor parser: decoded where it lies in
    /// the mapped window or in the read buffer.
    fn next_read(&mut self, ev: &mut PmclogEv, may_read: bool) -> PmclogState {
        loop {
            let bytes = match &self.source {
                // The file may have been truncated since its end was
                // seen: look at its size before touching the window.
                Source::Fd {
                    input: FdInput::Mapped { at_end: true, .. },
                    ..
                } => &[][..],
                Source::Fd {
                    input: FdInput::Mapped { window, .. },
                    ..
                } => &window.bytes()[self.pos..],
                _ => &self.buf[self.pos..],
            };
            match decode(bytes) {
                Ok((rec, len)) => {
                    let state = Self::deliver(&mut self.progress, &rec.body, rec.tsc, len, ev);
                    // The window or buffer changes only at the next read.
                    ev.pl_data = bytes.as_ptr().cast_mut().cast();
                    prefetch_after(bytes, len);
                    self.pos += len;
                    return state;
                }
                Err(PmclogDecodeError::Truncated { .. }) if !may_read => {
                    return PmclogState::RequireData;
                }
                // End of file is not final: a log still being written
                // can grow, and the next read looks again.
                Err(PmclogDecodeError::Truncated { .. }) => match self.fill() {
                    Ok(true) => continue,
                    Ok(false) => return PmclogState::Eof,
                    Err(libc::EAGAIN | libc::EINTR) => return PmclogState::RequireData,
                    Err(_) => {
                        self.failed = true;
                        return PmclogState::Error;
                    }
                },
                Err(_) => {
                    self.failed = true;
                    return PmclogState::Error;
                }
            }
        }
    }

    /// The next record of a memory-fed parser: decoded where it lies in
    /// the fed chunk, or, for a record that spans chunks, from `buf`,
    /// into which exactly its bytes are copied.
    fn next_fed(&mut self, ev: &mut PmclogEv) -> PmclogState {
        let Source::Memory { chunks, off } = &mut self.source else {
            unreachable!("next_fed on a descriptor parser");
        };
        loop {
            if self.pos < self.buf.len() {
                // A record begun in an earlier chunk.
                let have = &self.buf[self.pos..];
                let need = match check_header(have) {
                    Ok((_, len)) if len <= have.len() => 0,
                    Ok((_, len)) => len - have.len(),
                    Err(PmclogDecodeError::Truncated { .. }) => PMCLOG_HEADER_SIZE - have.len(),
                    Err(_) => {
                        self.failed = true;
                        return PmclogState::Error;
                    }
                };
                if need == 0 {
                    return match decode(have) {
                        Ok((rec, len)) => {
                            let state =
                                Self::deliver(&mut self.progress, &rec.body, rec.tsc, len, ev);
                            ev.pl_data = self.buf[self.pos..].as_mut_ptr().cast();
                            self.pos += len;
                            state
                        }
                        Err(_) => {
                            self.failed = true;
                            PmclogState::Error
                        }
                    };
                }
                let Some(front) = chunks.front() else {
                    return PmclogState::RequireData;
                };
                let bytes = &front.bytes()[*off..];
                let n = need.min(bytes.len());
                self.buf.drain(..self.pos);
                self.pos = 0;
                self.buf.extend_from_slice(&bytes[..n]);
                *off += n;
                if *off == front.bytes().len() {
                    chunks.pop_front();
                    *off = 0;
                }
                continue;
            }
            self.buf.clear();
            self.pos = 0;
            let Some(front) = chunks.front() else {
                return PmclogState::RequireData;
            };
            let bytes = &front.bytes()[*off..];
            if bytes.is_empty() {
                chunks.pop_front();
                *off = 0;
                continue;
            }
            match decode(bytes) {
                Ok((rec, len)) => {
                    let state = Self::deliver(&mut self.progress, &rec.body, rec.tsc, len, ev);
                    // pmclog(3): pl_data may point into the fed buffer,
                    // which stays valid at least until the next read.
                    ev.pl_data = bytes.as_ptr().cast_mut().cast();
                    prefetch_after(bytes, len);
                    *off += len;
                    return state;
                }
                Err(PmclogDecodeError::Truncated { .. }) => {
                    // The rest of this chunk begins a record that later
                    // chunks complete: keep a copy of it (less than one
                    // record), for the chunk may be gone by then.
                    self.buf.extend_from_slice(bytes);
                    chunks.pop_front();
                    *off = 0;
                }
                Err(_) => {
                    self.failed = true;
                    return PmclogState::Error;
                }
            }
        }
    }

    #[inline(always)]
    fn deliver(
        progress: &mut Progress,
        body: &PmclogBody<'_>,
        tsc: u64,
        len: usize,
        ev: &mut PmclogEv,
    ) -> PmclogState {
        // As FreeBSD's reader does: the raw timestamp in tv_sec, and the
        // offset just past the record.
        ev.pl_ts = Timespec {
            tv_sec: tsc as isize,
            tv_nsec: 0,
        };
        ev.pl_len = len as c_int;
        let u = &mut ev.pl_u;
        use PmclogBody as B;
        let ty = match *body {
            B::Closelog => {
                ev.pl_type = PmclogType::Closelog.raw();
                progress.ended = true;
                return PmclogState::Eof;
            }
            B::Dropnotify => PmclogType::Dropnotify,
            // Judging the version is the consumer's business (pmcstat
            // warns about another major version).
            B::Initialize {
                version,
                cpu,
                tsc_freq,
                ts,
                cpuid,
            } => {
                // Filled in place, as the members below with a string:
                // building the 1 KiB member aside and copying it costs
                // more than the rest of the record.
                // SAFETY: every field of the member is written here;
                // integers and C characters have no invalid values.
                let i = unsafe { &mut u.pl_i };
                i.pl_version = version;
                i.pl_arch = cpu;
                progress.cputype = Some(cpu);
                i.pl_tsc_freq = tsc_freq;
                i.pl_ts = ts;
                copy_cstr(&mut i.pl_cpuid, cpuid);
                let key = cpuid.split(|&b| b == 0).next().unwrap_or(&[]);
                progress.pmu = core::str::from_utf8(key)
                    .ok()
                    .and_then(crate::libpmc_pmu_util::PmuTable::for_cpuid);
                PmclogType::Initialize
            }
            B::MapIn {
                pid,
                start,
                pathname,
            } => {
                // SAFETY: as for INITIALIZE.
                let m = unsafe { &mut u.pl_mi };
                m.pl_pid = pid as i32;
                m.pl_start = start;
                copy_cstr(&mut m.pl_pathname, pathname);
                PmclogType::MapIn
            }
            B::MapOut { pid, start, end } => {
                u.pl_mo = PmclogEvMapOut {
                    pl_pid: pid as i32,
                    pl_start: start,
                    pl_end: end,
                };
                PmclogType::MapOut
            }
            B::Pmcallocate {
                pmcid,
                event,
                flags,
                rate,
            } => {
                // A PMU event's code is its index in the CPU's table, and
                // is never taken for a static event's.
                let evname = if flags & uapi::pmc::PmcFlags::EV_PMU.bits() != 0 {
                    progress
                        .pmu
                        .and_then(|t| t.event(event as usize))
                        .map_or(c"".as_ptr(), |e| e.name.as_ptr())
                } else {
                    event_cname(event, progress.cputype)
                };
                u.pl_a = PmclogEvPmcallocate {
                    pl_evname: evname,
                    pl_rate: rate,
                    pl_event: event,
                    pl_flags: flags,
                    pl_pmcid: pmcid,
                };
                PmclogType::Pmcallocate
            }
            B::Pmcallocatedyn {
                pmcid,
                event,
                flags,
                evname,
            } => {
                // SAFETY: as for INITIALIZE.
                let a = unsafe { &mut u.pl_ad };
                a.pl_event = event;
                a.pl_flags = flags;
                a.pl_pmcid = pmcid;
                copy_cstr(&mut a.pl_evname, evname);
                PmclogType::Pmcallocatedyn
            }
            B::Pmcattach {
                pmcid,
                pid,
                pathname,
            } => {
                // SAFETY: as for INITIALIZE.
                let t = unsafe { &mut u.pl_t };
                t.pl_pmcid = pmcid;
                t.pl_pid = pid as i32;
                copy_cstr(&mut t.pl_pathname, pathname);
                PmclogType::Pmcattach
            }
            B::Pmcdetach { pmcid, pid } => {
                u.pl_d = PmclogEvPmcdetach {
                    pl_pmcid: pmcid,
                    pl_pid: pid as i32,
                };
                PmclogType::Pmcdetach
            }
            B::Proccsw {
                value,
                pmcid,
                pid,
                tid,
            } => {
                u.pl_c = PmclogEvProccsw {
                    pl_pid: pid as i32,
                    pl_tid: tid as i32,
                    pl_pmcid: pmcid,
                    pl_value: value,
                };
                PmclogType::Proccsw
            }
            B::Procexec {
                pid,
                pmcid,
                base,
                dyn_base,
                pathname,
            } => {
                // SAFETY: as for INITIALIZE.
                let x = unsafe { &mut u.pl_x };
                x.pl_pid = pid as i32;
                x.pl_pmcid = pmcid;
                x.pl_baseaddr = base;
                x.pl_dynaddr = dyn_base;
                copy_cstr(&mut x.pl_pathname, pathname);
                PmclogType::Procexec
            }
            B::Procexit { pmcid, pid, value } => {
                u.pl_e = PmclogEvProcexit {
                    pl_pid: pid,
                    pl_pmcid: pmcid,
                    pl_value: value,
                };
                PmclogType::Procexit
            }
            B::Procfork { oldpid, newpid } => {
                u.pl_f = PmclogEvProcfork {
                    pl_oldpid: oldpid as i32,
                    pl_newpid: newpid as i32,
                };
                PmclogType::Procfork
            }
            B::Sysexit { pid } => {
                u.pl_se = PmclogEvSysexit { pl_pid: pid as i32 };
                PmclogType::Sysexit
            }
            B::Userdata { userdata } => {
                u.pl_u = PmclogEvUserdata {
                    pl_userdata: userdata,
                };
                PmclogType::Userdata
            }
            B::Callchain {
                pid,
                tid,
                pmcid,
                cpuflags,
                pcs,
            } => {
                // Filled in place: the member is 4 KiB, most of it the
                // zeroed tail past the chain (FreeBSD zeroes it too).
                // SAFETY: every field of the member is written here before
                // the event is returned; integers have no invalid values.
                let c = unsafe { &mut u.pl_cc };
                c.pl_pid = pid;
                c.pl_tid = tid;
                c.pl_pmcid = pmcid;
                c.pl_cpuflags = cpuflags;
                c.pl_cpuflags2 = 0;
                let n = pcs.copy_to(&mut c.pl_pc);
                c.pl_pc[n..].fill(0);
                c.pl_npc = n as u32;
                PmclogType::Callchain
            }
            B::ThrCreate {
                tid,
                pid,
                flags,
                tdname,
            } => {
                // SAFETY: as for INITIALIZE.
                let t = unsafe { &mut u.pl_tc };
                t.pl_tid = tid as i32;
                t.pl_pid = pid as i32;
                t.pl_flags = flags;
                copy_cstr(&mut t.pl_tdname, tdname);
                PmclogType::ThrCreate
            }
            B::ThrExit { tid } => {
                u.pl_te = PmclogEvThreadexit { pl_tid: tid as i32 };
                PmclogType::ThrExit
            }
            B::ProcCreate { pid, flags, pcomm } => {
                // SAFETY: as for INITIALIZE.
                let p = unsafe { &mut u.pl_pc };
                p.pl_pid = pid as i32;
                p.pl_flags = flags;
                copy_cstr(&mut p.pl_pcomm, pcomm);
                PmclogType::ProcCreate
            }
        };
        ev.pl_type = ty.raw();
        progress.offset += len as i64;
        progress.count += 1;
        ev.pl_offset = progress.offset;
        ev.pl_count = progress.count;
        PmclogState::Ok
    }
}

/// `pmclog_open`: a parser of the log on `fd`, or of buffers given to
/// `pmclog_feed` when `fd` is `PMCLOG_FD_NONE`.
// SAFETY: the C name is pmclog(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmclog_open(fd: c_int) -> *mut c_void {
    Box::into_raw(Box::new(Parser::new(fd))).cast()
}

/// `pmclog_feed`: gives a memory-fed parser `len` more bytes at `data`.
/// Returns 0, or -1 for a bad argument.
///
/// As FreeBSD's, the parser keeps a pointer to the bytes rather than a
/// copy of them (it copies only a record that continues past their end).
///
/// # Safety
/// `cookie` must come from `pmclog_open` and not be closed; `data` must
/// point to `len` readable bytes that stay valid and unchanged until
/// `pmclog_read` next returns -1 (or `pmclog_close`), as pmclog(3) says.
// SAFETY: the C name is pmclog(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmclog_feed(cookie: *mut c_void, data: *mut c_char, len: c_int) -> c_int {
    if cookie.is_null() || data.is_null() || len < 0 {
        return -1;
    }
    // SAFETY: the caller passes a live parser from pmclog_open and `len`
    // readable bytes at `data` (the function's contract).
    let (parser, bytes) = unsafe {
        (
            &mut *cookie.cast::<Parser>(),
            core::slice::from_raw_parts(data.cast::<u8>(), len as usize),
        )
    };
    if !parser.is_memory_fed() {
        return -1;
    }
    // SAFETY: pmclog(3) has the caller keep `data` valid until
    // pmclog_read next returns -1 (feed_borrowed's contract).
    unsafe { parser.feed_borrowed(bytes.as_ptr(), bytes.len()) };
    0
}

/// `pmclog_read`: fills `ev` with the next event and returns 0, or
/// returns -1 with `ev->pl_state` saying why (EOF, REQUIRE_DATA, ERROR).
///
/// # Safety
/// `cookie` must come from `pmclog_open` and not be closed; `ev` must
/// point to a writable `struct pmclog_ev`.
// SAFETY: the C name is pmclog(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmclog_read(cookie: *mut c_void, ev: *mut PmclogEv) -> c_int {
    if cookie.is_null() || ev.is_null() {
        return -1;
    }
    // SAFETY: the caller passes a live parser and a writable event (the
    // function's contract); they do not overlap.
    let (parser, ev) = unsafe { (&mut *cookie.cast::<Parser>(), &mut *ev) };
    if parser.read(ev) == PmclogState::Ok {
        0
    } else {
        -1
    }
}

/// `pmclog_close`: frees a parser (the descriptor stays open).
///
/// # Safety
/// `cookie` must come from `pmclog_open` and not be used afterwards.
// SAFETY: the C name is pmclog(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmclog_close(cookie: *mut c_void) {
    if !cookie.is_null() {
        // SAFETY: the pointer came from Box::into_raw in pmclog_open and is
        // given back exactly once (the function's contract).
        drop(unsafe { Box::from_raw(cookie.cast::<Parser>()) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn lp64_layout_of_struct_pmclog_ev() {
        if size_of::<usize>() != 8 {
            return;
        }
        assert_eq!(offset_of!(PmclogEv, pl_offset), 8);
        assert_eq!(offset_of!(PmclogEv, pl_count), 16);
        assert_eq!(offset_of!(PmclogEv, pl_ts), 24);
        assert_eq!(offset_of!(PmclogEv, pl_type), 40);
        assert_eq!(offset_of!(PmclogEv, pl_data), 48);
        assert_eq!(offset_of!(PmclogEv, pl_len), 56);
        assert_eq!(offset_of!(PmclogEv, pl_u), 64);
        assert_eq!(size_of::<PmclogEvCallchain>(), 24 + 512 * 8);
        assert_eq!(size_of::<PmclogEv>(), 64 + 24 + 512 * 8);
        assert_eq!(offset_of!(PmclogEvPmcallocate, pl_rate), 8);
        assert_eq!(offset_of!(PmclogEvMapIn, pl_start), 8);
        assert_eq!(offset_of!(PmclogEvProcexec, pl_pathname), 24);
    }
}
