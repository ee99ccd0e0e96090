//! abi-check: proves that the `uapi` crate lays out the hwpmc(4) and hwt(4)
//! ABI exactly as FreeBSD's real headers do.
//!
//! For each FreeBSD target (amd64, arm64, i386) it
//!  1. writes C files that put every manifest expression (`sizeof`,
//!     `_Alignof`, `offsetof`, constants, ioctl numbers) into an array,
//!     compiles them against FreeBSD's installed headers with the `ziglang`
//!     package's compiler, and reads the array back from the object;
//!  2. builds `core` from the Rust source of the kernel toolchain (Debian's
//!     rustc-web and rust-web-src) for the target, compiles the manifest
//!     crate against it, and reads the Rust values from that object;
//!  3. compares the two, entry by entry.
//!
//! Items the 2026 ABI adds to FreeBSD 15.0's headers are not compared; they
//! are listed, with their sources, in `manifest.rs` (`ADDITIONS_2026`).
//!
//! Then it accounts for every definition of the headers it reads (macros,
//! enumerators, typedefs, structs and unions and their members, as the
//! preprocessor shows them): each is in the manifest, or is one of the
//! exclusions of `coverage.rs`, each with its reason; anything else fails
//! the check, and so does an exclusion that covers nothing.

mod coverage;
mod elf;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use abi_check::{ADDITIONS_2026, AMD64, ARM64, CExpr, Entry, I386, MANIFEST, Targets, Unit};

/// One FreeBSD target.
struct Target {
    name: &'static str,
    bit: Targets,
    rust: &'static str,
    zig: &'static str,
    kernel_cflags: &'static [&'static str],
}

const TARGETS: &[Target] = &[
    Target {
        name: "amd64",
        bit: AMD64,
        rust: "x86_64-unknown-freebsd",
        zig: "x86_64-freebsd",
        kernel_cflags: &[],
    },
    Target {
        name: "arm64",
        bit: ARM64,
        rust: "aarch64-unknown-freebsd",
        zig: "aarch64-freebsd",
        // The kernel reserves x18 for the per-CPU pointer (clang's
        // -ffixed-x18, which zig's driver does not pass through).
        kernel_cflags: &["-Xclang", "-target-feature", "-Xclang", "+reserve-x18"],
    },
    Target {
        name: "i386",
        bit: I386,
        rust: "i686-unknown-freebsd",
        zig: "x86-freebsd",
        kernel_cflags: &[],
    },
];

struct Config {
    targets: Vec<&'static Target>,
    out: PathBuf,
    rustc: PathBuf,
    cargo: PathBuf,
    zig_cc: Vec<String>,
    ck_include: PathBuf,
    selftest: bool,
}

/// A difference between the two sides.
#[derive(Debug, PartialEq, Eq)]
pub struct Mismatch {
    target: &'static str,
    item: String,
    rust: u64,
    c: u64,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}: Rust {} ({:#x}), C {} ({:#x})",
            self.target, self.item, self.rust, self.rust, self.c, self.c
        )
    }
}

fn c_text(c: &CExpr) -> String {
    match *c {
        CExpr::Expr(e) => e.to_string(),
        CExpr::Name(prefix, name) => format!("{prefix}{name}"),
        CExpr::Sizeof(t) => format!("sizeof({t})"),
        CExpr::Alignof(t) => format!("_Alignof({t})"),
        CExpr::Offsetof(t, f) => format!("offsetof({t}, {f})"),
        CExpr::MemberSize(t, f) => format!("sizeof((({t} *)0)->{f})"),
        CExpr::BlockStart(class) => format!("PMC_EV_{class}__BLOCK_START"),
    }
}

/// Whether the C side of `e` exists for `target` in FreeBSD 15.0's headers.
fn compared(e: &Entry, target: Targets) -> bool {
    e.targets & target != 0 && e.addition.is_none()
}

fn mask(v: u64, width: u8) -> u64 {
    if width >= 8 {
        v
    } else {
        v & ((1u64 << (8 * width as u32)) - 1)
    }
}

