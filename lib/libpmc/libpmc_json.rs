//! The JSON form of a pmclog(3) event, which `event_to_json()`
//! (`pmcformat.h`, the C++ side in `libpmc_json.cc`) returns, as FreeBSD's
//! libpmc writes it, byte for byte: one object, every value a string,
//! addresses and masks in hexadecimal, and a newline.
//!
//! FreeBSD's form has oddities that its consumers see, kept here:
//! - CLOSELOG and DROPNOTIFY close their object before the timestamp, which
//!   follows on a line of its own: `{"type": "closelog"}` newline
//!   `, "tsc": "7"}` newline;
//! - PROCCSW has no comma between `"pid"` and `"tid"`;
//! - `"tsc"` is the record's timestamp (`pl_ts.tv_sec`), and identifiers
//!   printed as `%d` are signed;
//! - text is not escaped, and each record's text is cut where FreeBSD's
//!   buffer for that record ends (127, 255, 1023 or 2047 bytes), as
//!   snprintf(3) cuts it.
//!
//! MAPPINGCHANGE and unknown types have no form (FreeBSD's program exits).
//! A call chain with no program counters, where FreeBSD's loop runs past
//! the array, gives an empty list.

use core::ffi::c_char;
use std::fmt::Write;

use uapi::pmc::PMC_CALLCHAIN_DEPTH_MAX;
use uapi::pmclog::PmclogType;

use crate::pmclog::PmclogEv;

/// The `"type"` member each record's object starts with (CLOSELOG's and
/// DROPNOTIFY's already closed, see the module's notes).
fn type_member(t: PmclogType) -> &'static str {
    use PmclogType as T;
    match t {
        T::Closelog => "{\"type\": \"closelog\"}\n",
        T::Dropnotify => "{\"type\": \"dropnotify\"}\n",
        T::Initialize => "{\"type\": \"initialize\"",
        T::Pmcallocate => "{\"type\": \"pmcallocate\"",
        T::Pmcattach => "{\"type\": \"pmcattach\"",
        T::Pmcdetach => "{\"type\": \"pmcdetach\"",
        T::Proccsw => "{\"type\": \"proccsw\"",
        T::Procexec => "{\"type\": \"procexec\"",
        T::Procexit => "{\"type\": \"procexit\"",
        T::Procfork => "{\"type\": \"procfork\"",
        T::Sysexit => "{\"type\": \"sysexit\"",
        T::Userdata => "{\"type\": \"userdata\"",
        T::MapIn => "{\"type\": \"map_in\"",
        T::MapOut => "{\"type\": \"map_out\"",
        T::Callchain => "{\"type\": \"callchain\"",
        T::Pmcallocatedyn => "{\"type\": \"pmcallocatedyn\"",
        T::ThrCreate => "{\"type\": \"thr_create\"",
        T::ThrExit => "{\"type\": \"thr_exit\"",
        T::ProcCreate => "{\"type\": \"proc_create\"",
    }
}

/// Text written into a buffer of `size` bytes by snprintf(3): what fits
/// before the NUL.
struct Bounded {
    text: Vec<u8>,
    size: usize,
}

impl Bounded {
    fn new(size: usize) -> Self {
        Bounded {
            text: Vec::new(),
            size,
        }
    }

    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        let room = (self.size - 1).saturating_sub(self.text.len());
        self.text.extend_from_slice(&b[..b.len().min(room)]);
        self
    }

    fn str(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }

    fn hex32(&mut self, name: &str, v: u32) -> &mut Self {
        self.str(&format!(", \"{name}\": \"0x{v:08x}\""))
    }

    fn hex64(&mut self, name: &str, v: u64) -> &mut Self {
        self.str(&format!(", \"{name}\": \"0x{v:016x}\""))
    }

    fn int(&mut self, name: &str, v: i64) -> &mut Self {
        self.str(&format!(", \"{name}\": \"{v}\""))
    }

    fn text(&mut self, name: &str, v: &[u8]) -> &mut Self {
        self.str(&format!(", \"{name}\": \"")).bytes(v).str("\"")
    }

    fn end(&mut self) -> Vec<u8> {
        self.str("}\n");
        std::mem::take(&mut self.text)
    }
}

