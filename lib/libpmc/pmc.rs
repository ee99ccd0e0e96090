//! pmc(3) in Rust: a handle on hwpmc(4) through a [`Transport`], with the
//! operations of FreeBSD's libpmc and its event-specification parser.
//!
//! The C entry points in `libpmc.rs` keep one [`Pmc`] for the process, as
//! FreeBSD's library does; Rust users and tests may make as many as they
//! like, each on its own transport.

use core::ffi::c_int;
use core::mem::{offset_of, size_of};
use std::ffi::CString;

use uapi::pmc::*;
use uapi::pmc_events::PMC_EV_TSC_TSC;
use uapi::{AsBytes, Plain};

use crate::libpmc_pmu_util::PmuTable;
use crate::transport::Transport;

/// An errno value.
pub type Errno = c_int;

/// `EPROGMISMATCH`: the driver's ABI major differs. FreeBSD's value
/// (75) on FreeBSD, the host's nearest elsewhere (see
/// [`crate::transport::host_errno`]).
pub const EPROGMISMATCH: Errno = crate::transport::host_errno(75);

/// The `PMC_VERSION` libpmc asks the driver for: that of the FreeBSD tree
/// it is built in (build.rs), else the newest ABI's.
pub const LIBPMC_PMC_VERSION: u32 = match option_env!("LIBPMC_TREE_PMC_VERSION") {
    Some(v) => parse_u32(v),
    None => PMC_VERSION,
};

const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0u32;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    v
}

/// One event a class offers: its canonical name and code.
#[derive(Debug, Clone)]
pub struct EventDescr {
    /// Name as libpmc prints and matches it (e.g. `CLOCK.HARD`, `TSC`).
    pub name: CString,
    /// `enum pmc_event` value.
    pub code: u32,
}

/// A class of the running machine, with libpmc's prefix and events.
#[derive(Debug, Clone)]
struct ClassDescr {
    class: PmcClass,
    /// The prefix that restricts a specification to the class (`SOFT-`).
    prefix: &'static str,
    events: Vec<EventDescr>,
}

/// `struct pmc_driverstats`.
pub type PmcDriverstats = PmcOpGetdriverstats;

/// A connection to hwpmc(4).
pub struct Pmc {
    transport: Box<dyn Transport>,
    cpuinfo: PmcOpGetcpuinfo,
    classes: Vec<ClassDescr>,
    /// The software events the kernel registered, read by `pmc_init`.
    soft_events: Vec<EventDescr>,
    /// The PMU event table of the CPU `kern.hwpmc.cpuid` names.
    pmu: Option<PmuTable>,
    /// The driver's `PMC_VERSION`, from PMC_OP_GETMODULEVERSION.
    driver_version: u32,
}

impl core::fmt::Debug for Pmc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pmc")
            .field("cpuinfo", &self.cpuinfo)
            .finish_non_exhaustive()
    }
}

/// Event aliases of the generic CPU type (FreeBSD's generic list).
const GENERIC_ALIASES: &[(&str, &str)] = &[("instructions", "SOFT-CLOCK.HARD")];

/// FreeBSD's event-name comparison: case-insensitive, and space, `_`, `-`
/// and `.` all match each other.
pub fn event_name_matches(name: &str, canonical: &str) -> bool {
    let sep = |c: u8| matches!(c, b' ' | b'_' | b'-' | b'.');
    name.len() == canonical.len()
        && name
            .bytes()
            .zip(canonical.bytes())
            .all(|(n, c)| (sep(n) && sep(c)) || n.eq_ignore_ascii_case(&c))
}

fn put<T: ToNe>(buf: &mut [u8], off: usize, v: T) {
    let b = v.to_ne();
    buf[off..off + b.as_ref().len()].copy_from_slice(b.as_ref());
}

/// Native-endian bytes of an integer field.
trait ToNe {
    type Bytes: AsRef<[u8]>;
    fn to_ne(self) -> Self::Bytes;
}
impl ToNe for u32 {
    type Bytes = [u8; 4];
    fn to_ne(self) -> [u8; 4] {
        self.to_ne_bytes()
    }
}
impl ToNe for u64 {
    type Bytes = [u8; 8];
    fn to_ne(self) -> [u8; 8] {
        self.to_ne_bytes()
    }
}

