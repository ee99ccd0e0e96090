//! Builds what ksim's CPUs run and checks what they link against:
//!
//! - the workload programs in `workloads/`, compiled for FreeBSD targets
//!   with clang and ld.lld (`$KSIM_CLANG`, `$KSIM_LLD`; by default
//!   `clang-19` and `ld.lld-19`, which tools/setup installs) into
//!   `$OUT_DIR/workloads/<arch>/<program>`;
//! - `cpu/unicorn_check.c`, compiled (not linked) against the installed
//!   Unicorn headers, so that a constant `cpu/unicorn.rs` declares with
//!   another value than the library's fails the build.

// A host build script: the kernel allocation lints of sys/clippy.toml do
// not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Programs: each is `<name>.c` linked with the crt, the system call
/// stubs and the small library.
const PROGRAMS: &[&str] = &[
    "sort", "calls", "recurse", "syscalls", "faults", "threads", "mapobj", "rdpmc",
];

/// Shared objects: file name, source, entry symbol.
const SHARED_OBJECTS: &[(&str, &str, &str)] = &[("libsecond.so", "second.c", "second_entry")];

/// FreeBSD's architecture name, clang's target triple.
const ARCHES: &[(&str, &str)] = &[
    ("amd64", "x86_64-unknown-freebsd"),
    ("arm64", "aarch64-unknown-freebsd"),
];

fn run(cmd: &mut Command) {
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("ksim build: cannot run {cmd:?}: {e} (tools/setup installs clang-19 and lld-19)")
    });
    assert!(status.success(), "ksim build: {cmd:?} failed: {status}");
}

fn main() {
    let src = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let clang = env::var("KSIM_CLANG").unwrap_or_else(|_| "clang-19".into());
    let lld = env::var("KSIM_LLD").unwrap_or_else(|_| "ld.lld-19".into());
    println!("cargo::rerun-if-env-changed=KSIM_CLANG");
    println!("cargo::rerun-if-env-changed=KSIM_LLD");
    println!("cargo::rerun-if-changed=cpu/unicorn_check.c");
    println!("cargo::rerun-if-changed=workloads");

    // The Unicorn constants, against the installed headers.
    let check = Command::new(&clang)
        .args(["-fsyntax-only", "-Werror"])
        .arg(src.join("cpu/unicorn_check.c"))
        .status();
    assert!(
        check.as_ref().is_ok_and(|s| s.success()),
        "ksim build: cpu/unicorn_check.c does not compile against the Unicorn headers \
         ({check:?}): ksim's CPUs need Unicorn 2 (Debian: libunicorn-dev) and clang-19, \
         which tools/setup installs; a constant of cpu/unicorn.rs that differs from the \
         headers' fails here too"
    );

    let workloads = src.join("workloads");
    for (arch, triple) in ARCHES {
        let dir = out.join("workloads").join(arch);
        std::fs::create_dir_all(&dir).expect("workloads output directory");
        let common = [
            format!("--target={triple}"),
            "-ffreestanding".into(),
            "-nostdlib".into(),
            "-fno-builtin".into(),
            "-fno-omit-frame-pointer".into(),
            "-mno-omit-leaf-frame-pointer".into(),
            "-fno-stack-protector".into(),
            "-fno-pic".into(),
            "-O2".into(),
            "-g".into(),
            "-Wall".into(),
            "-Wextra".into(),
            "-Werror".into(),
        ];
        let compile = |source: &Path, object: &Path| {
            run(Command::new(&clang)
                .args(&common)
                .arg("-c")
                .arg(source)
                .arg("-o")
                .arg(object));
        };
        let mut runtime = Vec::new();
        for name in [
            format!("crt0_{arch}.S"),
            format!("syscalls_{arch}.S"),
            "ksim_workload.c".into(),
        ] {
            let object = dir.join(format!("{name}.o"));
            compile(&workloads.join(&name), &object);
            runtime.push(object);
        }
        // The shared object mapobj maps at run time: position-independent,
        // its entry point the function it exports.
        for (object, source, entry) in SHARED_OBJECTS {
            let compiled = dir.join(format!("{object}.o"));
            let pic: Vec<String> = common
                .iter()
                .map(|f| {
                    if f == "-fno-pic" {
                        "-fPIC".into()
                    } else {
                        f.clone()
                    }
                })
                .collect();
            run(Command::new(&clang)
                .args(&pic)
                .arg("-c")
                .arg(workloads.join(source))
                .arg("-o")
                .arg(&compiled));
            run(Command::new(&lld)
                .args(["-shared", "--build-id=none", "-e", entry, "-o"])
                .arg(dir.join(object))
                .arg(&compiled));
        }
        for program in PROGRAMS {
            let object = dir.join(format!("{program}.o"));
            compile(&workloads.join(format!("{program}.c")), &object);
            run(Command::new(&lld)
                .args(["-static", "--build-id=none", "-o"])
                .arg(dir.join(program))
                .args(&runtime)
                .arg(&object));
        }
    }
    println!(
        "cargo::rustc-env=KSIM_WORKLOADS_DIR={}",
        out.join("workloads").display()
    );
}
