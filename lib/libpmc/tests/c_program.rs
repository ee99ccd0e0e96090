//! A C program written against pmc.h as for FreeBSD, compiled with the
//! host's C compiler, linked with libpmc.a and run unmodified on the
//! simulated machine (LIBPMC_TRANSPORT=sim).

mod common_c;

use common_c::static_library;
use std::path::Path;
use std::process::Command;

/// Compiles tests/c/pmc_counting.c against pmc.h and the host's
/// <sys/pmc.h> into `exe`, linked with `link` (the library and what it
/// needs).
fn compile_pmc_counting(exe: &Path, link: &[&std::ffi::OsStr]) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let build = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(exe)
        .arg("-I")
        .arg(manifest)
        .arg("-I")
        .arg(manifest.join("host-include"))
        .arg(manifest.join("tests/c/pmc_counting.c"))
        .args(link)
        .output()
        .expect("run the C compiler");
    assert!(
        build.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
}

#[test]
fn pmc_counting_c_program_runs_on_the_simulator() {
    let lib = static_library();
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_program");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join("pmc_counting");
    let link = [
        lib.as_os_str(),
        "-lpthread".as_ref(),
        "-ldl".as_ref(),
        "-lm".as_ref(),
    ];
    compile_pmc_counting(&exe, &link);

    let run = Command::new(&exe)
        .env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_CPUS", "2")
        .env("LIBPMC_SIM_TICKS_PER_CALL", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "the program failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.starts_with("cpus 2 "), "{stdout}");
    assert!(stdout.contains("soft SOFT: "), "{stdout}");
    // FreeBSD's libpmc names PMC_EV_TSC_TSC by its table's one entry,
    // __PMC_EV_ALIAS_TSC()'s "cycles".
    assert!(stdout.contains("tsc cycles: "), "{stdout}");
    assert!(stdout.ends_with("ok\n"), "{stdout}");

    // Without the simulator there is no hwpmc on this host: pmc_init
    // fails and the program says so.
    let run = Command::new(&exe)
        .env_remove("LIBPMC_TRANSPORT")
        .output()
        .unwrap();
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("pmc_init() == 0"));
}

/// The same program linked against the shared library, which carries
/// FreeBSD's soname: the program records `libpmc.so.5` and loads it.
#[test]
fn pmc_counting_c_program_runs_against_libpmc_so_5() {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let so = deps.join("libpmc.so");
    assert!(so.exists(), "{} was not built", so.display());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_program_so");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&so, dir.join("libpmc.so.5")).unwrap();
    std::os::unix::fs::symlink("libpmc.so.5", dir.join("libpmc.so")).unwrap();
    let exe = dir.join("pmc_counting");
    let search = dir.as_os_str();
    compile_pmc_counting(&exe, &["-L".as_ref(), search, "-lpmc".as_ref()]);
    let dynamic = Command::new("readelf")
        .arg("-d")
        .arg(&exe)
        .output()
        .expect("run readelf");
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    assert!(
        dynamic.contains("Shared library: [libpmc.so.5]"),
        "{dynamic}"
    );

    let run = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_TICKS_PER_CALL", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.ends_with("ok\n"), "{stdout}");
}

#[path = "common/mod.rs"]
mod common;

/// What tests/c/pmclog_dump.c prints for `records`, from the records
/// themselves.
fn dump_of(records: &[uapi::pmclog::PmclogRecord<'_>]) -> String {
    use uapi::pmclog::PmclogBody as B;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut out = String::new();
    for r in records {
        let ty = r.kind().raw();
        let line = match r.body {
            B::Closelog => break,
            B::Initialize { version, cpuid, .. } => {
                format!("{ty} version {version:#x} cpuid {}", text(cpuid))
            }
            B::Pmcattach { pid, pathname, .. } => format!("{ty} pid {pid} {}", text(pathname)),
            B::Procexec { pid, pathname, .. } => format!("{ty} pid {pid} {}", text(pathname)),
            B::Proccsw {
                value, pid, tid, ..
            } => format!("{ty} pid {pid} tid {tid} value {value}"),
            B::MapIn {
                pid,
                start,
                pathname,
            } => format!("{ty} pid {pid} start {start:#x} {}", text(pathname)),
            B::Callchain {
                pid,
                tid,
                cpuflags,
                pcs,
                ..
            } => {
                let mut l = format!(
                    "{ty} pid {pid} tid {tid} cpu {} user {}",
                    cpuflags >> 16,
                    cpuflags & 1
                );
                for pc in pcs.iter() {
                    l += &format!(" {pc:#x}");
                }
                l
            }
            B::ThrCreate { tid, tdname, .. } => format!("{ty} tid {tid} {}", text(tdname)),
            B::ProcCreate { pid, pcomm, .. } => format!("{ty} pid {pid} {}", text(pcomm)),
            B::Userdata { userdata } => format!("{ty} {userdata:#x}"),
            _ => format!("{ty}"),
        };
        out += &line;
        out.push('\n');
    }
    out + "end eof\n"
}

/// A pmclog(3) consumer written as for FreeBSD, using the whole public API
/// of <pmclog.h> and <sys/pmclog.h>, compiles on this host against
/// lib/libpmc/host-include, links with libpmc.a and reads a log with one
/// record of every type.
#[test]
fn pmclog_c_program_reads_every_record_type() {
    let lib = static_library();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_program");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join("pmclog_dump");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let build = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg("-I")
        .arg(manifest)
        .arg("-I")
        .arg(manifest.join("host-include"))
        .arg(manifest.join("tests/c/pmclog_dump.c"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm"])
        .output()
        .expect("run the C compiler");
    assert!(
        build.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let records = common::every_record();
    let log = out_dir.join("every_record.log");
    std::fs::write(&log, common::encode(&records)).unwrap();
    let run = Command::new(&exe).arg(&log).output().unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout), dump_of(&records));
}