fn get_u32(buf: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(buf[off..off + 4].try_into().expect("4 bytes"))
}

impl Pmc {
    /// `pmc_init`: checks the driver's version and reads the machine's
    /// classes and soft events.
    pub fn init(transport: Box<dyn Transport>) -> Result<Pmc, Errno> {
        let mut pmc = Pmc {
            transport,
            cpuinfo: PmcOpGetcpuinfo::zeroed(),
            classes: Vec::new(),
            soft_events: Vec::new(),
            pmu: None,
            driver_version: 0,
        };
        let mut version = LIBPMC_PMC_VERSION;
        pmc.call_struct(PmcOp::Getmoduleversion, &mut version)?;
        if version & 0xFF00_0000 != LIBPMC_PMC_VERSION & 0xFF00_0000 {
            crate::transport::note_freebsd_errno(75);
            return Err(EPROGMISMATCH);
        }
        pmc.driver_version = version;
        let mut cpuinfo = PmcOpGetcpuinfo::zeroed();
        pmc.call_struct(PmcOp::Getcpuinfo, &mut cpuinfo)?;
        pmc.cpuinfo = cpuinfo;
        let mut soft = PmcOpGetdyneventinfo::zeroed();
        soft.pm_class = PmcClass::Soft.raw();
        pmc.call_struct(PmcOp::Getdyneventinfo, &mut soft)?;
        let soft_events = soft.pm_events[..(soft.pm_nevent as usize).min(soft.pm_events.len())]
            .iter()
            .filter_map(|e| {
                let name = uapi::pmc::c_field_str(&e.pm_ev_name);
                Some(EventDescr {
                    name: CString::new(name).ok()?,
                    code: e.pm_ev_code,
                })
            })
            .collect::<Vec<_>>();
        for ci in &pmc.cpuinfo.pm_classes[..(pmc.cpuinfo.pm_nclass as usize).min(PMC_CLASS_MAX)] {
            let Some(class) = PmcClass::from_raw(ci.pm_class) else {
                continue;
            };
            let descr = match class {
                PmcClass::Soft => ClassDescr {
                    class,
                    prefix: "SOFT-",
                    events: soft_events.clone(),
                },
                // libpmc's table names the one event "cycles"; "TSC" is
                // taken too, which FreeBSD 15.0's library refuses (as
                // "tsc" and "tsc-tsc"): its table has only "cycles".
                PmcClass::Tsc => ClassDescr {
                    class,
                    prefix: "TSC-",
                    events: vec![
                        EventDescr {
                            name: c"cycles".into(),
                            code: PMC_EV_TSC_TSC,
                        },
                        EventDescr {
                            name: c"TSC".into(),
                            code: PMC_EV_TSC_TSC,
                        },
                    ],
                },
                // Hardware classes get their tables with their backends.
                _ => continue,
            };
            pmc.classes.push(descr);
        }
        pmc.soft_events = soft_events;
        pmc.pmu = pmc
            .transport
            .sysctl_string("kern.hwpmc.cpuid")
            .ok()
            .and_then(|cpuid| PmuTable::for_cpuid(&cpuid));
        Ok(pmc)
    }

    /// The transport, e.g. to let simulated time pass.
    pub fn transport(&self) -> &dyn Transport {
        &*self.transport
    }

    fn call(&self, op: PmcOp, arg: &mut [u8]) -> Result<(), Errno> {
        self.transport.call(op.raw(), arg)
    }

    fn call_struct<T: AsBytes>(&self, op: PmcOp, v: &mut T) -> Result<(), Errno> {
        let mut bytes = v.as_bytes().to_vec();
        let r = self.call(op, &mut bytes);
        *v = T::read_from(&bytes).expect("same size");
        r
    }

    /// The PMU event table of this machine's CPU, if libpmc has one
    /// (`pmc_pmu_enabled`).
    pub fn pmu(&self) -> Option<&PmuTable> {
        self.pmu.as_ref()
    }

