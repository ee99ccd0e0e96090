//! Writes logs the driver wrote on the simulated machine, for
//! tools/pmclog-compat: `driver_logs EVERY SESSION` writes a log with every
//! record type to EVERY and a profiling session's log to SESSION.

#[path = "../../../sys/dev/hwpmc/tests/common/mod.rs"]
mod common;
#[path = "../tests/logs/mod.rs"]
mod logs;

use std::process::ExitCode;

fn main() -> ExitCode {
    let paths: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let [every, session] = paths.as_slice() else {
        eprintln!("usage: driver_logs EVERY-RECORD-LOG SESSION-LOG");
        return ExitCode::from(64);
    };
    for (path, log) in [
        (every, logs::every_record_log()),
        (session, logs::session_log()),
    ] {
        if let Err(e) = std::fs::write(path, log) {
            eprintln!("driver_logs: {}: {e}", path.to_string_lossy());
            return ExitCode::from(73);
        }
    }
    ExitCode::SUCCESS
}
