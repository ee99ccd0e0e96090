//! Runs bindgen over libipt's `intel-pt.h` at build time (nothing
//! generated is committed) and links `libipt`.
//!
//! The header is `<intel-pt.h>` (Debian's libipt-dev) or, on FreeBSD,
//! `<libipt/intel-pt.h>`. `IPT_INCLUDE_DIR` names the directory to look
//! in first (for a sysroot or a libipt built from source), and
//! `IPT_LIB_DIR` where `libipt.so` is.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=IPT_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=IPT_LIB_DIR");
    let freebsd = env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("freebsd");
    let header = if freebsd {
        "#include <libipt/intel-pt.h>\n"
    } else {
        "#include <intel-pt.h>\n"
    };
    let mut args = Vec::new();
    if let Some(dir) = env::var_os("IPT_INCLUDE_DIR") {
        args.push(format!("-I{}", PathBuf::from(dir).display()));
    }
    let bindings = bindgen::Builder::default()
        .header_contents("ipt_wrapper.h", header)
        .clang_args(&args)
        .allowlist_function("pt_.*")
        .allowlist_type("pt_.*")
        .allowlist_var("pt_.*")
        .layout_tests(false)
        .derive_default(true)
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "ipt: bindgen over intel-pt.h failed ({e}); install libipt-dev \
                 (Debian) or libipt (FreeBSD), or set IPT_INCLUDE_DIR"
            )
        });
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it"));
    bindings
        .write_to_file(out.join("intel_pt.rs"))
        .expect("write intel_pt.rs");
    if let Some(dir) = env::var_os("IPT_LIB_DIR") {
        println!(
            "cargo:rustc-link-search=native={}",
            PathBuf::from(dir).display()
        );
    }
    println!("cargo:rustc-link-lib=dylib=ipt");
}