    /// Whether the driver offers `class` on this machine.
    pub fn has_class(&self, class: u32) -> bool {
        let n = (self.cpuinfo.pm_nclass as usize).min(PMC_CLASS_MAX);
        self.cpuinfo.pm_classes[..n]
            .iter()
            .any(|c| c.pm_class == class)
    }

    /// The cached `pmc_cpuinfo` (`pmc_cpuinfo`).
    pub fn cpuinfo(&self) -> &PmcOpGetcpuinfo {
        &self.cpuinfo
    }

    /// Events of `class` (`pmc_event_names_of_class`): those of libpmc's
    /// table for the class on this machine's CPU type, whether or not the
    /// driver offers the class, or the software events the kernel
    /// registered; EINVAL for a class libpmc has no table for.
    pub fn events_of_class(&self, class: PmcClass) -> Result<&[EventDescr], Errno> {
        if class == PmcClass::Soft {
            return Ok(&self.soft_events);
        }
        crate::pmc_event_tables::class_events(class, self.cpuinfo.pm_cputype).ok_or(libc::EINVAL)
    }

    /// The name of an event code (`pmc_name_of_event`): a software event
    /// by the name the kernel registered, a static one by libpmc's tables
    /// for this machine's CPU type.
    pub fn event_name(&self, code: u32) -> Option<&str> {
        if uapi::pmc_events::is_soft_event(code) {
            return self
                .soft_events
                .iter()
                .find(|e| e.code == code)
                .and_then(|e| e.name.to_str().ok());
        }
        crate::pmc_event_tables::static_event_name(code, self.cpuinfo.pm_cputype)
            .and_then(|n| n.to_str().ok())
    }

    /// Parses a counter specification (`[CLASS-]EVENT[,qualifier...]`, or
    /// an alias) into an allocation request; EINVAL for an unknown event,
    /// a class prefix this machine lacks, or a qualifier the class
    /// refuses. An event of the PMU table becomes a request for its class
    /// even where the driver lacks that class: the driver refuses it.
    pub fn parse_spec(
        &self,
        spec: &str,
        mode: PmcMode,
        flags: u32,
        cpu: u32,
        count: u64,
    ) -> Result<PmcOpPmcallocate, Errno> {
        let mut a = PmcOpPmcallocate::zeroed();
        a.pm_cpu = cpu;
        a.pm_mode = mode.raw();
        a.pm_flags = flags;
        a.pm_count = count;
        if mode.is_sampling() {
            a.pm_caps |= PmcCaps::INTERRUPT.bits();
        }
        // The PMU tables first, as FreeBSD's library. An event found there
        // is asked of the driver whether or not it offers the event's
        // class (it refuses a class it lacks): no other event stands in
        // for it. Only a name the table lacks goes on to the static
        // tables.
        if let Some(pmu) = &self.pmu {
            let mut request = a;
            match pmu.allocate(spec, &mut request) {
                Ok(()) => return Ok(request),
                Err(e) if e != libc::ENOENT => return Err(e),
                Err(_) => {}
            }
        }
        // The generic aliases belong to the generic CPU type, as in
        // FreeBSD's library, where each CPU type has its own aliases.
        let spec = if self.cpuinfo.pm_cputype == PmcCputype::Generic.raw() {
            GENERIC_ALIASES
                .iter()
                .find(|(alias, _)| alias.eq_ignore_ascii_case(spec))
                .map_or(spec, |(_, s)| *s)
        } else {
            spec
        };
        let (name, quals) = spec
            .split_once(',')
            .map_or((spec, None), |(n, q)| (n, Some(q)));
        let find = |c: &ClassDescr, n: &str| {
            c.events
                .iter()
                .find(|e| e.name.to_str().is_ok_and(|en| event_name_matches(n, en)))
                .map(|e| e.code)
        };
        // A class prefix restricts the search to that class.
        // Compared as bytes: the prefixes are ASCII, so a match ends on a
        // character boundary whatever the rest of the text is.
        let prefixed = self.classes.iter().find(|c| {
            name.as_bytes()
                .get(..c.prefix.len())
                .is_some_and(|b| b.eq_ignore_ascii_case(c.prefix.as_bytes()))
        });
        let (class, code) = match prefixed {
            Some(c) => (c, find(c, &name[c.prefix.len()..]).ok_or(libc::EINVAL)?),
            None => self
                .classes
                .iter()
                .find_map(|c| Some((c, find(c, name)?)))
                .ok_or(libc::EINVAL)?,
        };
        a.pm_class = class.class.raw();
        a.pm_ev = code;
        match class.class {
            // TSC events take no qualifiers.
            PmcClass::Tsc => {
                if quals.is_some_and(|q| !q.is_empty()) {
                    return Err(libc::EINVAL);
                }
                a.pm_caps |= PmcCaps::READ.bits();
            }
            // Soft events ignore qualifiers, as FreeBSD's parser does.
            _ => a.pm_caps |= (PmcCaps::READ | PmcCaps::WRITE).bits(),
        }
        Ok(a)
    }

