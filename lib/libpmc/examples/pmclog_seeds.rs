//! Writes seed logs for the pmclog_read fuzz target: one file per record
//! type and one log holding them all, each prefixed with the target's
//! chunk-size byte. The records are those of the pmclog tests.
//!
//! Usage: pmclog_seeds DIR

#[path = "../tests/common/mod.rs"]
mod common;

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: pmclog_seeds DIR");
        std::process::exit(64);
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let records = common::every_record();
    let mut all = vec![7u8];
    all.extend_from_slice(&common::encode(&records));
    for (i, rec) in records.iter().enumerate() {
        let mut one = vec![3u8];
        one.extend_from_slice(&common::encode(std::slice::from_ref(rec)));
        let path = dir.join(format!("{:02}-{:?}", i, rec.kind()));
        std::fs::write(&path, one).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let path = dir.join("all-records");
    std::fs::write(&path, all).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
