//! event_to_json() (pmcformat.h): the JSON form of pmclog(3) events.
//!
//! - Fixed expectations, written from the format strings of FreeBSD's
//!   libpmc_json.cc, for each record type and its oddities.
//! - Side by side with FreeBSD's own libpmc_json.cc, compiled with the
//!   host's C++ compiler from the tree of record ($FREEBSD_SRC, else
//!   ../shared/freebsd-15.0 beside the workspace) against our pmclog.h,
//!   over events with extreme values and long text: the Rust form, and
//!   our libpmc_json.cc (the C++ door, linked with libpmc.a) called from
//!   a C++ program as usr.sbin/pmc calls it, must give FreeBSD's bytes,
//!   and stop the program as FreeBSD's does on a type with no form.

mod common_c;

use common_c::static_library;
use std::path::{Path, PathBuf};
use std::process::Command;

use core::ffi::c_char;
use pmc::libpmc_json::event_to_json;
use pmc::pmclog::*;
use uapi::pmclog::{PmclogType, Timespec};

fn text<const N: usize>(s: &[u8]) -> [c_char; N] {
    let mut a = [0 as c_char; N];
    for (d, &b) in a.iter_mut().zip(s.iter().take(N - 1)) {
        *d = b as c_char;
    }
    a
}

fn event(kind: PmclogType, tsc: isize) -> Box<PmclogEv> {
    let mut ev = PmclogEv::zeroed();
    ev.pl_type = kind as u32;
    ev.pl_ts = Timespec {
        tv_sec: tsc,
        tv_nsec: 0,
    };
    ev
}

fn json(ev: &PmclogEv) -> String {
    String::from_utf8(event_to_json(ev).expect("a type with a form")).unwrap()
}