    /// `pmc_allocate`.
    pub fn allocate(
        &self,
        spec: &str,
        mode: u32,
        flags: u32,
        cpu: c_int,
        count: u64,
    ) -> Result<PmcId, Errno> {
        let mode = PmcMode::from_raw(mode).ok_or(libc::EINVAL)?;
        let a = self.parse_spec(spec, mode, flags, cpu as u32, count)?;
        self.allocate_raw(&a)
    }

    /// PMC_OP_PMCALLOCATE with a prepared request.
    pub fn allocate_raw(&self, a: &PmcOpPmcallocate) -> Result<PmcId, Errno> {
        // Field by field: the struct has padding that must not cross.
        let mut b = vec![0u8; size_of::<PmcOpPmcallocate>()];
        put(&mut b, offset_of!(PmcOpPmcallocate, pm_caps), a.pm_caps);
        put(&mut b, offset_of!(PmcOpPmcallocate, pm_cpu), a.pm_cpu);
        put(&mut b, offset_of!(PmcOpPmcallocate, pm_class), a.pm_class);
        put(&mut b, offset_of!(PmcOpPmcallocate, pm_ev), a.pm_ev);
        put(&mut b, offset_of!(PmcOpPmcallocate, pm_flags), a.pm_flags);
        put(&mut b, offset_of!(PmcOpPmcallocate, pm_mode), a.pm_mode);
        put(&mut b, offset_of!(PmcOpPmcallocate, pm_count), a.pm_count);
        let md = offset_of!(PmcOpPmcallocate, pm_md);
        b[md..md + 32].copy_from_slice(&crate::libpmc_pmu_util::md_bytes(a));
        self.call(PmcOp::Pmcallocate, &mut b)?;
        Ok(get_u32(&b, offset_of!(PmcOpPmcallocate, pm_pmcid)))
    }

    fn simple(&self, op: PmcOp, id: PmcId) -> Result<(), Errno> {
        self.call_struct(op, &mut PmcOpSimple { pm_pmcid: id })
    }

    /// `pmc_attach`.
    pub fn attach(&self, id: PmcId, pid: i32) -> Result<(), Errno> {
        self.call_struct(
            PmcOp::Pmcattach,
            &mut PmcOpPmcattach {
                pm_pmc: id,
                pm_pid: pid,
            },
        )
    }
    /// `pmc_detach`.
    pub fn detach(&self, id: PmcId, pid: i32) -> Result<(), Errno> {
        self.call_struct(
            PmcOp::Pmcdetach,
            &mut PmcOpPmcattach {
                pm_pmc: id,
                pm_pid: pid,
            },
        )
    }
    /// `pmc_start`.
    pub fn start(&self, id: PmcId) -> Result<(), Errno> {
        self.simple(PmcOp::Pmcstart, id)
    }
    /// `pmc_stop`.
    pub fn stop(&self, id: PmcId) -> Result<(), Errno> {
        self.simple(PmcOp::Pmcstop, id)
    }
    /// `pmc_release`.
    pub fn release(&self, id: PmcId) -> Result<(), Errno> {
        self.simple(PmcOp::Pmcrelease, id)
    }

