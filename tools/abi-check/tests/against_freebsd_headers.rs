//! Runs the real check: Rust objects built for each FreeBSD target against
//! objects compiled from FreeBSD's headers. Needs the kernel toolchain
//! (rustc-web, cargo-web, rust-web-src), python3 with ziglang==0.17.0 and
//! libck-dev, which `.ci/run` installs.

use std::path::PathBuf;
use std::process::Command;

fn abi_check(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_abi-check"))
        .args(args)
        .output()
        .expect("run abi-check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn report(target: &str, file: &str) -> Vec<(String, u64, u64, bool)> {
    // Where abi-check writes: under CARGO_TARGET_DIR, relative to the top.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into()))
        .join("abi-check")
        .join(target)
        .join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3] == "yes",
            )
        })
        .collect()
}

fn value(rows: &[(String, u64, u64, bool)], item: &str) -> (u64, u64) {
    // An item may appear once per architecture; take the compared one.
    let row = rows
        .iter()
        .find(|r| r.0 == item && r.3)
        .unwrap_or_else(|| panic!("{item} not compared"));
    (row.1, row.2)
}

#[test]
fn uapi_matches_freebsd_headers_on_amd64_arm64_and_i386() {
    let (ok, text) = abi_check(&["--target", "amd64", "--target", "arm64", "--target", "i386"]);
    assert!(ok, "abi-check failed:\n{text}");
    for t in ["amd64", "arm64", "i386"] {
        assert!(
            text.contains(&format!("{t}: ")) && text.contains(" 0 mismatches"),
            "{text}"
        );
    }
    // The facts the issue names, read from what was compared.
    let amd64 = report("amd64", "values.tsv");
    assert_eq!(value(&amd64, "sizeof(struct pmc_op_pmcallocate)"), (72, 72));
    assert_eq!(value(&amd64, "PMC_OP_PMCALLOCATE"), (7, 7));
    assert_eq!(value(&amd64, "HWT_IOC_ALLOC"), (0x8040_4200, 0x8040_4200));
    assert_eq!(
        value(&amd64, "sizeof(struct hwt_record_user_entry)"),
        (1056, 1056)
    );
    let i386 = report("i386", "values.tsv");
    assert_eq!(
        value(&i386, "offsetof(struct pmc_op_pmcallocate, pm_count)"),
        (28, 28)
    );
    assert_eq!(value(&i386, "sizeof(struct pmclog_map_out)"), (32, 32));
    let arm64 = report("arm64", "values.tsv");
    assert_eq!(
        value(&arm64, "offsetof(union pmc_md_op_pmcallocate, pm_dmc620)"),
        (0, 0)
    );
    assert_eq!(
        value(&arm64, "sizeof(union pmc_md_op_pmcallocate)"),
        (32, 32)
    );
    // Every item of the manifest that exists on a target was compared.
    assert!(amd64.iter().filter(|r| r.3).count() > 2500);
}

#[test]
fn a_deliberately_wrong_offset_is_caught() {
    // The selftest build moves pmc_op_pmcrw.pm_value from 8 to 16.
    let (ok, text) = abi_check(&["--target", "amd64", "--selftest"]);
    assert!(!ok, "abi-check passed with a wrong offset:\n{text}");
    assert!(
        text.contains(
            "MISMATCH amd64: offsetof(struct pmc_op_pmcrw, pm_value): Rust 16 (0x10), C 8 (0x8)"
        ),
        "the mismatch is not named with both values:\n{text}"
    );
    assert!(
        text.contains("amd64: ") && text.contains(" 1 mismatches"),
        "{text}"
    );
}