/// Compares the Rust and C values of every entry that exists on `target`.
pub fn compare(
    entries: &[Entry],
    target: &'static str,
    bit: Targets,
    rust: &[u64],
    c: &[u64],
) -> Vec<Mismatch> {
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if !compared(e, bit) {
            continue;
        }
        let (r, cv) = (mask(rust[i], e.width), mask(c[i], e.width));
        if r != cv {
            out.push(Mismatch {
                target,
                item: c_text(&e.c),
                rust: r,
                c: cv,
            });
        }
    }
    out
}

/// The headers a translation unit of the check includes.
fn includes(unit: Unit) -> &'static str {
    match unit {
        Unit::User => {
            "#include <sys/types.h>\n#include <sys/param.h>\n#include <sys/ioccom.h>\n#include <sys/cpuset.h>\n\
             #include <sys/time.h>\n#include <machine/frame.h>\n#include <sys/pmc.h>\n#include <sys/pmclog.h>\n\
             #include <sys/pmckern.h>\n#include <sys/hwt.h>\n#include <sys/hwt_record.h>\n#include <sys/exterrvar.h>\n\
             #include <stddef.h>\n"
        }
        Unit::Kernel => "#include <sys/param.h>\n#include <sys/systm.h>\n#include <sys/pmc.h>\n",
    }
}

/// The compiler command for `unit` on `target`, without input or output.
fn zig_command(cfg: &Config, target: &Target, unit: Unit) -> Command {
    let mut cmd = Command::new(&cfg.zig_cc[0]);
    cmd.args(&cfg.zig_cc[1..])
        .args(["-target", target.zig, "-w"]);
    if unit == Unit::Kernel {
        cmd.args(["-D_KERNEL", "-DKLD_MODULE", "-ffreestanding", "-isystem"])
            .arg(&cfg.ck_include);
        cmd.args(target.kernel_cflags);
    }
    cmd
}

