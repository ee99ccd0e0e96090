//! Flame graphs (`-X file`, an extension): the folded stacks of `-x`
//! drawn as an interactive SVG flame graph by inferno, the Rust port of
//! FlameGraph: a box per function on each distinct stack, its width the
//! share of the samples that went through it, callers below callees.

use std::io::{self, Write};

use libpmcstat::libpmcstat_logging::{Analysis, Plugin, Sample};

use crate::pmcpl_folded::StackCounts;

/// The `-X` output.
pub struct FlameGraphPlugin {
    counts: StackCounts,
    out: Box<dyn Write>,
}

impl FlameGraphPlugin {
    /// A plugin writing the SVG into `out`.
    pub fn new(out: Box<dyn Write>) -> FlameGraphPlugin {
        FlameGraphPlugin {
            counts: StackCounts::default(),
            out,
        }
    }
}

impl Plugin for FlameGraphPlugin {
    fn process(&mut self, a: &mut Analysis, s: &Sample<'_>) {
        self.counts.add(a, s);
    }

    fn shutdown(&mut self, a: &mut Analysis, _mapfile: Option<&mut dyn Write>) -> io::Result<()> {
        let lines: Vec<String> = self
            .counts
            .lines(a)
            .into_iter()
            .map(|(stack, n)| format!("{stack} {n}"))
            .collect();
        let mut opts = inferno::flamegraph::Options::default();
        opts.title = "pmcstat".to_owned();
        opts.count_name = "samples".to_owned();
        if lines.is_empty() {
            // inferno refuses an empty profile; an empty graph says so.
            opts.subtitle = Some("no samples".to_owned());
            return inferno::flamegraph::from_lines(&mut opts, ["[no samples] 1"], &mut self.out)
                .and_then(|()| self.out.flush());
        }
        inferno::flamegraph::from_lines(
            &mut opts,
            lines.iter().map(String::as_str),
            &mut self.out,
        )?;
        self.out.flush()
    }
}
