//! With the `freebsd` feature: runs bindgen over `kpi_bindings.h` (the
//! glue's declarations and the kernel's lock structures) with the
//! module's own CFLAGS, which the make glue passes in `KERN_CFLAGS`.
//! Nothing generated is committed.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // spsc.rs is also compiled with loom's types (sys/rust/kpi/loom).
    println!("cargo:rustc-check-cfg=cfg(loom)");
    #[cfg(feature = "freebsd")]
    freebsd::bindings();
}

#[cfg(feature = "freebsd")]
mod freebsd {
    use std::env;
    use std::path::PathBuf;

    pub fn bindings() {
        println!("cargo:rerun-if-env-changed=KERN_CFLAGS");
        println!("cargo:rerun-if-changed=kpi_bindings.h");
        println!("cargo:rerun-if-changed=kpi_glue.h");
        let cflags = env::var("KERN_CFLAGS").unwrap_or_else(|_| {
            panic!(
                "kpi (feature freebsd): KERN_CFLAGS must hold the kernel module's \
                 CFLAGS (the make glue sets it from ${{CFLAGS}})"
            )
        });
        let here = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
        // The kernel's flags are for the C compiler of the module's
        // target; bindgen's clang parses with them as they are.
        let mut args: Vec<String> = cflags.split_whitespace().map(str::to_owned).collect();
        args.push(format!("-I{}", here.display()));
        let target = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
            Ok("x86_64") => "x86_64-unknown-freebsd",
            Ok("aarch64") => "aarch64-unknown-freebsd",
            other => panic!("kpi: no FreeBSD kernel target for {other:?}"),
        };
        if !args
            .iter()
            .any(|a| a.starts_with("--target") || a == "-target")
        {
            args.push(format!("--target={target}"));
        }
        let bindings = bindgen::Builder::default()
            .header(here.join("kpi_bindings.h").to_string_lossy())
            .clang_args(&args)
            .use_core()
            .ctypes_prefix("core::ffi")
            .layout_tests(false)
            .allowlist_function("kpi_.*")
            .allowlist_type("kpi_.*")
            .allowlist_type("mtx")
            .allowlist_type("sx")
            .allowlist_var("KPI_.*")
            .derive_default(false)
            .generate()
            .unwrap_or_else(|e| panic!("kpi: bindgen over kpi_bindings.h failed: {e}"));
        let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it"));
        bindings
            .write_to_file(out.join("kpi_bindings.rs"))
            .expect("write kpi_bindings.rs");
    }
}
