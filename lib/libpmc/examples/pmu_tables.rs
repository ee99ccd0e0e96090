//! Prints the PMU event tables the library was built with, one line per
//! entry: the model's name, the entry's index and its event name (empty
//! for an entry without one). tools/pmu-compat compares this with the
//! tables FreeBSD's jevents generates from the same JSON files.

use pmc::libpmc_pmu_util::PMU_MODELS;
use std::io::Write;

fn main() {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for model in PMU_MODELS {
        for (index, e) in model.events.iter().enumerate() {
            let name = e.name.to_str().unwrap_or("?");
            writeln!(out, "{}\t{index}\t{name}", model.name).expect("write the tables");
        }
    }
}
