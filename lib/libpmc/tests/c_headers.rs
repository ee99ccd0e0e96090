//! The C headers. `pmclog.h` compiled against FreeBSD's headers lays
//! `struct pmclog_ev` out as the Rust reader does: every offset and size
//! the Rust side has becomes a static assertion in a C translation unit
//! for FreeBSD on the host's architecture. `pmc.h` builds both against
//! FreeBSD's `<sys/pmc.h>` and against the generated host copy.

use core::mem::{offset_of, size_of};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use pmc::pmclog::*;

macro_rules! layout {
    ($out:ident, $rs:ty, $c:literal { $($f:ident),* $(,)? }) => {{
        writeln!($out, "_Static_assert(sizeof(struct {}) == {}, \"size of {}\");", $c, size_of::<$rs>(), $c).unwrap();
        $(writeln!(
            $out,
            "_Static_assert(offsetof(struct {}, {}) == {}, \"{}.{}\");",
            $c, stringify!($f), offset_of!($rs, $f), $c, stringify!($f)
        ).unwrap();)*
    }};
}

#[test]
fn c_header_has_the_rust_layout() {
    // The Rust side is measured on the host, so the C side is compiled
    // for FreeBSD on the host's architecture.
    let zig_target = match std::env::consts::ARCH {
        "x86_64" => "x86_64-freebsd",
        "aarch64" => "aarch64-freebsd",
        "x86" => "x86-freebsd",
        other => panic!("no FreeBSD target for a {other} host"),
    };
    let mut c = String::from("#include <stddef.h>\n#include \"pmclog.h\"\n");
    layout!(c, PmclogEv, "pmclog_ev" { pl_state, pl_offset, pl_count, pl_ts, pl_type, pl_data, pl_len, pl_u });
    layout!(c, PmclogEvCallchain, "pmclog_ev_callchain" { pl_pid, pl_tid, pl_pmcid, pl_cpuflags, pl_cpuflags2, pl_npc, pl_pc });
    layout!(c, PmclogEvInitialize, "pmclog_ev_initialize" { pl_version, pl_arch, pl_tsc_freq, pl_ts, pl_cpuid });
    layout!(c, PmclogEvMapIn, "pmclog_ev_map_in" { pl_pid, pl_start, pl_pathname });
    layout!(c, PmclogEvMapOut, "pmclog_ev_map_out" { pl_pid, pl_start, pl_end });
    layout!(c, PmclogEvPmcallocate, "pmclog_ev_pmcallocate" { pl_evname, pl_rate, pl_event, pl_flags, pl_pmcid });
    layout!(c, PmclogEvPmcallocatedyn, "pmclog_ev_pmcallocatedyn" { pl_evname, pl_event, pl_flags, pl_pmcid });
    layout!(c, PmclogEvPmcattach, "pmclog_ev_pmcattach" { pl_pmcid, pl_pid, pl_pathname });
    layout!(c, PmclogEvPmcdetach, "pmclog_ev_pmcdetach" { pl_pmcid, pl_pid });
    layout!(c, PmclogEvProccsw, "pmclog_ev_proccsw" { pl_pid, pl_tid, pl_pmcid, pl_value });
    layout!(c, PmclogEvProccreate, "pmclog_ev_proccreate" { pl_pid, pl_flags, pl_pcomm });
    layout!(c, PmclogEvProcexec, "pmclog_ev_procexec" { pl_pid, pl_pmcid, pl_baseaddr, pl_dynaddr, pl_pathname });
    layout!(c, PmclogEvProcexit, "pmclog_ev_procexit" { pl_pid, pl_pmcid, pl_value });
    layout!(c, PmclogEvProcfork, "pmclog_ev_procfork" { pl_oldpid, pl_newpid });
    layout!(c, PmclogEvSysexit, "pmclog_ev_sysexit" { pl_pid });
    layout!(c, PmclogEvThreadcreate, "pmclog_ev_threadcreate" { pl_tid, pl_pid, pl_flags, pl_tdname });
    layout!(c, PmclogEvThreadexit, "pmclog_ev_threadexit" { pl_tid });
    layout!(c, PmclogEvUserdata, "pmclog_ev_userdata" { pl_userdata });
    writeln!(
        c,
        "_Static_assert(PMCLOG_FD_NONE == {PMCLOG_FD_NONE}, \"PMCLOG_FD_NONE\");"
    )
    .unwrap();
    for (name, state) in [
        ("OK", PmclogState::Ok),
        ("EOF", PmclogState::Eof),
        ("REQUIRE_DATA", PmclogState::RequireData),
        ("ERROR", PmclogState::Error),
    ] {
        writeln!(
            c,
            "_Static_assert(PMCLOG_{name} == {}, \"PMCLOG_{name}\");",
            state as u32
        )
        .unwrap();
    }
    // The prototypes must match the exported functions' C types.
    c.push_str(
        "static void *(*const o)(int) = pmclog_open;\n\
         static int (*const f)(void *, char *, int) = pmclog_feed;\n\
         static int (*const r)(void *, struct pmclog_ev *) = pmclog_read;\n\
         static void (*const k)(void *) = pmclog_close;\n\
         void *pmclog_h_uses[] = { (void *)o, (void *)f, (void *)r, (void *)k };\n",
    );

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pmclog_h");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("pmclog_layout.c");
    std::fs::write(&src, &c).unwrap();
    let zig = std::env::var("ABI_CHECK_ZIG_CC").unwrap_or_else(|_| "python3 -m ziglang cc".into());
    let mut words = zig.split_whitespace();
    let out = Command::new(words.next().unwrap())
        .args(words)
        .args(["-target", zig_target, "-c", "-Werror", "-o"])
        .arg(dir.join("pmclog_layout.o"))
        .arg("-I")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")))
        .arg(&src)
        .output()
        .expect("run the zig C compiler (pip install ziglang==0.17.0)");
    assert!(
        out.status.success(),
        "pmclog.h disagrees with the Rust layout:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The same assertions on this host, with the host's copies of
    // <sys/pmc.h> and <sys/pmclog.h>: a program that includes <pmclog.h>
    // compiles here and sees the library's layout.
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(cc)
        .args(["-std=c11", "-Wall", "-Werror", "-c", "-o"])
        .arg(dir.join("pmclog_layout_host.o"))
        .arg("-I")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")))
        .arg("-I")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("host-include"))
        .arg(&src)
        .output()
        .expect("run the host C compiler");
    assert!(
        out.status.success(),
        "pmclog.h on the host disagrees with the Rust layout:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// tests/c/pmclog_dump.c, a pmclog(3) consumer that names the whole public
/// API of <pmclog.h>, compiles for FreeBSD against FreeBSD's own
/// <sys/pmc.h> and <sys/pmclog.h> (c_program.rs builds and runs it on the
/// host).
#[test]
fn pmclog_consumer_builds_on_freebsd() {
    let zig_target = match std::env::consts::ARCH {
        "x86_64" => "x86_64-freebsd",
        "aarch64" => "aarch64-freebsd",
        other => panic!("no FreeBSD target for a {other} host"),
    };
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pmclog_h");
    std::fs::create_dir_all(&dir).unwrap();
    let zig = std::env::var("ABI_CHECK_ZIG_CC").unwrap_or_else(|_| "python3 -m ziglang cc".into());
    let mut words = zig.split_whitespace();
    let out = Command::new(words.next().unwrap())
        .args(words)
        .args(["-target", zig_target, "-c", "-Wall", "-Werror", "-o"])
        .arg(dir.join("pmclog_dump.o"))
        .arg("-I")
        .arg(manifest)
        .arg(manifest.join("tests/c/pmclog_dump.c"))
        .output()
        .expect("run the zig C compiler");
    assert!(
        out.status.success(),
        "pmclog_dump.c for FreeBSD:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `pmc.h` compiles against FreeBSD's own `<sys/pmc.h>` (as on FreeBSD)
/// and against the generated host copy (as on this host), and its structs
/// have the layout of the system call's structs the library fills them
/// from.
#[test]
fn pmc_h_builds_on_freebsd_and_on_the_host() {
    let zig_target = match std::env::consts::ARCH {
        "x86_64" => "x86_64-freebsd",
        "aarch64" => "aarch64-freebsd",
        other => panic!("no FreeBSD target for a {other} host"),
    };
    let mut c = String::from(
        "#include <stddef.h>\n#include <pmc.h>\n\
        _Static_assert(sizeof(struct pmc_cpuinfo) == sizeof(struct pmc_op_getcpuinfo), \"cpuinfo\");\n\
        _Static_assert(sizeof(struct pmc_driverstats) == sizeof(struct pmc_op_getdriverstats), \"driverstats\");\n\
        _Static_assert(offsetof(struct pmc_pmcinfo, pm_pmcs) == offsetof(struct pmc_op_getpmcinfo, pm_pmcs), \"pmcinfo\");\n\
        int (*const alloc_fn)(const char *, enum pmc_mode, uint32_t, int, pmc_id_t *, uint64_t) = pmc_allocate;\n\
        int (*const notify_fn)(pmc_id_t, uint32_t, uint32_t, uint32_t, int, int *) = pmc_notify;\n\
        int (*const extcaps_fn)(uint32_t *) = pmc_extcaps;\n",
    );
    // The notification extension: what read(2) of the descriptor returns,
    // as the kernel writes it, and the constants.
    {
        use uapi::pmc::*;
        layout!(c, PmcNotification, "pmc_notification" {
            pn_pmcid, pn_flags, pn_cpu, pn_spare, pn_notifications, pn_samples, pn_dropped
        });
        for (name, v) in [
            ("PMC_EXTCAP_NOTIFY", PMC_EXTCAP_NOTIFY),
            ("PMC_NOTIFY_BYTES", PMC_NOTIFY_BYTES),
            ("PMC_NOTIFICATION_END", PMC_NOTIFICATION_END),
        ] {
            writeln!(c, "_Static_assert({name} == {v}, \"{name}\");").unwrap();
        }
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pmc_h");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("pmc_h.c");
    std::fs::write(&src, &c).unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let zig = std::env::var("ABI_CHECK_ZIG_CC").unwrap_or_else(|_| "python3 -m ziglang cc".into());
    let mut words = zig.split_whitespace();
    let out = Command::new(words.next().unwrap())
        .args(words)
        .args(["-target", zig_target, "-c", "-Werror", "-o"])
        .arg(dir.join("pmc_h.o"))
        .arg("-I")
        .arg(manifest)
        .arg(&src)
        .output()
        .expect("run the zig C compiler");
    assert!(
        out.status.success(),
        "pmc.h on FreeBSD:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The same with the host compiler and the generated <sys/pmc.h>.
    let host_src = dir.join("pmc_h_host.c");
    std::fs::write(&host_src, &c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(cc)
        .args(["-std=c11", "-Wall", "-Werror", "-c", "-o"])
        .arg(dir.join("pmc_h_host.o"))
        .arg("-I")
        .arg(manifest)
        .arg("-I")
        .arg(manifest.join("host-include"))
        .arg(&host_src)
        .output()
        .expect("run the host C compiler");
    assert!(
        out.status.success(),
        "pmc.h on the host:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