    fn pmcrw(&self, id: PmcId, flags: PmcFlags, value: u64) -> Result<u64, Errno> {
        let mut rw = PmcOpPmcrw {
            pm_flags: flags.bits(),
            pm_pmcid: id,
            pm_value: value,
        };
        self.call_struct(PmcOp::Pmcrw, &mut rw)?;
        Ok(rw.pm_value)
    }
    /// `pmc_read`.
    pub fn read(&self, id: PmcId) -> Result<u64, Errno> {
        self.pmcrw(id, PmcFlags::OLDVALUE, 0)
    }
    /// `pmc_write`.
    pub fn write(&self, id: PmcId, value: u64) -> Result<(), Errno> {
        self.pmcrw(id, PmcFlags::NEWVALUE, value).map(|_| ())
    }
    /// `pmc_rw`: writes `value` and returns the old value.
    pub fn rw(&self, id: PmcId, value: u64) -> Result<u64, Errno> {
        self.pmcrw(id, PmcFlags::NEWVALUE | PmcFlags::OLDVALUE, value)
    }
    /// `pmc_set`: the initial or reload count (PMC_OP_PMCSETCOUNT).
    pub fn set(&self, id: PmcId, count: u64) -> Result<(), Errno> {
        let mut b = vec![0u8; size_of::<PmcOpPmcsetcount>()];
        put(&mut b, offset_of!(PmcOpPmcsetcount, pm_count), count);
        put(&mut b, offset_of!(PmcOpPmcsetcount, pm_pmcid), id);
        self.call(PmcOp::Pmcsetcount, &mut b)
    }

    /// Whether the driver has PMC_OP_GETCAPS: minor version 3 of the
    /// 2026 ABI on (FreeBSD 15.0's driver, 0x0A000000, lacks it).
    pub fn driver_has_getcaps(&self) -> bool {
        self.driver_version & 0x00FF_0000 >= PMC_VERSION_WITH_GETCAPS & 0x00FF_0000
    }

    /// The driver's version, as PMC_OP_GETMODULEVERSION reported it.
    pub fn driver_version(&self) -> u32 {
        self.driver_version
    }

    /// `pmc_capabilities`: the capabilities of the PMC's own row, asked of
    /// the driver with PMC_OP_GETCAPS, which fails for an id that is not
    /// an allocated PMC of the caller. A driver without the operation is
    /// answered from the cached class table, as FreeBSD 15.0's library
    /// does.
    pub fn capabilities(&self, id: PmcId) -> Result<u32, Errno> {
        if self.driver_has_getcaps() {
            self.row_caps(id)
        } else {
            self.class_info(id).map(|c| c.pm_caps)
        }
    }
    /// `pmc_width`: the counter width of the PMC's class.
    pub fn width(&self, id: PmcId) -> Result<u32, Errno> {
        self.class_info(id).map(|c| c.pm_width)
    }
    fn class_info(&self, id: PmcId) -> Result<&PmcClassinfo, Errno> {
        let class = pmc_id_to_class(id);
        self.cpuinfo.pm_classes[..(self.cpuinfo.pm_nclass as usize).min(PMC_CLASS_MAX)]
            .iter()
            .find(|c| c.pm_class == class)
            .ok_or(libc::EINVAL)
    }