/// One event of every type with a form, with ordinary values.
fn ordinary() -> Vec<Box<PmclogEv>> {
    use PmclogType as T;
    let mut v = Vec::new();
    v.push(event(T::Closelog, 7));
    v.push(event(T::Dropnotify, 8));
    let mut e = event(T::Initialize, 1);
    e.pl_u.pl_i = PmclogEvInitialize {
        pl_version: 0x0A00_0000,
        pl_arch: 0x10,
        pl_tsc_freq: 2_000_000_000,
        pl_ts: Timespec {
            tv_sec: 1_700_000_000,
            tv_nsec: 999,
        },
        pl_cpuid: text(b"GenuineIntel-6-55-4"),
    };
    v.push(e);
    let mut e = event(T::Pmcallocate, 2);
    e.pl_u.pl_a = PmclogEvPmcallocate {
        pl_evname: core::ptr::null(),
        pl_rate: 65536,
        pl_event: 0x2000,
        pl_flags: 0x20,
        pl_pmcid: 0x100,
    };
    v.push(e);
    let mut e = event(T::Pmcattach, 3);
    e.pl_u.pl_t = PmclogEvPmcattach {
        pl_pmcid: 0x100,
        pl_pid: 42,
        pl_pathname: text(b"/usr/bin/work"),
    };
    v.push(e);
    let mut e = event(T::Pmcdetach, 4);
    e.pl_u.pl_d = PmclogEvPmcdetach {
        pl_pmcid: 0x100,
        pl_pid: 42,
    };
    v.push(e);
    let mut e = event(T::Proccsw, 5);
    e.pl_u.pl_c = PmclogEvProccsw {
        pl_pid: 42,
        pl_tid: 100_042,
        pl_pmcid: 0x100,
        pl_value: 0x1234,
    };
    v.push(e);
    let mut e = event(T::Procexec, 6);
    e.pl_u.pl_x = PmclogEvProcexec {
        pl_pid: 42,
        pl_pmcid: 0x100,
        pl_baseaddr: 0x20_0000,
        pl_dynaddr: 0x80_0000,
        pl_pathname: text(b"/usr/bin/work"),
    };
    v.push(e);
    let mut e = event(T::Procexit, 9);
    e.pl_u.pl_e = PmclogEvProcexit {
        pl_pid: 42,
        pl_pmcid: 0x100,
        pl_value: 99,
    };
    v.push(e);
    let mut e = event(T::Procfork, 10);
    e.pl_u.pl_f = PmclogEvProcfork {
        pl_oldpid: 42,
        pl_newpid: 43,
    };
    v.push(e);
    let mut e = event(T::Sysexit, 11);
    e.pl_u.pl_se = PmclogEvSysexit { pl_pid: 43 };
    v.push(e);
    let mut e = event(T::Userdata, 12);
    e.pl_u.pl_u = PmclogEvUserdata {
        pl_userdata: 0xdead,
    };
    v.push(e);
    let mut e = event(T::MapIn, 13);
    e.pl_u.pl_mi = PmclogEvMapIn {
        pl_pid: 42,
        pl_start: 0x40_0000,
        pl_pathname: text(b"/lib/libc.so.7"),
    };
    v.push(e);
    let mut e = event(T::MapOut, 14);
    e.pl_u.pl_mo = PmclogEvMapOut {
        pl_pid: 42,
        pl_start: 0x40_0000,
        pl_end: 0x50_0000,
    };
    v.push(e);
    let mut e = event(T::Callchain, 15);
    let mut pcs = [0usize; uapi::pmc::PMC_CALLCHAIN_DEPTH_MAX];
    pcs[..3].copy_from_slice(&[0x40_1000, 0x40_2000, 0x40_3000]);
    e.pl_u.pl_cc = PmclogEvCallchain {
        pl_pid: 42,
        pl_tid: 100_042,
        pl_pmcid: 0x100,
        pl_cpuflags: 0x1_0002,
        pl_cpuflags2: 0,
        pl_npc: 3,
        pl_pc: pcs,
    };
    v.push(e);
    let mut e = event(T::Pmcallocatedyn, 16);
    e.pl_u.pl_ad = PmclogEvPmcallocatedyn {
        pl_evname: text(b"instructions"),
        pl_event: 0x2000,
        pl_flags: 0x20,
        pl_pmcid: 0x101,
    };
    v.push(e);
    let mut e = event(T::ThrCreate, 17);
    e.pl_u.pl_tc = PmclogEvThreadcreate {
        pl_tid: 100_043,
        pl_pid: 42,
        pl_flags: 1,
        pl_tdname: text(b"worker"),
    };
    v.push(e);
    let mut e = event(T::ThrExit, 18);
    e.pl_u.pl_te = PmclogEvThreadexit { pl_tid: 100_043 };
    v.push(e);
    let mut e = event(T::ProcCreate, 19);
    e.pl_u.pl_pc = PmclogEvProccreate {
        pl_pid: 42,
        pl_flags: 2,
        pl_pcomm: text(b"work"),
    };
    v.push(e);
    v
}