fn c_source(entries: &[Entry], target: &Target, unit: Unit) -> String {
    let mut s =
        String::from("/* Generated by tools/abi-check; every manifest entry in order. */\n");
    s.push_str(includes(unit));
    let sym = match unit {
        Unit::User => "abi_user_values",
        Unit::Kernel => "abi_kernel_values",
    };
    writeln!(
        s,
        "const unsigned long long {sym}[{}] = {{",
        entries.len().max(1)
    )
    .unwrap();
    for e in entries {
        if compared(e, target.bit) && e.unit == unit {
            writeln!(s, "\t(unsigned long long)({}),", c_text(&e.c)).unwrap();
        } else {
            s.push_str("\t0,\n");
        }
    }
    s.push_str("};\n");
    s
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot run {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn c_values(cfg: &Config, target: &Target, unit: Unit) -> Result<Vec<u64>, String> {
    let dir = cfg.out.join(target.name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (stem, sym) = match unit {
        Unit::User => ("abi-user", "abi_user_values"),
        Unit::Kernel => ("abi-kernel", "abi_kernel_values"),
    };
    // A selftest may run beside a normal check; keep their files apart.
    let suffix = if cfg.selftest { "-selftest" } else { "" };
    let src = dir.join(format!("{stem}{suffix}.c"));
    let obj = dir.join(format!("{stem}{suffix}.o"));
    std::fs::write(&src, c_source(MANIFEST.entries(), target, unit)).map_err(|e| e.to_string())?;
    let mut cmd = zig_command(cfg, target, unit);
    cmd.args(["-c", "-O0"]).arg(&src).arg("-o").arg(&obj);
    run(
        &mut cmd,
        &format!(
            "{}: compiling {} against FreeBSD's headers",
            target.name,
            src.display()
        ),
    )?;
    let bytes = std::fs::read(&obj).map_err(|e| e.to_string())?;
    elf::symbol_u64s(&bytes, sym).map_err(|e| format!("{}: {}: {e}", target.name, obj.display()))
}

/// Builds `core` and `compiler_builtins` for `target` from the kernel
/// toolchain's library source, once; returns the sysroot. Nothing built
/// against it is linked, so compiler_builtins needs none of its optional
/// assembly or C parts.
fn sysroot(cfg: &Config, target: &Target) -> Result<PathBuf, String> {
    let _lock = DirLock::acquire(
        &cfg.out
            .join("sysroot")
            .join(format!("{}.lock", target.rust)),
    )?;
    let root = cfg.out.join("sysroot").join(target.rust);
    let libdir = root.join("lib/rustlib").join(target.rust).join("lib");
    let version = Command::new(&cfg.rustc)
        .arg("-vV")
        .output()
        .map_err(|e| format!("{}: {e}", cfg.rustc.display()))?;
    let stamp = libdir.join("rustc-version");
    let complete = ["core", "compiler_builtins"]
        .iter()
        .all(|n| libdir.join(format!("lib{n}.rlib")).exists());
    if complete && std::fs::read(&stamp).ok().as_deref() == Some(&version.stdout[..]) {
        return Ok(root);
    }
    let sysroot_src = Command::new(&cfg.rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| e.to_string())?;
    let library = PathBuf::from(String::from_utf8_lossy(&sysroot_src.stdout).trim())
        .join("lib/rustlib/src/rust/library");
    let crates = [
        ("core", library.join("core/src/lib.rs"), None),
        (
            "compiler_builtins",
            library.join("compiler-builtins/compiler-builtins/src/lib.rs"),
            Some("feature=\"compiler-builtins\""),
        ),
    ];
    std::fs::create_dir_all(&libdir).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&stamp);
    for (name, src, cfg_flag) in crates {
        if !src.exists() {
            return Err(format!(
                "{} not found: install the rust-web-src package matching {}",
                src.display(),
                cfg.rustc.display()
            ));
        }
        let tmp = cfg.out.join(format!(
            "{name}-build-{}-{}",
            target.rust,
            std::process::id()
        ));
        std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
        eprintln!("abi-check: building {name} for {} (once)", target.rust);
        let mut cmd = Command::new(&cfg.rustc);
        // Building the standard library needs unstable flags; confined to
        // this command.
        cmd.env("RUSTC_BOOTSTRAP", "1")
            .args([
                "--target",
                target.rust,
                "--edition",
                "2024",
                "--crate-name",
                name,
                "--crate-type",
                "rlib",
            ])
            .args([
                "-Zforce-unstable-if-unmarked",
                "-Copt-level=0",
                "-Cdebuginfo=0",
                "--sysroot",
            ])
            .arg(&root)
            .arg("--out-dir")
            .arg(&tmp)
            .arg(&src);
        if let Some(flag) = cfg_flag {
            cmd.args(["--cfg", flag]);
        }
        run(&mut cmd, &format!("building {name} for {}", target.rust))?;
        let file = format!("lib{name}.rlib");
        std::fs::rename(tmp.join(&file), libdir.join(&file)).map_err(|e| e.to_string())?;
        let _ = std::fs::remove_dir_all(&tmp);
    }
    std::fs::write(&stamp, &version.stdout).map_err(|e| e.to_string())?;
    Ok(root)
}

/// A lock held while a sysroot is built, so that concurrent checks wait
/// instead of building the same files at once. A lock left by a process
/// that no longer exists is taken over.
struct DirLock(PathBuf);

impl DirLock {
    fn acquire(path: &Path) -> Result<DirLock, String> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        for _ in 0..1200 {
            match std::fs::create_dir(path) {
                Ok(()) => {
                    std::fs::write(path.join("pid"), std::process::id().to_string())
                        .map_err(|e| e.to_string())?;
                    return Ok(DirLock(path.to_path_buf()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let owner = std::fs::read_to_string(path.join("pid")).unwrap_or_default();
                    let alive = !owner.is_empty() && Path::new("/proc").join(owner.trim()).exists();
                    if !alive && !owner.is_empty() {
                        let _ = std::fs::remove_dir_all(path);
                        continue;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(500));
                }
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
        Err(format!("{}: still locked after 10 minutes", path.display()))
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rust_values(cfg: &Config, target: &Target) -> Result<Vec<u64>, String> {
    let root = sysroot(cfg, target)?;
    let target_dir = cfg.out.join(if cfg.selftest {
        "cargo-selftest"
    } else {
        "cargo"
    });
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let mut cmd = Command::new(&cfg.cargo);
    cmd.env("RUSTC", &cfg.rustc)
        .env("RUSTFLAGS", format!("--sysroot={}", root.display()))
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .args([
            "rustc",
            "--quiet",
            "-p",
            "abi-check",
            "--lib",
            "--target",
            target.rust,
            "--manifest-path",
        ])
        .arg(&workspace)
        .arg("--target-dir")
        .arg(&target_dir);
    if cfg.selftest {
        cmd.args(["--features", "selftest-wrong-offset"]);
    }
    cmd.args(["--", "--emit=obj", "-Ccodegen-units=1"]);
    run(
        &mut cmd,
        &format!(
            "{}: compiling the manifest with {}",
            target.name,
            cfg.rustc.display()
        ),
    )?;
    let deps = target_dir.join(target.rust).join("debug/deps");
    let obj = std::fs::read_dir(&deps)
        .map_err(|e| format!("{}: {e}", deps.display()))?
        .filter_map(|d| d.ok().map(|d| d.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.starts_with("abi_check-") && name.ends_with(".o")
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .ok_or_else(|| format!("{}: no manifest object in {}", target.name, deps.display()))?;
    let bytes = std::fs::read(&obj).map_err(|e| e.to_string())?;
    let count = elf::symbol_u64s(&bytes, "UAPI_ABI_COUNT")
        .map_err(|e| format!("{}: {e}", obj.display()))?;
    let values = elf::symbol_u64s(&bytes, "UAPI_ABI_VALUES")
        .map_err(|e| format!("{}: {e}", obj.display()))?;
    if count.first().copied() != Some(MANIFEST.len() as u64) {
        return Err(format!(
            "{}: the target manifest has {count:?} entries, the host one {}",
            target.name,
            MANIFEST.len()
        ));
    }
    Ok(values)
}

fn check_target(cfg: &Config, target: &'static Target) -> Result<(usize, Vec<Mismatch>), String> {
    let user = c_values(cfg, target, Unit::User)?;
    let kernel = c_values(cfg, target, Unit::Kernel)?;
    let rust = rust_values(cfg, target)?;
    let entries = MANIFEST.entries();
    let c: Vec<u64> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            if e.unit == Unit::Kernel {
                kernel[i]
            } else {
                user[i]
            }
        })
        .collect();
    let n = entries.iter().filter(|e| compared(e, target.bit)).count();
    // Every value of both sides, for people and for the tool's own tests.
    let mut report = String::from("# item\trust\tc\tcompared\n");
    for (i, e) in entries.iter().enumerate() {
        let (r, cv) = (mask(rust[i], e.width), mask(c[i], e.width));
        writeln!(
            report,
            "{}\t{r}\t{cv}\t{}",
            c_text(&e.c),
            if compared(e, target.bit) { "yes" } else { "no" }
        )
        .unwrap();
    }
    let path = cfg.out.join(target.name).join(if cfg.selftest {
        "values-selftest.tsv"
    } else {
        "values.tsv"
    });
    std::fs::write(&path, report).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((n, compare(entries, target.name, target.bit, &rust, &c)))
}

/// The manifest entry the selftest's coverage check goes without.
const SELFTEST_LEFT_OUT: &str = "PMC_EV_CMN600_PMU_LAST";

/// What the coverage check found on one target.
struct Coverage {
    /// Definitions of the ABI headers.
    items: usize,
    /// Accounted for by the manifest.
    in_manifest: usize,
    /// Hits of each entry of `coverage::EXCLUSIONS`.
    excluded: Vec<usize>,
    /// Kernel-only definitions.
    kernel_only: usize,
    /// Neither compared nor excluded.
    missing: Vec<coverage::Item>,
}

/// The ABI headers' definitions as `unit` sees them on `target`.
fn header_items(
    cfg: &Config,
    target: &Target,
    unit: Unit,
) -> Result<BTreeSet<coverage::Item>, String> {
    let dir = cfg.out.join(target.name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let stem = match unit {
        Unit::User => "coverage-user",
        Unit::Kernel => "coverage-kernel",
    };
    let suffix = if cfg.selftest { "-selftest" } else { "" };
    let src = dir.join(format!("{stem}{suffix}.c"));
    let out = dir.join(format!("{stem}{suffix}.i"));
    std::fs::write(&src, includes(unit)).map_err(|e| e.to_string())?;
    let mut cmd = zig_command(cfg, target, unit);
    cmd.args(["-E", "-dD"]).arg(&src).arg("-o").arg(&out);
    run(
        &mut cmd,
        &format!("{}: preprocessing FreeBSD's headers", target.name),
    )?;
    let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(coverage::scan(&text))
}

/// Accounts for every definition of the ABI headers on `target`.
fn check_coverage(cfg: &Config, target: &Target) -> Result<Coverage, String> {
    let user = header_items(cfg, target, Unit::User)?;
    let kernel = header_items(cfg, target, Unit::Kernel)?;
    let mut texts: BTreeSet<String> = MANIFEST
        .entries()
        .iter()
        .filter(|e| e.targets & target.bit != 0)
        .map(|e| c_text(&e.c))
        .collect();
    // The selftest leaves one constant out, which the check must report.
    if cfg.selftest {
        texts.remove(SELFTEST_LEFT_OUT);
    }
    let words = coverage::words(&texts);
    let mut report = Coverage {
        items: 0,
        in_manifest: 0,
        excluded: vec![0; coverage::EXCLUSIONS.len()],
        kernel_only: 0,
        missing: Vec::new(),
    };
    let kernel_only: Vec<&coverage::Item> = kernel.iter().filter(|i| !user.contains(i)).collect();
    for item in user.iter().chain(kernel_only.iter().copied()) {
        report.items += 1;
        if coverage::in_manifest(item, &texts, &words) {
            report.in_manifest += 1;
        } else if !user.contains(item) {
            report.kernel_only += 1;
        } else if let Some(i) = coverage::EXCLUSIONS.iter().position(|x| x.covers(item)) {
            report.excluded[i] += 1;
        } else {
            report.missing.push(item.clone());
        }
    }
    Ok(report)
}

fn usage() -> ! {
    eprintln!(
        "usage: abi-check [--target amd64|arm64|i386]... [--out DIR] [--rustc PATH] [--cargo PATH] [--selftest] [--list]\n\
         \n\
         Compares uapi with FreeBSD's headers. Environment: ABI_CHECK_ZIG_CC (default \"python3 -m ziglang cc\"),\n\
         ABI_CHECK_CK_INCLUDE (directory holding Concurrency Kit's ck_*.h, default /usr/include)."
    );
    std::process::exit(2);
}

fn config() -> Result<(Config, bool), String> {
    let mut args = std::env::args().skip(1);
    let mut targets = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Under CARGO_TARGET_DIR when it is set (relative to the top of the
    // tree, as the tools' scripts take it), as cargo's own builds.
    let mut out = root
        .join(std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into()))
        .join("abi-check");
    let mut rustc =
        PathBuf::from(std::env::var_os("KERNEL_RUSTC").unwrap_or_else(|| "/usr/bin/rustc".into()));
    let mut cargo =
        PathBuf::from(std::env::var_os("KERNEL_CARGO").unwrap_or_else(|| "/usr/bin/cargo".into()));
    let mut selftest = false;
    let mut list = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--target" => {
                let name = args.next().unwrap_or_else(|| usage());
                let t = TARGETS
                    .iter()
                    .find(|t| t.name == name)
                    .ok_or_else(|| format!("unknown target {name:?}"))?;
                targets.push(t);
            }
            "--out" => out = args.next().unwrap_or_else(|| usage()).into(),
            "--rustc" => rustc = args.next().unwrap_or_else(|| usage()).into(),
            "--cargo" => cargo = args.next().unwrap_or_else(|| usage()).into(),
            "--selftest" => selftest = true,
            "--list" => list = true,
            _ => usage(),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.iter().collect();
    }
    let zig = std::env::var("ABI_CHECK_ZIG_CC").unwrap_or_else(|_| "python3 -m ziglang cc".into());
    let zig_cc: Vec<String> = zig.split_whitespace().map(String::from).collect();
    if zig_cc.is_empty() {
        return Err("ABI_CHECK_ZIG_CC is empty".into());
    }
    // Kernel-mode sys/pmc.h needs ck_epoch.h; give the compiler only the
    // ck headers, never the host's libc.
    let ck_src = PathBuf::from(
        std::env::var_os("ABI_CHECK_CK_INCLUDE").unwrap_or_else(|| "/usr/include".into()),
    );
    let ck_include = out.join("ck-include");
    if !list {
        link_ck_headers(&ck_src, &ck_include)?;
    }
    Ok((
        Config {
            targets,
            out,
            rustc,
            cargo,
            zig_cc,
            ck_include,
            selftest,
        },
        list,
    ))
}

fn link_ck_headers(src: &Path, dst: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dst).map_err(|e| format!("{}: {e}", dst.display()))?;
    let mut found = false;
    for entry in std::fs::read_dir(src).map_err(|e| format!("{}: {e}", src.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if (name.starts_with("ck_") && name.ends_with(".h")) || name == "gcc" {
            found |= name == "ck_epoch.h";
            let link = dst.join(&name);
            if std::fs::read_link(&link).ok().as_deref() == Some(path.as_path()) {
                continue;
            }
            let _ = std::fs::remove_file(&link);
            match std::os::unix::fs::symlink(&path, &link) {
                // Another check running at the same time made it.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                r => r.map_err(|e| format!("{}: {e}", link.display()))?,
            }
        }
    }
    if !found {
        return Err(format!(
            "no ck_epoch.h in {}: install Concurrency Kit (Debian: libck-dev)",
            src.display()
        ));
    }
    Ok(())
}

fn main() -> ExitCode {
    let (cfg, list) = match config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("abi-check: {e}");
            return ExitCode::from(2);
        }
    };
    if list {
        for e in MANIFEST.entries() {
            let targets: Vec<&str> = TARGETS
                .iter()
                .filter(|t| e.targets & t.bit != 0)
                .map(|t| t.name)
                .collect();
            let origin = e.addition.map_or("FreeBSD 15.0", |a| a.source);
            println!("{}\t{}\t{}", c_text(&e.c), targets.join(","), origin);
        }
        for x in coverage::EXCLUSIONS {
            println!(
                "excluded: {} {} ({}): {}",
                x.kind_word(),
                x.names,
                x.header,
                x.reason
            );
        }
        println!(
            "excluded: kernel-only definitions: {}",
            coverage::KERNEL_ONLY
        );
        return ExitCode::SUCCESS;
    }
    let mut failed = false;
    let mut hits = vec![0; coverage::EXCLUSIONS.len()];
    for target in &cfg.targets {
        match check_target(&cfg, target) {
            Ok((n, mismatches)) => {
                for m in &mismatches {
                    println!("MISMATCH {m}");
                }
                println!(
                    "{}: {n} items compared with FreeBSD's headers, {} mismatches",
                    target.name,
                    mismatches.len()
                );
                failed |= !mismatches.is_empty();
            }
            Err(e) => {
                eprintln!("abi-check: {e}");
                failed = true;
            }
        }
        match check_coverage(&cfg, target) {
            Ok(c) => {
                for item in &c.missing {
                    println!("NOT COMPARED {}: {item}, and not excluded", target.name);
                }
                let excluded: usize = c.excluded.iter().sum();
                println!(
                    "{}: the headers define {} items: {} in the manifest, {} excluded with a reason, \
                     {} kernel-only, {} unaccounted",
                    target.name,
                    c.items,
                    c.in_manifest,
                    excluded,
                    c.kernel_only,
                    c.missing.len()
                );
                for (h, n) in hits.iter_mut().zip(&c.excluded) {
                    *h += n;
                }
                failed |= !c.missing.is_empty();
            }
            Err(e) => {
                eprintln!("abi-check: {e}");
                failed = true;
            }
        }
    }
    println!("deliberate exclusions (defined by the headers, not compared):");
    for (x, n) in coverage::EXCLUSIONS.iter().zip(&hits) {
        println!(
            "  {} {} ({}) [{n} on the targets checked]: {}",
            x.kind_word(),
            x.names,
            x.header,
            x.reason
        );
        // One that covers nothing any more is stale (arm64-only ones need
        // arm64 among the targets).
        if *n == 0 && cfg.targets.len() == TARGETS.len() {
            println!("STALE EXCLUSION: it covers nothing on any target");
            failed = true;
        }
    }
    println!("  kernel-only definitions: {}", coverage::KERNEL_ONLY);
    let added: BTreeSet<&str> = MANIFEST
        .entries()
        .iter()
        .filter_map(|e| e.addition.map(|a| a.what))
        .collect();
    println!("deliberate 2026 additions (not in FreeBSD 15.0's headers, not compared):");
    for a in ADDITIONS_2026 {
        let n = MANIFEST
            .entries()
            .iter()
            .filter(|e| e.addition.is_some_and(|x| x.what == a.what))
            .count();
        println!("  {} [{} entries; from {}]", a.what, n, a.source);
    }
    debug_assert!(added.len() <= ADDITIONS_2026.len());
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_reports_the_item_and_both_values() {
        let entries = MANIFEST.entries();
        let rust: Vec<u64> = entries.iter().map(|e| e.value).collect();
        let mut c = rust.clone();
        // Every entry equal: nothing to report.
        assert!(compare(entries, "amd64", AMD64, &rust, &c).is_empty());
        let i = entries
            .iter()
            .position(|e| e.c == CExpr::Offsetof("struct pmc_op_pmcallocate", "pm_count"))
            .expect("pm_count offset is in the manifest");
        c[i] = 28;
        let m = compare(entries, "amd64", AMD64, &rust, &c);
        assert_eq!(m.len(), 1);
        assert_eq!(
            m[0].to_string(),
            "amd64: offsetof(struct pmc_op_pmcallocate, pm_count): Rust 32 (0x20), C 28 (0x1c)"
        );
    }

    #[test]
    fn additions_and_other_targets_are_not_compared() {
        let entries = MANIFEST.entries();
        let rust: Vec<u64> = entries.iter().map(|e| e.value).collect();
        let mut c = rust.clone();
        let getcaps = entries
            .iter()
            .position(|e| e.c == CExpr::Name("PMC_OP_", "GETCAPS"))
            .unwrap();
        c[getcaps] = 99;
        let p4 = entries
            .iter()
            .position(|e| e.c == CExpr::Expr("PMC_MDEP_CLASS_INDEX_P4"))
            .unwrap();
        c[p4] = 9;
        assert!(
            compare(entries, "amd64", AMD64, &rust, &c[..]).len() == 1,
            "PMC_MDEP_CLASS_INDEX_P4 is compared on amd64"
        );
        assert!(
            compare(entries, "i386", I386, &rust, &c[..]).is_empty(),
            "i386's pmc_mdep.h has no PMC_MDEP_CLASS_INDEX_P4"
        );
        // hwt's header is compared on i386 too.
        let hwt = entries
            .iter()
            .position(|e| e.c == CExpr::Sizeof("struct hwt_alloc"))
            .unwrap();
        c[hwt] = 1;
        assert_eq!(compare(entries, "i386", I386, &rust, &c[..]).len(), 1);
    }

    #[test]
    fn narrow_constants_compare_in_their_width() {
        // PMC_CPU_ANY is ~0 in C (an int, so all ones when widened) and
        // 0xFFFFFFFF in Rust; both are the same 32-bit value.
        let entries = MANIFEST.entries();
        let i = entries
            .iter()
            .position(|e| e.c == CExpr::Expr("PMC_CPU_ANY"))
            .unwrap();
        let rust: Vec<u64> = entries.iter().map(|e| e.value).collect();
        let mut c = rust.clone();
        c[i] = u64::MAX;
        assert!(compare(entries, "amd64", AMD64, &rust, &c).is_empty());
    }

    #[test]
    fn generated_c_lists_every_entry_in_order() {
        let t = &TARGETS[0];
        let src = c_source(MANIFEST.entries(), t, Unit::User);
        let lines = src.lines().filter(|l| l.starts_with('\t')).count();
        assert_eq!(lines, MANIFEST.len());
        assert!(
            src.contains("(unsigned long long)(offsetof(struct pmc_op_pmcallocate, pm_count)),")
        );
        assert!(
            !src.contains("PMC_OP_GETCAPS"),
            "additions are not compiled"
        );
        assert!(
            !src.contains("PMC_HASH_SIZE"),
            "kernel constants go to the kernel unit"
        );
        assert!(
            c_source(MANIFEST.entries(), t, Unit::Kernel)
                .contains("(unsigned long long)(PMC_HASH_SIZE),")
        );
    }
}
