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
        // Every definition of the headers is compared or excluded.
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{t}: the headers define "))
                    && l.ends_with(" 0 unaccounted")),
            "{text}"
        );
    }
    assert!(!text.contains("STALE EXCLUSION"), "{text}");
    // The items this work added are compared: a block start, a record's
    // header, the union of records, hwt on i386.
    let i386 = report("i386", "values.tsv");
    assert_eq!(value(&i386, "PMC_EV_TSC__BLOCK_START"), (0xFFF, 0xFFF));
    assert_eq!(
        value(&i386, "offsetof(struct pmclog_map_out, pl_header)"),
        (0, 0)
    );
    assert_eq!(
        value(&i386, "sizeof(((union pmclog_entry *)0)->pl_cc)"),
        (2080, 2080)
    );
    assert_eq!(value(&i386, "sizeof(struct hwt_alloc)"), (32, 32));
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
fn deliberate_changes_are_caught() {
    // The selftest build moves pmc_op_pmcrw.pm_value from 8 to 16, the
    // CMN-600 event block by 0x10, pmclog_pmcdetach's pl_header to 4, the
    // size of pmclog_entry's pl_u to another record's, and on i386 lays
    // out hwt_alloc as with 64-bit pointers; its coverage check goes
    // without the manifest's PMC_EV_CMN600_PMU_LAST.
    let (ok, text) = abi_check(&["--target", "amd64", "--target", "i386", "--selftest"]);
    assert!(!ok, "abi-check passed with deliberate changes:\n{text}");
    for t in ["amd64", "i386"] {
        for want in [
            "offsetof(struct pmc_op_pmcrw, pm_value): Rust 16 (0x10), C 8 (0x8)",
            "PMC_EV_CMN600_PMU__BLOCK_START: Rust 83471 (0x1460f), C 83455 (0x145ff)",
            "offsetof(struct pmclog_pmcdetach, pl_header): Rust 4 (0x4), C 0 (0x0)",
            "sizeof(((union pmclog_entry *)0)->pl_u): Rust 32 (0x20), C 24 (0x18)",
        ] {
            assert!(
                text.contains(&format!("MISMATCH {t}: {want}")),
                "{t}: no mismatch {want}:\n{text}"
            );
        }
        assert!(
            text.contains(&format!(
                "NOT COMPARED {t}: macro PMC_EV_CMN600_PMU_LAST (dev/hwpmc/pmc_events.h), and not excluded"
            )),
            "{text}"
        );
        assert!(text.contains(" 1 unaccounted"), "{text}");
    }
    assert!(
        text.contains(
            "MISMATCH i386: offsetof(struct hwt_alloc, backend_name): Rust 32 (0x20), C 20 (0x14)"
        ),
        "{text}"
    );
    assert!(
        text.contains("amd64: ") && text.contains(" 4 mismatches"),
        "{text}"
    );
    assert!(
        text.contains("i386: ") && text.contains(" 5 mismatches"),
        "{text}"
    );
}