/// The forms FreeBSD's format strings give for `ordinary()`.
const ORDINARY: &[&str] = &[
    "{\"type\": \"closelog\"}\n, \"tsc\": \"7\"}\n",
    "{\"type\": \"dropnotify\"}\n, \"tsc\": \"8\"}\n",
    "{\"type\": \"initialize\", \"tsc\": \"1\", \"version\": \"0x0a000000\", \"arch\": \"0x00000010\", \"cpuid\": \"GenuineIntel-6-55-4\", \"tsc_freq\": \"2000000000\", \"sec\": \"1700000000\", \"nsec\": \"999\"}\n",
    "{\"type\": \"pmcallocate\", \"tsc\": \"2\", \"pmcid\": \"0x00000100\", \"event\": \"0x00002000\", \"flags\": \"0x00000020\", \"rate\": \"65536\"}\n",
    "{\"type\": \"pmcattach\", \"tsc\": \"3\", \"pmcid\": \"0x00000100\", \"pid\": \"42\", \"pathname\": \"/usr/bin/work\"}\n",
    "{\"type\": \"pmcdetach\", \"tsc\": \"4\", \"pmcid\": \"0x00000100\", \"pid\": \"42\"}\n",
    "{\"type\": \"proccsw\", \"tsc\": \"5\", \"pmcid\": \"0x00000100\", \"pid\": \"42\" \"tid\": \"100042\", \"value\": \"0x0000000000001234\"}\n",
    "{\"type\": \"procexec\", \"tsc\": \"6\", \"pmcid\": \"0x00000100\", \"pid\": \"42\", \"base\": \"0x0000000000200000\", \"dyn\": \"0x0000000000800000\", \"pathname\": \"/usr/bin/work\"}\n",
    "{\"type\": \"procexit\", \"tsc\": \"9\", \"pmcid\": \"0x00000100\", \"pid\": \"42\", \"value\": \"0x0000000000000063\"}\n",
    "{\"type\": \"procfork\", \"tsc\": \"10\", \"oldpid\": \"42\", \"newpid\": \"43\"}\n",
    "{\"type\": \"sysexit\", \"tsc\": \"11\", \"pid\": \"43\"}\n",
    "{\"type\": \"userdata\", \"tsc\": \"12\", \"userdata\": \"0x0000dead\"}\n",
    "{\"type\": \"map_in\", \"tsc\": \"13\", \"pid\": \"42\", \"start\": \"0x0000000000400000\", \"pathname\": \"/lib/libc.so.7\"}\n",
    "{\"type\": \"map_out\", \"tsc\": \"14\", \"pid\": \"42\", \"start\": \"0x0000000000400000\", \"end\": \"0x0000000000500000\"}\n",
    "{\"type\": \"callchain\", \"tsc\": \"15\", \"pmcid\": \"0x00000100\", \"pid\": \"42\", \"tid\": \"100042\", \"cpuflags\": \"0x00010002\", \"cpuflags2\": \"0x00000000\", \"pc\": [ \"0x0000000000401000\", \"0x0000000000402000\", \"0x0000000000403000\"]}\n",
    "{\"type\": \"pmcallocatedyn\", \"tsc\": \"16\", \"pmcid\": \"0x00000101\", \"event\": \"8192\", \"flags\": \"0x00000020\", \"evname\": \"instructions\"}\n",
    "{\"type\": \"thr_create\", \"tsc\": \"17\", \"tid\": \"100043\", \"pid\": \"42\", \"flags\": \"0x00000001\", \"tdname\": \"worker\"}\n",
    "{\"type\": \"thr_exit\", \"tsc\": \"18\", \"tid\": \"100043\"}\n",
    "{\"type\": \"proc_create\", \"tsc\": \"19\", \"pid\": \"42\", \"flags\": \"0x00000002\", \"pcomm\": \"work\"}\n",
];

#[test]
fn every_type_has_freebsds_form() {
    let events = ordinary();
    assert_eq!(events.len(), ORDINARY.len());
    for (ev, want) in events.iter().zip(ORDINARY) {
        assert_eq!(json(ev), *want);
    }
}

#[test]
fn mappingchange_and_unknown_types_have_no_form() {
    let mut ev = PmclogEv::zeroed();
    for t in [0, 4, 21, u32::MAX] {
        ev.pl_type = t;
        assert_eq!(event_to_json(&ev), None, "type {t}");
    }
}

#[test]
fn text_is_cut_where_freebsds_buffer_ends() {
    // INITIALIZE's buffer is 256 bytes: 255 of text, no closing brace.
    let mut ev = event(PmclogType::Initialize, 1);
    ev.pl_u.pl_i = PmclogEvInitialize {
        pl_version: 1,
        pl_arch: 1,
        pl_tsc_freq: 1,
        pl_ts: Timespec {
            tv_sec: 1,
            tv_nsec: 1,
        },
        pl_cpuid: text(&[b'a'; 300]),
    };
    let j = json(&ev);
    assert_eq!(j.len(), 255);
    assert!(j.ends_with('a'));
    // PROCCSW's is 128: negative identifiers and a full value overflow it.
    let mut ev = event(PmclogType::Proccsw, isize::MIN);
    ev.pl_u.pl_c = PmclogEvProccsw {
        pl_pid: i32::MIN,
        pl_tid: i32::MIN,
        pl_pmcid: u32::MAX,
        pl_value: u64::MAX,
    };
    let j = json(&ev);
    assert_eq!(j.len(), 127);
    assert!(j.starts_with("{\"type\": \"proccsw\", \"tsc\": \"-"));
}