/// The JSON form of an event, or None for a type that has none.
pub fn event_to_json(ev: &PmclogEv) -> Option<Vec<u8>> {
    use uapi::pmclog::PmclogBody as B;
    let kind = PmclogType::from_raw(ev.pl_type)?;
    let body = ev.body()?;
    // The object's start, in a buffer of its own of 128 bytes.
    let mut start = Bounded::new(128);
    start
        .str(type_member(kind))
        .int("tsc", ev.pl_ts.tv_sec as i64);
    let start = std::mem::take(&mut start.text);
    // The %d of a 32-bit field.
    let d = |v: u32| i64::from(v as i32);
    let json = match body {
        B::Closelog | B::Dropnotify => {
            let mut o = Bounded::new(usize::MAX);
            o.bytes(&start).end()
        }
        B::Initialize {
            version,
            cpu,
            tsc_freq,
            ts,
            cpuid,
        } => Bounded::new(256)
            .bytes(&start)
            .hex32("version", version)
            .hex32("arch", cpu)
            .text("cpuid", cpuid)
            .int("tsc_freq", tsc_freq as i64)
            .int("sec", ts.tv_sec as i64)
            .int("nsec", ts.tv_nsec as i64)
            .end(),
        B::Pmcallocate {
            pmcid,
            event,
            flags,
            rate,
        } => Bounded::new(256)
            .bytes(&start)
            .hex32("pmcid", pmcid)
            .hex32("event", event)
            .hex32("flags", flags)
            .int("rate", rate as i64)
            .end(),
        B::Pmcattach {
            pmcid,
            pid,
            pathname,
        } => Bounded::new(2048)
            .bytes(&start)
            .hex32("pmcid", pmcid)
            .int("pid", d(pid))
            .text("pathname", pathname)
            .end(),
        B::Pmcdetach { pmcid, pid } => Bounded::new(128)
            .bytes(&start)
            .hex32("pmcid", pmcid)
            .int("pid", d(pid))
            .end(),
        B::Proccsw {
            value,
            pmcid,
            pid,
            tid,
        } => Bounded::new(128)
            .bytes(&start)
            .hex32("pmcid", pmcid)
            .int("pid", d(pid))
            .str(&format!(" \"tid\": \"{}\"", d(tid)))
            .hex64("value", value)
            .end(),
        B::Procexec {
            pid,
            pmcid,
            base,
            dyn_base,
            pathname,
        } => Bounded::new(2048)
            .bytes(&start)
            .hex32("pmcid", pmcid)
            .int("pid", d(pid))
            .hex64("base", base as u64)
            .hex64("dyn", dyn_base as u64)
            .text("pathname", pathname)
            .end(),
        B::Procexit { pmcid, pid, value } => Bounded::new(128)
            .bytes(&start)
            .hex32("pmcid", pmcid)
            .int("pid", d(pid))
            .hex64("value", value)
            .end(),
        B::Procfork { oldpid, newpid } => Bounded::new(128)
            .bytes(&start)
            .int("oldpid", d(oldpid))
            .int("newpid", d(newpid))
            .end(),
        B::Sysexit { pid } => Bounded::new(128).bytes(&start).int("pid", d(pid)).end(),
        B::Userdata { userdata } => Bounded::new(128)
            .bytes(&start)
            .hex32("userdata", userdata)
            .end(),
        B::MapIn {
            pid,
            start: addr,
            pathname,
        } => Bounded::new(2048)
            .bytes(&start)
            .int("pid", d(pid))
            .hex64("start", addr as u64)
            .text("pathname", pathname)
            .end(),
        B::MapOut {
            pid,
            start: addr,
            end,
        } => Bounded::new(256)
            .bytes(&start)
            .int("pid", d(pid))
            .hex64("start", addr as u64)
            .hex64("end", end as u64)
            .end(),
        B::Callchain {
            pid,
            tid,
            pmcid,
            cpuflags,
            ..
        } => {
            // SAFETY: pl_type is CALLCHAIN, so pl_cc is the member the
            // reader (or the caller who set pl_type) filled.
            let cc = unsafe { &ev.pl_u.pl_cc };
            let npc = (cc.pl_npc as usize).min(PMC_CALLCHAIN_DEPTH_MAX);
            let mut head = Bounded::new(1024);
            head.bytes(&start)
                .hex32("pmcid", pmcid)
                .int("pid", d(pid))
                .int("tid", d(tid))
                .hex32("cpuflags", cpuflags)
                .hex32("cpuflags2", cc.pl_cpuflags2)
                .str(", \"pc\": [ ");
            let mut json = std::mem::take(&mut head.text);
            let mut list = String::new();
            for (i, pc) in cc.pl_pc[..npc].iter().enumerate() {
                let sep = if i + 1 < npc { ", " } else { "" };
                let _ = write!(list, "\"0x{:016x}\"{sep}", *pc as u64);
            }
            json.extend_from_slice(list.as_bytes());
            json.extend_from_slice(b"]}\n");
            json
        }
        B::Pmcallocatedyn {
            pmcid,
            event,
            flags,
            evname,
        } => Bounded::new(2048)
            .bytes(&start)
            .hex32("pmcid", pmcid)
            .int("event", d(event))
            .hex32("flags", flags)
            .text("evname", evname)
            .end(),
        B::ThrCreate {
            tid,
            pid,
            flags,
            tdname,
        } => Bounded::new(2048)
            .bytes(&start)
            .int("tid", d(tid))
            .int("pid", d(pid))
            .hex32("flags", flags)
            .text("tdname", tdname)
            .end(),
        B::ThrExit { tid } => Bounded::new(256).bytes(&start).int("tid", d(tid)).end(),
        B::ProcCreate { pid, flags, pcomm } => Bounded::new(2048)
            .bytes(&start)
            .int("pid", d(pid))
            .hex32("flags", flags)
            .text("pcomm", pcomm)
            .end(),
    };
    Some(json)
}

/// `pmclog_ev_json()`, for `event_to_json()` in libpmc_json.cc: writes
/// the form of `ev` into `buf` (at most `len` bytes, no NUL) and returns
/// the length of the whole form, or -1 for a type that has none. Hidden
/// in libpmc.so (libpmc_json.cc declares it so): not part of the ABI.
///
/// # Safety
///
/// `ev` points to a readable `struct pmclog_ev`; `buf` is writable for
/// `len` bytes (or `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmclog_ev_json(
    ev: *const PmclogEv,
    buf: *mut c_char,
    len: usize,
) -> isize {
    // SAFETY: the caller passes a valid event.
    let Some(json) = event_to_json(unsafe { &*ev }) else {
        return -1;
    };
    let n = json.len().min(len);
    if n > 0 {
        // SAFETY: the caller made `buf` writable for `len` >= n bytes, and
        // it does not overlap the vector just made.
        unsafe { core::ptr::copy_nonoverlapping(json.as_ptr(), buf.cast::<u8>(), n) };
    }
    json.len() as isize
}
