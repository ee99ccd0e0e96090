//! The text dump of a log (`pmcstat -R file` without an analysis option,
//! and the live dump of a sampling run without -O): one line per record,
//! in FreeBSD's formats.

use core::ffi::{CStr, c_char};
use std::io::Write;

use pmc::pmclog::PmclogEv;
use uapi::pmc::{PMC_VERSION, PMC_VERSION_MAJOR, PmcCputype};
use uapi::pmclog::{PmclogType, pmc_callchain_cpuflags_to_cpu, pmc_callchain_cpuflags_to_usermode};

fn text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `%p` of FreeBSD's printf: 0x and lowercase hex, unpadded.
fn ptr(v: usize) -> String {
    format!("{v:#x}")
}

fn line(out: &mut impl Write, tag: &str, rest: &str) -> std::io::Result<()> {
    writeln!(out, "{tag:<9} {rest}")
}

/// Prints one event; a version warning goes to `warn`.
pub fn print_event(
    out: &mut impl Write,
    warn: &mut impl Write,
    ev: &PmclogEv,
) -> std::io::Result<()> {
    // SAFETY: each arm reads the union member that pl_type selects, which
    // the reader filled.
    unsafe {
        let u = &ev.pl_u;
        match PmclogType::from_raw(ev.pl_type) {
            Some(PmclogType::Callchain) => {
                let c = &u.pl_cc;
                let mode = if pmc_callchain_cpuflags_to_usermode(c.pl_cpuflags) != 0 {
                    'u'
                } else {
                    's'
                };
                let cpu = pmc_callchain_cpuflags_to_cpu(c.pl_cpuflags);
                line(
                    out,
                    "callchain",
                    &format!(
                        "{} {:#x} {} {} {mode}",
                        c.pl_pid as i32, c.pl_pmcid, cpu, c.pl_npc
                    ),
                )?;
                for pc in &c.pl_pc[..(c.pl_npc as usize).min(c.pl_pc.len())] {
                    line(out, "...", &ptr(*pc))?;
                }
            }
            Some(PmclogType::Closelog) => line(out, "closelog", "")?,
            Some(PmclogType::Dropnotify) => line(out, "drop", "")?,
            Some(PmclogType::Initialize) => {
                let i = &u.pl_i;
                let cputype = PmcCputype::from_raw(i.pl_arch).map_or("(null)", PmcCputype::name);
                line(
                    out,
                    "initlog",
                    &format!("{:#x} \"{cputype}\"", i.pl_version),
                )?;
                if i.pl_version & 0xFF00_0000 != PMC_VERSION_MAJOR << 24 {
                    writeln!(
                        warn,
                        "pmcstat: WARNING: Log version {:#x} != expected version {:#x}.",
                        i.pl_version, PMC_VERSION
                    )?;
                }
            }
            Some(PmclogType::MapIn) => {
                let m = &u.pl_mi;
                line(
                    out,
                    "map-in",
                    &format!(
                        "{} {} \"{}\"",
                        m.pl_pid,
                        ptr(m.pl_start),
                        text(&m.pl_pathname)
                    ),
                )?;
            }
            Some(PmclogType::MapOut) => {
                let m = &u.pl_mo;
                line(
                    out,
                    "map-out",
                    &format!("{} {} {}", m.pl_pid, ptr(m.pl_start), ptr(m.pl_end)),
                )?;
            }
            Some(PmclogType::Pmcallocate) => {
                let a = &u.pl_a;
                let name = if a.pl_evname.is_null() {
                    String::from("(null)")
                } else {
                    CStr::from_ptr(a.pl_evname).to_string_lossy().into_owned()
                };
                line(
                    out,
                    "allocate",
                    &format!("{:#x} \"{name}\" {:#x}", a.pl_pmcid, a.pl_flags),
                )?;
            }
            Some(PmclogType::Pmcallocatedyn) => {
                let a = &u.pl_ad;
                line(
                    out,
                    "allocatedyn",
                    &format!(
                        "{:#x} \"{}\" {:#x}",
                        a.pl_pmcid,
                        text(&a.pl_evname),
                        a.pl_flags
                    ),
                )?;
            }
            Some(PmclogType::Pmcattach) => {
                let t = &u.pl_t;
                line(
                    out,
                    "attach",
                    &format!(
                        "{:#x} {} \"{}\"",
                        t.pl_pmcid,
                        t.pl_pid,
                        text(&t.pl_pathname)
                    ),
                )?;
            }
            Some(PmclogType::Pmcdetach) => line(
                out,
                "detach",
                &format!("{:#x} {}", u.pl_d.pl_pmcid, u.pl_d.pl_pid),
            )?,
            Some(PmclogType::Proccsw) => {
                let c = u.pl_c;
                line(
                    out,
                    "cswval",
                    &format!("{:#x} {} {}", c.pl_pmcid, c.pl_pid, c.pl_value as i64),
                )?;
            }
            Some(PmclogType::ProcCreate) => {
                let p = &u.pl_pc;
                line(
                    out,
                    "create",
                    &format!("{} {:x} \"{}\"", p.pl_pid, p.pl_flags, text(&p.pl_pcomm)),
                )?;
            }
            Some(PmclogType::Procexec) => {
                let x = &u.pl_x;
                line(
                    out,
                    "exec",
                    &format!(
                        "{:#x} {} {} {} \"{}\"",
                        x.pl_pmcid,
                        x.pl_pid,
                        ptr(x.pl_baseaddr),
                        ptr(x.pl_dynaddr),
                        text(&x.pl_pathname)
                    ),
                )?;
            }
            Some(PmclogType::Procexit) => {
                let e = u.pl_e;
                line(
                    out,
                    "exitval",
                    &format!(
                        "{:#x} {} {}",
                        e.pl_pmcid, e.pl_pid as i32, e.pl_value as i64
                    ),
                )?;
            }
            Some(PmclogType::Procfork) => line(
                out,
                "fork",
                &format!("{} {}", u.pl_f.pl_oldpid, u.pl_f.pl_newpid),
            )?,
            Some(PmclogType::Userdata) => {
                line(out, "userdata", &format!("{:#x}", u.pl_u.pl_userdata))?
            }
            Some(PmclogType::Sysexit) => line(out, "exit", &format!("{}", u.pl_se.pl_pid))?,
            Some(PmclogType::ThrCreate) => {
                let t = &u.pl_tc;
                line(
                    out,
                    "thr-create",
                    &format!(
                        "{} {} {:x} \"{}\"",
                        t.pl_tid,
                        t.pl_pid,
                        t.pl_flags,
                        text(&t.pl_tdname)
                    ),
                )?;
            }
            Some(PmclogType::ThrExit) => line(out, "thr-exit", &format!("{}", u.pl_te.pl_tid))?,
            None => writeln!(out, "unknown event (type {}).", ev.pl_type as i32)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmc::pmclog::{PMCLOG_FD_NONE, Parser, PmclogState};
    use uapi::pmclog::{PcList, PmclogBody as B, PmclogRecord, Timespec};

    /// Every record type through the reader and the printer, against
    /// FreeBSD's formats filled in by hand.
    #[test]
    fn every_record_type_in_freebsds_format() {
        let pcs = [0x40_1000usize, 0xffff_ffff_8020_0000];
        let cases: Vec<(B<'_>, &str)> = vec![
            (
                B::Initialize {
                    version: 0x0A03_0000,
                    cpu: 0x87,
                    tsc_freq: 1,
                    ts: Timespec::default(),
                    cpuid: b"x",
                },
                "initlog   0xa030000 \"INTEL_CORE\"",
            ),
            (
                B::Pmcallocate {
                    pmcid: 0x100,
                    event: 0x1000,
                    flags: 0x20,
                    rate: 0,
                },
                "allocate  0x100 \"TSC\" 0x20",
            ),
            (
                B::Pmcallocatedyn {
                    pmcid: 0x200f00,
                    event: 0x20000,
                    flags: 0x80,
                    evname: b"CLOCK.HARD",
                },
                "allocatedyn 0x200f00 \"CLOCK.HARD\" 0x80",
            ),
            (
                B::Pmcattach {
                    pmcid: 0x100,
                    pid: 42,
                    pathname: b"/usr/bin/make",
                },
                "attach    0x100 42 \"/usr/bin/make\"",
            ),
            (
                B::Pmcdetach {
                    pmcid: 0x100,
                    pid: 42,
                },
                "detach    0x100 42",
            ),
            (
                B::Proccsw {
                    value: u64::MAX,
                    pmcid: 0x100,
                    pid: 42,
                    tid: 7,
                },
                "cswval    0x100 42 -1",
            ),
            (
                B::Procexec {
                    pid: 42,
                    pmcid: 0x100,
                    base: 0x20_0000,
                    dyn_base: 0,
                    pathname: b"/bin/sh",
                },
                "exec      0x100 42 0x200000 0x0 \"/bin/sh\"",
            ),
            (
                B::Procexit {
                    pmcid: 0x100,
                    pid: 42,
                    value: 987,
                },
                "exitval   0x100 42 987",
            ),
            (
                B::Procfork {
                    oldpid: 42,
                    newpid: 43,
                },
                "fork      42 43",
            ),
            (B::Sysexit { pid: 43 }, "exit      43"),
            (B::Userdata { userdata: 0xbeef }, "userdata  0xbeef"),
            (
                B::MapIn {
                    pid: u32::MAX,
                    start: 0xffff_ffff_8020_0000,
                    pathname: b"/boot/kernel/kernel",
                },
                "map-in    -1 0xffffffff80200000 \"/boot/kernel/kernel\"",
            ),
            (
                B::MapOut {
                    pid: 42,
                    start: 0x1000,
                    end: 0x2000,
                },
                "map-out   42 0x1000 0x2000",
            ),
            (
                B::Callchain {
                    pid: 42,
                    tid: 7,
                    pmcid: 0x100,
                    cpuflags: (3 << 16) | 1,
                    pcs: PcList::from_words(&pcs),
                },
                "callchain 42 0x100 3 2 u\n...       0x401000\n...       0xffffffff80200000",
            ),
            (
                B::ThrCreate {
                    tid: 100_043,
                    pid: 42,
                    flags: 0x800000,
                    tdname: b"worker",
                },
                "thr-create 100043 42 800000 \"worker\"",
            ),
            (B::ThrExit { tid: 100_043 }, "thr-exit  100043"),
            (
                B::ProcCreate {
                    pid: 44,
                    flags: 0x10,
                    pcomm: b"cc",
                },
                "create    44 10 \"cc\"",
            ),
            (B::Dropnotify, "drop      "),
        ];
        let mut log = Vec::new();
        let mut want = String::new();
        for (body, line) in &cases {
            let rec = PmclogRecord {
                tsc: 1,
                body: *body,
            };
            let mut b = vec![0u8; rec.encoded_len()];
            rec.encode(&mut b).unwrap();
            log.extend_from_slice(&b);
            want.push_str(line);
            want.push('\n');
        }
        let mut parser = Parser::new(PMCLOG_FD_NONE);
        parser.feed(&log);
        let mut ev = PmclogEv::zeroed();
        let (mut out, mut warn) = (Vec::new(), Vec::new());
        while parser.read(&mut ev) == PmclogState::Ok {
            print_event(&mut out, &mut warn, &ev).unwrap();
        }
        assert_eq!(String::from_utf8(out).unwrap(), want);
        assert!(warn.is_empty());
    }

    #[test]
    fn another_major_version_is_warned_about() {
        let rec = PmclogRecord {
            tsc: 1,
            body: B::Initialize {
                version: 0x0903_0000,
                cpu: 0,
                tsc_freq: 0,
                ts: Timespec::default(),
                cpuid: b"",
            },
        };
        let mut b = vec![0u8; rec.encoded_len()];
        rec.encode(&mut b).unwrap();
        let mut parser = Parser::new(PMCLOG_FD_NONE);
        parser.feed(&b);
        let mut ev = PmclogEv::zeroed();
        assert_eq!(parser.read(&mut ev), PmclogState::Ok);
        let (mut out, mut warn) = (Vec::new(), Vec::new());
        print_event(&mut out, &mut warn, &ev).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "initlog   0x9030000 \"(null)\"\n"
        );
        assert_eq!(
            String::from_utf8(warn).unwrap(),
            "pmcstat: WARNING: Log version 0x9030000 != expected version 0xa030000.\n"
        );
    }
}