#[test]
fn callchains_without_pcs_or_with_too_many_stay_in_the_array() {
    let mut ev = event(PmclogType::Callchain, 1);
    ev.pl_u.pl_cc = PmclogEvCallchain {
        pl_pid: 1,
        pl_tid: 2,
        pl_pmcid: 3,
        pl_cpuflags: 0,
        pl_cpuflags2: 0,
        pl_npc: 0,
        pl_pc: [7; uapi::pmc::PMC_CALLCHAIN_DEPTH_MAX],
    };
    assert!(json(&ev).ends_with("\"pc\": [ ]}\n"));
    ev.pl_u.pl_cc.pl_npc = u32::MAX;
    let j = json(&ev);
    assert_eq!(
        j.matches("\"0x0000000000000007\"").count(),
        uapi::pmc::PMC_CALLCHAIN_DEPTH_MAX
    );
}

// --- side by side with FreeBSD's libpmc_json.cc ----------------------------

/// Events with extreme values and long text, of every type with a form.
fn extremes() -> Vec<Box<PmclogEv>> {
    let mut v = ordinary();
    for ev in v.iter_mut() {
        ev.pl_ts.tv_sec = if ev.pl_type % 2 == 0 {
            isize::MAX
        } else {
            isize::MIN
        };
        let kind = PmclogType::from_raw(ev.pl_type).unwrap();
        use PmclogType as T;
        let long = |n: usize| -> Vec<u8> { (0..n).map(|i| b'a' + (i % 26) as u8).collect() };
        match kind {
            T::Initialize => {
                ev.pl_u.pl_i.pl_cpuid = text(&long(300));
                ev.pl_u.pl_i.pl_tsc_freq = u64::MAX;
                ev.pl_u.pl_i.pl_version = u32::MAX;
            }
            T::Pmcallocate => ev.pl_u.pl_a.pl_rate = u64::MAX,
            T::Pmcattach => {
                ev.pl_u.pl_t.pl_pid = -1;
                ev.pl_u.pl_t.pl_pathname = text(&long(uapi::PATH_MAX));
            }
            T::Pmcdetach => ev.pl_u.pl_d.pl_pid = i32::MIN,
            T::Proccsw => {
                ev.pl_u.pl_c.pl_pid = i32::MIN;
                ev.pl_u.pl_c.pl_tid = i32::MIN;
                ev.pl_u.pl_c.pl_value = u64::MAX;
            }
            T::Procexec => {
                ev.pl_u.pl_x.pl_baseaddr = usize::MAX;
                ev.pl_u.pl_x.pl_pathname = text(&long(2100));
            }
            T::Procexit => ev.pl_u.pl_e.pl_pid = u32::MAX,
            T::Procfork => ev.pl_u.pl_f.pl_newpid = i32::MIN,
            T::Userdata => ev.pl_u.pl_u.pl_userdata = u32::MAX,
            T::MapIn => ev.pl_u.pl_mi.pl_pathname = text(&long(1500)),
            T::MapOut => ev.pl_u.pl_mo.pl_end = usize::MAX,
            T::Callchain => {
                ev.pl_u.pl_cc.pl_npc = uapi::pmc::PMC_CALLCHAIN_DEPTH_MAX as u32;
                ev.pl_u.pl_cc.pl_pc = [usize::MAX; uapi::pmc::PMC_CALLCHAIN_DEPTH_MAX];
                ev.pl_u.pl_cc.pl_pid = u32::MAX;
                ev.pl_u.pl_cc.pl_cpuflags2 = u32::MAX;
            }
            T::Pmcallocatedyn => {
                ev.pl_u.pl_ad.pl_event = u32::MAX;
                ev.pl_u.pl_ad.pl_evname = text(&long(200));
            }
            T::ThrCreate => ev.pl_u.pl_tc.pl_tdname = text(&long(40)),
            T::ProcCreate => ev.pl_u.pl_pc.pl_pcomm = text(&long(40)),
            _ => {}
        }
    }
    let mut one = event(PmclogType::Callchain, 0);
    let mut pcs = [0usize; uapi::pmc::PMC_CALLCHAIN_DEPTH_MAX];
    pcs[0] = 0x1234;
    one.pl_u.pl_cc = PmclogEvCallchain {
        pl_pid: 1,
        pl_tid: 1,
        pl_pmcid: 1,
        pl_cpuflags: 0,
        pl_cpuflags2: 0,
        pl_npc: 1,
        pl_pc: pcs,
    };
    v.push(one);
    v
}