    /// `pmc_configure_logfile`.
    pub fn configure_logfile(&self, fd: c_int) -> Result<(), Errno> {
        self.call_struct(
            PmcOp::Configurelog,
            &mut PmcOpConfigurelog {
                pm_flags: 0,
                pm_logfd: fd,
            },
        )
    }
    /// `pmc_flush_logfile`.
    pub fn flush_logfile(&self) -> Result<(), Errno> {
        self.call(PmcOp::Flushlog, &mut [])
    }
    /// `pmc_close_logfile`.
    pub fn close_logfile(&self) -> Result<(), Errno> {
        self.call(PmcOp::Closelog, &mut [])
    }
    /// `pmc_writelog`.
    pub fn writelog(&self, userdata: u32) -> Result<(), Errno> {
        self.call_struct(
            PmcOp::Writelog,
            &mut PmcOpWritelog {
                pm_userdata: userdata,
            },
        )
    }
    /// `pmc_get_driver_stats`.
    pub fn driver_stats(&self) -> Result<PmcDriverstats, Errno> {
        let mut s = PmcOpGetdriverstats::default();
        self.call_struct(PmcOp::Getdriverstats, &mut s)?;
        Ok(s)
    }
    /// `pmc_get_msr`.
    pub fn get_msr(&self, id: PmcId) -> Result<u32, Errno> {
        let mut m = PmcOpGetmsr {
            pm_msr: 0,
            pm_pmcid: id,
        };
        self.call_struct(PmcOp::Pmcgetmsr, &mut m)?;
        Ok(m.pm_msr)
    }
    /// `pmc_enable` / `pmc_disable`: PMC_OP_PMCADMIN.
    pub fn admin(&self, cpu: c_int, row: c_int, state: PmcState) -> Result<(), Errno> {
        self.call_struct(
            PmcOp::Pmcadmin,
            &mut PmcOpPmcadmin {
                pm_cpu: cpu,
                pm_flags: 0,
                pm_pmc: row,
                pm_state: state.raw(),
            },
        )
    }
    /// `pmc_pmcinfo`: the rows of `cpu`.
    pub fn pmcinfo(&self, cpu: c_int) -> Result<Vec<PmcInfo>, Errno> {
        let npmc = self.cpuinfo.pm_npmc as usize;
        let mut b = vec![0u8; size_of::<PmcOpGetpmcinfo>() + npmc * size_of::<PmcInfo>()];
        b[..4].copy_from_slice(&cpu.to_ne_bytes());
        self.call(PmcOp::Getpmcinfo, &mut b)?;
        let base = offset_of!(PmcOpGetpmcinfo, pm_pmcs);
        Ok((0..npmc)
            .map(|i| {
                PmcInfo::read_from(&b[base + i * size_of::<PmcInfo>()..])
                    .expect("sized for npmc rows")
            })
            .collect())
    }
    /// PMC_OP_EXT_GETCAPS (`pmc_extcaps`): the driver's `PMC_EXTCAP_*`;
    /// EOPNOTSUPP from a driver without extensions (which does not know
    /// the operation: EINVAL).
    pub fn ext_caps(&self) -> Result<u32, Errno> {
        let mut c = PmcOpExtcaps::default();
        let mut bytes = c.as_bytes().to_vec();
        match self.transport.call(PMC_OP_EXT_GETCAPS, &mut bytes) {
            Ok(()) => {}
            Err(libc::EINVAL) => return Err(libc::EOPNOTSUPP),
            Err(e) => return Err(e),
        }
        c = PmcOpExtcaps::read_from(&bytes).expect("same size");
        Ok(c.pm_caps)
    }

    /// PMC_OP_EXT_NOTIFY (`pmc_notify`): notification every `count`
    /// samples (or log bytes, with PMC_NOTIFY_BYTES) of sampling PMC `id`,
    /// stopping it after `refresh` overflows if not 0, with signal `signo`
    /// (the host's number) to this thread if not 0; the new descriptor.
    pub fn notify(
        &self,
        id: PmcId,
        flags: u32,
        count: u32,
        refresh: u32,
        signo: c_int,
    ) -> Result<c_int, Errno> {
        if self.ext_caps()? & PMC_EXTCAP_NOTIFY == 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let signo = if signo == 0 {
            0
        } else {
            self.transport.kernel_signal(signo).ok_or(libc::EINVAL)?
        };
        let mut n = PmcOpNotify {
            pm_pmcid: id,
            pm_flags: flags,
            pm_count: count,
            pm_refresh: refresh,
            pm_signo: signo,
            pm_fd: -1,
            pm_spare: [0; 2],
        };
        let mut bytes = n.as_bytes().to_vec();
        self.transport.call(PMC_OP_EXT_NOTIFY, &mut bytes)?;
        n = PmcOpNotify::read_from(&bytes).expect("same size");
        Ok(n.pm_fd)
    }

    /// PMC_OP_GETCAPS: the capabilities of the PMC's own row.
    pub fn row_caps(&self, id: PmcId) -> Result<u32, Errno> {
        let mut c = PmcOpCaps {
            pm_pmcid: id,
            pm_caps: 0,
        };
        self.call_struct(PmcOp::Getcaps, &mut c)?;
        Ok(c.pm_caps)
    }
}