fn freebsd_src() -> Option<PathBuf> {
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let candidates = [
        std::env::var_os("FREEBSD_SRC").map(PathBuf::from),
        Some(top.join("../shared/freebsd-15.0")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.join("lib/libpmc/libpmc_json.cc").is_file())
}

/// tests/c/json_driver.cc with event_to_json from `impl_args`.
fn driver(out: &Path, impl_args: &[&std::ffi::OsStr], shims: &Path) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let build = Command::new(&cxx)
        .args(["-std=gnu++17", "-Wall", "-o"])
        .arg(out)
        .arg("-I")
        .arg(manifest)
        .arg("-I")
        .arg(manifest.join("host-include"))
        .arg("-I")
        .arg(shims)
        .arg(manifest.join("tests/c/json_driver.cc"))
        .args(impl_args)
        .output()
        .expect("run the C++ compiler");
    assert!(
        build.status.success(),
        "{cxx} failed:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
}

fn event_bytes(events: &[Box<PmclogEv>]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for ev in events {
        let p = (&**ev as *const PmclogEv).cast::<u8>();
        // SAFETY: a PmclogEv made by PmclogEv::zeroed (every byte, padding
        // included, initialised) is readable as its bytes.
        bytes.extend_from_slice(unsafe {
            core::slice::from_raw_parts(p, core::mem::size_of::<PmclogEv>())
        });
    }
    bytes
}

#[test]
fn same_bytes_as_freebsds_libpmc_json() {
    let Some(src) = freebsd_src() else {
        println!("not run: no FreeBSD tree (set FREEBSD_SRC)");
        return;
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("json");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("shims/sys")).unwrap();
    // FreeBSD's file includes <sys/sysctl.h> for nothing it uses; glibc
    // has none.
    std::fs::write(dir.join("shims/sys/sysctl.h"), "").unwrap();
    let theirs = dir.join("freebsd");
    driver(
        &theirs,
        &[src.join("lib/libpmc/libpmc_json.cc").as_os_str()],
        &dir.join("shims"),
    );
    let ours = dir.join("ours");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = static_library();
    driver(
        &ours,
        &[
            manifest.join("libpmc_json.cc").as_os_str(),
            lib.as_os_str(),
            "-lpthread".as_ref(),
            "-ldl".as_ref(),
            "-lm".as_ref(),
        ],
        &dir.join("shims"),
    );
    let events = extremes();
    let input = dir.join("events");
    std::fs::write(&input, event_bytes(&events)).unwrap();
    let size = core::mem::size_of::<PmclogEv>().to_string();
    let outputs: Vec<Vec<u8>> = [&theirs, &ours]
        .iter()
        .map(|exe| {
            let run = Command::new(exe).arg(&size).arg(&input).output().unwrap();
            assert!(
                run.status.success(),
                "{}: {}",
                exe.display(),
                String::from_utf8_lossy(&run.stderr)
            );
            run.stdout
        })
        .collect();
    let theirs_forms: Vec<&[u8]> = outputs[0].split(|&b| b == 0).collect();
    let ours_forms: Vec<&[u8]> = outputs[1].split(|&b| b == 0).collect();
    assert_eq!(theirs_forms.len(), events.len() + 1);
    for (i, ev) in events.iter().enumerate() {
        let rust = event_to_json(ev).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&rust),
            String::from_utf8_lossy(theirs_forms[i]),
            "event {i} (type {}), the Rust form",
            ev.pl_type
        );
        assert_eq!(
            String::from_utf8_lossy(ours_forms[i]),
            String::from_utf8_lossy(theirs_forms[i]),
            "event {i} (type {}), through libpmc_json.cc",
            ev.pl_type
        );
    }

    // MAPPINGCHANGE: both programs stop with EX_USAGE and the same words.
    let mut bad = event(PmclogType::Initialize, 1);
    bad.pl_type = 4;
    std::fs::write(&input, event_bytes(&[bad])).unwrap();
    let runs: Vec<_> = [&theirs, &ours]
        .iter()
        .map(|exe| Command::new(exe).arg(&size).arg(&input).output().unwrap())
        .collect();
    for r in &runs {
        assert_eq!(r.status.code(), Some(64));
        assert!(
            String::from_utf8_lossy(&r.stderr).contains("ERROR: unrecognized event type: 4\n"),
            "{}",
            String::from_utf8_lossy(&r.stderr)
        );
    }
}
