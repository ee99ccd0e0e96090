//! pmcstat's analysis of a log (-R with -G, -g, -x) on a log of a real
//! program: ksim's `sort` (C, built with clang -O2 -g, which inlines
//! insertion_sort into the hot quick_sort and fnv1a into main) sampled
//! on the retired instructions of a simulated Skylake, its files written
//! by the machine (LIBPMC_SIM_FILES) for `-r`. The judges are
//! independent of the code under test: the sampled PCs come from the -R
//! text dump, the functions from binutils' nm(1), inlined code from
//! addr2line(1) -i, and the gmon.out files are read by GNU gprof(1), the
//! calltree by valgrind's callgrind_annotate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

mod common;
use common::{function_of, functions, samples, text};

fn pmcstat(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmcstat"))
        .args(args)
        .env("LIBPMC_TRANSPORT", "sim")
        .output()
        .expect("run pmcstat")
}

/// A log of `sort` and the machine's files, made once for all tests.
struct Run {
    dir: PathBuf,
    log: String,
    root: String,
}

fn run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("pmcstat-analysis-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("sort.log").to_string_lossy().into_owned();
        let root = dir.join("root").to_string_lossy().into_owned();
        let o = Command::new(env!("CARGO_BIN_EXE_pmcstat"))
            .args(["-n", "20000", "-S", "instructions", "-l", "2", "-O", &log])
            .env("LIBPMC_TRANSPORT", "sim")
            .env("LIBPMC_SIM_CPUS", "1")
            .env("LIBPMC_SIM_WORKLOAD", "sort:100000")
            .env("LIBPMC_SIM_FILES", &root)
            .output()
            .expect("run pmcstat");
        assert!(o.status.success(), "{}", text(&o.stderr));
        Run { dir, log, root }
    })
}

/// pmcstat's quiet analysis of the run's log into `outputs` (such as
/// `["-x", "-"]`): its standard output, the run having succeeded.
fn analyse(r: &Run, outputs: &[&str]) -> String {
    let mut args = vec!["-q", "-R", &r.log, "-r", &r.root];
    args.extend_from_slice(outputs);
    let o = pmcstat(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout)
}

/// addr2line(1)'s `file:line` of each address of `binary`, without its
/// discriminator notes.
fn addr2line(binary: &Path, pcs: &[String]) -> Vec<String> {
    let o = Command::new("addr2line")
        .arg("-e")
        .arg(binary)
        .args(pcs)
        .output()
        .expect("addr2line (binutils) is installed");
    text(&o.stdout)
        .lines()
        .map(|l| l.split(" (discriminator").next().unwrap().to_owned())
        .collect()
}

/// Samples per function of the sampled PC, from the dump and nm.
fn expected_self_counts(r: &Run) -> BTreeMap<String, u64> {
    let funcs = functions(&Path::new(&r.root).join("usr/bin/sort"));
    let mut counts = BTreeMap::new();
    for (_, mode, pcs) in samples(&r.log) {
        assert_eq!(mode, 'u', "sort runs in user mode only");
        let pc = pcs[0];
        let f = function_of(&funcs, pc).map_or("?".to_owned(), |f| f.2.clone());
        *counts.entry(f).or_insert(0) += 1;
    }
    counts
}

/// addr2line(1)'s frames of addresses: (function, file:line), the
/// innermost first, by address.
type Frames = BTreeMap<u64, Vec<(String, String)>>;

/// nm(1)'s functions: (start, end, name).
type Functions = Vec<(u64, u64, String)>;

/// addr2line(1) -a -f -i's frames of each address of `binary`.
fn inline_frames(binary: &Path, pcs: &[u64]) -> Frames {
    let o = Command::new("addr2line")
        .args(["-a", "-f", "-i", "-e"])
        .arg(binary)
        .args(pcs.iter().map(|pc| format!("{pc:#x}")))
        .output()
        .expect("addr2line (binutils) is installed");
    assert!(o.status.success());
    let out = text(&o.stdout);
    let mut frames = Frames::new();
    let mut lines = out.lines();
    let mut current = 0;
    while let Some(l) = lines.next() {
        // -a: each address's frames follow it, written as 0x and 16
        // hexadecimal digits.
        if l.len() == 18 && l.starts_with("0x") {
            current = u64::from_str_radix(&l[2..], 16).unwrap();
            frames.insert(current, Vec::new());
            continue;
        }
        let place = lines.next().unwrap();
        let place = place.split(" (discriminator").next().unwrap();
        frames
            .get_mut(&current)
            .unwrap()
            .push((l.to_owned(), place.to_owned()));
    }
    frames
}

/// Where the calltree puts a sample whose PC is `pc`, by addr2line(1)'s
/// account: `inner@outer` when the innermost function addr2line names
/// at the PC is not the one it names at the function's start (and both
/// have a line), else the function's own name; with the nm function.
fn calltree_place(funcs: &Functions, frames: &Frames, pc: u64) -> (String, String) {
    let f = function_of(funcs, pc).unwrap();
    let has_line = |place: &str| !(place.ends_with(":?") || place.ends_with(":0"));
    let at_pc = &frames[&pc][0];
    let at_start = &frames[&f.0][0];
    if has_line(&at_pc.1) && has_line(&at_start.1) && at_pc.0 != at_start.0 {
        (format!("{}@{}", at_pc.0, at_start.0), f.2.clone())
    } else {
        (f.2.clone(), f.2.clone())
    }
}

/// The sampled PCs of `sort` with addr2line's frames of them and of
/// their functions' starts.
fn sampled_frames(r: &Run) -> (Functions, Vec<u64>, Frames) {
    let binary = Path::new(&r.root).join("usr/bin/sort");
    let funcs = functions(&binary);
    let pcs: Vec<u64> = samples(&r.log).iter().map(|(_, _, c)| c[0]).collect();
    let mut asked: Vec<u64> = pcs.clone();
    asked.extend(pcs.iter().map(|&pc| function_of(&funcs, pc).unwrap().0));
    asked.sort_unstable();
    asked.dedup();
    let frames = inline_frames(&binary, &asked);
    (funcs, pcs, frames)
}

/// Samples per calltree node of the sampled PC: its function's, or the
/// `inner@outer` node of the code inlined there.
fn expected_calltree_self_counts(r: &Run) -> BTreeMap<String, u64> {
    let (funcs, pcs, frames) = sampled_frames(r);
    let mut counts = BTreeMap::new();
    for pc in pcs {
        *counts
            .entry(calltree_place(&funcs, &frames, pc).0)
            .or_insert(0) += 1;
    }
    counts
}

#[test]
fn the_call_graph_has_freebsds_layout_and_the_samples_functions() {
    let r = run();
    let expected = expected_self_counts(r);
    let total: u64 = expected.values().sum();
    assert!(total > 200, "too few samples: {expected:?}");
    let out = r.dir.join("cg.txt");
    let o = pmcstat(&["-R", &r.log, "-r", &r.root, "-G", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stats = text(&o.stdout);
    assert!(stats.starts_with("CONVERSION STATISTICS:\n"), "{stats}");
    assert!(
        stats.contains(&format!(" {:<40} {total}\n", "#samples/total")),
        "{stats}"
    );
    let graph = std::fs::read_to_string(&out).unwrap();
    let mut lines = graph.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with("@ ") && header.ends_with(&format!(" [{total} samples]")));
    assert_eq!(lines.next(), Some(""));
    // Each line: depth spaces, the share, the count in a 12-character
    // field, depth spaces again, the name, " @ path" when the image
    // changes; the top-level nodes carry the sampled functions' counts,
    // the most sampled first; a caller's share is of its callee's count.
    let mut tops = BTreeMap::new();
    let mut previous_top = u64::MAX;
    let mut parents: Vec<u64> = Vec::new();
    for l in lines.filter(|l| !l.is_empty()) {
        let depth = l.len() - l.trim_start().len();
        let rest = &l[depth..];
        let (share, rest) = rest.split_once("% ").unwrap();
        assert_eq!(&rest[..1], " ", "{l}");
        let close = rest.find("] ").unwrap();
        let count: u64 = rest[2..close].parse().unwrap();
        let field = format!(" [{count}] ");
        let width = field.len().max(12);
        assert_eq!(&rest[..field.len()], field, "{l}");
        assert!(rest[field.len()..width].chars().all(|c| c == ' '), "{l}");
        let name_part = &rest[width..];
        assert!(name_part[..depth].chars().all(|c| c == ' '), "{l}");
        let name = name_part[depth..].split(" @ ").next().unwrap();
        parents.truncate(depth);
        let parent = parents.last().copied().unwrap_or(total);
        let want = if count == parent {
            "100.0".to_owned()
        } else {
            format!("{:05.2}", 100.0 * count as f64 / parent as f64)
        };
        assert_eq!(share, want, "{l}");
        if depth == 0 {
            assert!(count <= previous_top, "top-level nodes are sorted: {l}");
            previous_top = count;
            assert!(l.ends_with("/usr/bin/sort"), "{l}");
            tops.insert(name.to_owned(), count);
        }
        parents.push(count);
    }
    assert_eq!(tops, expected);
    assert!(tops.contains_key("quick_sort") && tops.contains_key("main"));
}

#[test]
fn gprof_reads_the_gmon_files_and_counts_the_samples() {
    let r = run();
    let expected = expected_self_counts(r);
    let dir = r.dir.join("gprof");
    std::fs::create_dir_all(&dir).unwrap();
    let map = r.dir.join("map.txt");
    let o = pmcstat(&[
        "-q",
        "-R",
        &r.log,
        "-r",
        &r.root,
        "-g",
        "-D",
        dir.to_str().unwrap(),
        "-M",
        map.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let event_dirs: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(event_dirs.len(), 1, "one event");
    let event = event_dirs[0].file_name().to_string_lossy().into_owned();
    let gmon = event_dirs[0].path().join("sort.gmon");
    let total: u64 = expected.values().sum();
    let map_text = std::fs::read_to_string(&map).unwrap();
    assert!(map_text.starts_with("MAP:\n"), "{map_text}");
    assert!(
        map_text.contains(&format!(
            " \"/usr/bin/sort\" => \"sort.gmon\" {event}/{total}\n"
        )),
        "{map_text}"
    );
    let binary = Path::new(&r.root).join("usr/bin/sort");
    let o = Command::new("gprof")
        .args(["-b", "-p"])
        .arg(&binary)
        .arg(&gmon)
        .output()
        .expect("gprof (binutils) is installed");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let flat = text(&o.stdout);
    // Each sample counts as 0.01 s. GNU gprof gives no samples to the
    // highest function of the text (its last symbol has no end for it),
    // so that one is left out of the comparison.
    assert!(
        flat.contains("Each sample counts as 0.01 seconds."),
        "{flat}"
    );
    let funcs = functions(&binary);
    let last = funcs.last().unwrap().2.clone();
    let mut seen = BTreeMap::new();
    for l in flat.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 4 && f[0].parse::<f64>().is_ok() {
            let seconds: f64 = f[2].parse().unwrap();
            seen.insert(
                f.last().unwrap().to_string(),
                (seconds * 100.0).round() as u64,
            );
        }
    }
    let mut compared = 0;
    for (name, n) in &expected {
        if *name == last {
            continue;
        }
        assert_eq!(seen.get(name), Some(n), "{name} in\n{flat}");
        compared += 1;
    }
    assert!(compared >= 2, "{flat}");
    // The call arcs: main calls rand_next and quick_sort.
    let o = Command::new("gprof")
        .args(["-b", "-q"])
        .arg(&binary)
        .arg(&gmon)
        .output()
        .unwrap();
    let cg = text(&o.stdout);
    assert!(cg.contains("main [") && cg.contains("rand_next ["), "{cg}");
}

/// The gmon files a run wrote under `dir`: (event/file, bytes).
fn gmon_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for event in std::fs::read_dir(dir).unwrap().flatten() {
        for f in std::fs::read_dir(event.path()).unwrap().flatten() {
            let name = format!(
                "{}/{}",
                event.file_name().to_string_lossy(),
                f.file_name().to_string_lossy()
            );
            files.insert(name, std::fs::read(f.path()).unwrap());
        }
    }
    files
}

#[test]
fn dash_g_combines_with_the_call_graph_options_as_freebsds() {
    // FreeBSD's -g makes a call graph ahead of the plugin that comes last
    // (pa_pplugin), printed into the file of -G or -F when one of them
    // was given too.
    let r = run();
    let base = r.dir.join("combined");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let path = |name: &str| base.join(name).to_string_lossy().into_owned();
    let new_dir = |name: &str| {
        std::fs::create_dir_all(base.join(name)).unwrap();
        path(name)
    };
    let quiet = |extra: &[&str]| {
        let mut args = vec!["-q", "-R", &r.log, "-r", &r.root];
        args.extend_from_slice(extra);
        let o = pmcstat(&args);
        assert!(o.status.success(), "{extra:?}: {}", text(&o.stderr));
        text(&o.stdout)
    };
    let read = |name: &str| std::fs::read_to_string(path(name)).unwrap();
    // Each output alone.
    quiet(&["-G", &path("graph")]);
    quiet(&["-F", &path("tree")]);
    let alone = new_dir("alone");
    quiet(&["-g", "-D", &alone]);
    let gmons = gmon_files(Path::new(&alone));
    assert_eq!(gmons.len(), 1, "{:?}", gmons.keys());
    let graph = read("graph");
    assert!(graph.starts_with("@ "), "{graph}");

    // -G then -g: the profiles, and the call graph into -G's file.
    let d = new_dir("g-after");
    quiet(&["-G", &path("graph-then-g"), "-g", "-D", &d]);
    assert_eq!(read("graph-then-g"), graph);
    assert_eq!(gmon_files(Path::new(&d)), gmons);
    // -F then -g: the same call graph (not the calltree) into -F's file.
    let d = new_dir("f-then-g");
    quiet(&["-F", &path("tree-then-g"), "-g", "-D", &d]);
    assert_eq!(read("tree-then-g"), graph);
    assert_eq!(gmon_files(Path::new(&d)), gmons);
    // -g then -F: the calltree, then the call graph, into the one file;
    // no profiles, -F having come last.
    let d = new_dir("g-then-f");
    quiet(&["-g", "-D", &d, "-F", &path("g-then-tree")]);
    assert_eq!(read("g-then-tree"), read("tree") + &graph);
    assert!(gmon_files(Path::new(&d)).is_empty());
    // -g then -G: the call graph, its samples counted once (FreeBSD's
    // counts each twice); no profiles.
    let d = new_dir("g-then-g");
    quiet(&["-g", "-D", &d, "-G", &path("g-then-graph")]);
    assert_eq!(read("g-then-graph"), graph);
    assert!(gmon_files(Path::new(&d)).is_empty());

    // -g with -v -v prints the map without -M.
    let d = new_dir("verbose");
    let o = pmcstat(&["-v", "-v", "-R", &r.log, "-r", &r.root, "-g", "-D", &d]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let total = samples(&r.log).len();
    assert!(out.starts_with("MAP:\n"), "{out}");
    assert!(
        out.contains(" \"/usr/bin/sort\" => \"sort.gmon\" "),
        "{out}"
    );
    assert!(out.contains("CONVERSION STATISTICS:\n"), "{out}");

    // -g's call graph counts what it cannot place at any depth: with a
    // root without the files, every sample is a dubious frame, as with
    // -G.
    let empty = new_dir("empty");
    let d = new_dir("empty-gprof");
    let o = pmcstat(&["-R", &r.log, "-r", &empty, "-g", "-z", "1", "-D", &d]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.contains(&format!(" {:<40} {total}\n", "#callchain/dubious-frames")),
        "{out}"
    );
}

#[test]
fn folded_stacks_sum_to_the_samples() {
    let r = run();
    let expected = expected_self_counts(r);
    let folded = analyse(r, &["-x", "-"]);
    let mut leaves: BTreeMap<String, u64> = BTreeMap::new();
    let mut previous = String::new();
    for l in folded.lines() {
        let (stack, n) = l.rsplit_once(' ').unwrap();
        assert!(*stack > *previous, "sorted and distinct: {l}");
        previous = stack.to_owned();
        let frames: Vec<&str> = stack.split(';').collect();
        assert_eq!(frames[0], "_start", "rooted at the entry: {l}");
        *leaves
            .entry(frames.last().unwrap().to_string())
            .or_insert(0) += n.parse::<u64>().unwrap();
    }
    assert_eq!(leaves, expected);
}

#[test]
fn missing_images_and_bad_arguments() {
    let r = run();
    // A root without the files: a warning each, and every sample is
    // counted as a dubious frame (in no image).
    let empty = r.dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let empty = empty.to_str().unwrap();
    let o = pmcstat(&["-R", &r.log, "-r", empty, "-G", "/dev/null"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!(
            "pmcstat: WARNING: Cannot open \"{empty}/usr/bin/sort\".\n"
        )),
        "{err}"
    );
    let total = samples(&r.log).len();
    let out = text(&o.stdout);
    assert!(
        out.contains(&format!(" {:<40} {total}\n", "#callchain/dubious-frames")),
        "{out}"
    );
    for (args, message, code) in [
        (
            vec!["-R", &r.log, "-e", "-G", "/dev/null"],
            "pmcstat: ERROR: option -e requires gprof mode to be specified.\n",
            64,
        ),
        (
            vec!["-R", &r.log, "-D", "/dev/null", "-g"],
            "pmcstat: ERROR: \"/dev/null\" is not a directory.\n",
            64,
        ),
        (
            vec!["-R", &r.log, "-G", "/dev/null", "-z", "0"],
            "pmcstat: ERROR: Illegal callchain depth \"0\".\n",
            64,
        ),
        (
            vec!["-G", "/dev/null", "-s", "instructions", "true"],
            "pmcstat: ERROR: options -g/-G/-m/-T require sampling PMCs or -R to be specified.\n",
            64,
        ),
        (
            vec!["-R", &r.log, "-G", "/nonexistent/dir/cg"],
            "pmcstat: ERROR: cannot open \"/nonexistent/dir/cg\" for writing: No such file or directory\n",
            71,
        ),
    ] {
        let o = pmcstat(&args);
        assert_eq!(text(&o.stderr), message, "{args:?}");
        assert_eq!(o.status.code(), Some(code), "{args:?}");
    }
    // A truncated log: what was read is analysed, and the error is said.
    let bytes = std::fs::read(&r.log).unwrap();
    let cut = r.dir.join("cut.log");
    std::fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
    let o = pmcstat(&["-R", cut.to_str().unwrap(), "-r", &r.root, "-x", "-"]);
    assert!(!text(&o.stdout).is_empty());
}

#[test]
fn callgrind_annotate_reads_the_calltree() {
    let r = run();
    let expected = expected_calltree_self_counts(r);
    let total: u64 = expected.values().sum();
    assert!(
        expected.contains_key("insertion_sort@quick_sort"),
        "the hot inlined code is sampled: {expected:?}"
    );
    let out = r.dir.join("calltree.out");
    analyse(r, &["-F", out.to_str().unwrap()]);
    let file = std::fs::read_to_string(&out).unwrap();
    let head: Vec<&str> = file.lines().take(7).collect();
    assert_eq!(head[0], "version: 1");
    assert_eq!(head[1], "creator: pmcstat");
    assert_eq!(head[2], "positions: instr line");
    assert!(
        head[3].starts_with("events: ") && head[3].ends_with("_0"),
        "{file}"
    );
    assert_eq!(head[4], format!("summary: {total}"));
    assert_eq!(head[5], "fn=root");
    // callgrind_annotate's totals and per-function costs are the samples'.
    let o = Command::new("callgrind_annotate")
        .args(["--threshold=100", "--auto=no"])
        .arg(&out)
        .output()
        .expect("callgrind_annotate (valgrind) is installed");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let report = text(&o.stdout);
    let mut seen = BTreeMap::new();
    let mut program_total = None;
    for l in report.lines() {
        let l = l.trim();
        let Some((count, rest)) = l.split_once(' ') else {
            continue;
        };
        let Ok(n) = count.replace(',', "").parse::<u64>() else {
            continue;
        };
        if rest.ends_with("PROGRAM TOTALS") {
            program_total = Some(n);
        } else if let (Some((_, func)), true) = (rest.split_once(':'), n > 0) {
            let func = func.split_whitespace().next().unwrap();
            seen.insert(func.to_owned(), n);
        }
    }
    assert_eq!(program_total, Some(total), "{report}");
    assert_eq!(seen, expected, "{report}");
}

#[test]
fn the_calltree_moves_inlined_code_to_inner_at_outer_nodes() {
    let r = run();
    let (funcs, pcs, frames) = sampled_frames(r);
    // (node, PC) -> samples, and the inlined PCs with their names.
    let mut expected: BTreeMap<(String, u64), u64> = BTreeMap::new();
    let mut warnings = BTreeMap::new();
    for &pc in &pcs {
        let (node, function) = calltree_place(&funcs, &frames, pc);
        if node != function {
            let (inner, outer) = node.split_once('@').unwrap();
            warnings.insert(pc, format!("{inner} in {outer}"));
        }
        *expected.entry((node, pc)).or_insert(0) += 1;
    }
    assert!(!warnings.is_empty());
    // At verbosity 2, a warning on the print file for each instruction
    // moved, before the statistics.
    let out = r.dir.join("inline.out");
    let o = pmcstat(&[
        "-v",
        "-R",
        &r.log,
        "-r",
        &r.root,
        "-F",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let printed = text(&o.stdout);
    let mut seen_warnings = BTreeMap::new();
    for l in printed.lines() {
        if let Some(rest) = l.strip_prefix("WARNING: inlined function at 0x") {
            let (pc, names) = rest.split_once(' ').unwrap();
            let pc = u64::from_str_radix(pc, 16).unwrap();
            assert!(seen_warnings.insert(pc, names.to_owned()).is_none(), "{l}");
        }
    }
    assert_eq!(seen_warnings, warnings);
    assert!(printed.find("WARNING").unwrap() < printed.find("CONVERSION STATISTICS").unwrap());
    // At the default verbosity, none.
    assert!(!analyse(r, &["-F", "/dev/null"]).contains("WARNING"));
    // The records: each function's and each inlined node's cost lines
    // (address, line, samples), and its calls.
    let file = std::fs::read_to_string(&out).unwrap();
    let mut seen: BTreeMap<(String, u64), u64> = BTreeMap::new();
    let mut calls: BTreeMap<(String, String), (String, u64)> = BTreeMap::new();
    let mut function = String::new();
    let mut lines = file.lines();
    while let Some(l) = lines.next() {
        if let Some(name) = l.strip_prefix("fn=") {
            function = name.to_owned();
        } else if let Some(callee) = l.strip_prefix("cfn=") {
            let call = lines.next().unwrap();
            let cost = lines.next().unwrap();
            let n = cost.rsplit(' ').next().unwrap().parse().unwrap();
            calls.insert((function.clone(), callee.to_owned()), (call.to_owned(), n));
        } else if let Some(rest) = l.strip_prefix("0x") {
            let f: Vec<&str> = rest.split(' ').collect();
            let n: u64 = f[2].parse().unwrap();
            if n > 0 && function != "root" {
                let pc = u64::from_str_radix(f[0], 16).unwrap();
                seen.insert((function.clone(), pc), n);
            }
        }
    }
    assert_eq!(seen, expected);
    // The function calls each of its inlined nodes once, from its start
    // (line 0), with all of the node's samples.
    let mut per_node: BTreeMap<String, u64> = BTreeMap::new();
    for ((node, _), n) in &expected {
        if node.contains('@') {
            *per_node.entry(node.clone()).or_insert(0) += n;
        }
    }
    for (node, n) in per_node {
        let outer = node.split_once('@').unwrap().1;
        let start = funcs.iter().find(|f| f.2 == outer).unwrap().0;
        assert_eq!(
            calls.get(&(outer.to_owned(), node.clone())),
            Some(&(format!("calls=1 {start:#x} 0"), n)),
            "{node}"
        );
    }
}

#[test]
fn annotate_lines_match_nm_and_addr2line() {
    let r = run();
    let binary = Path::new(&r.root).join("usr/bin/sort");
    let funcs = functions(&binary);
    let all = samples(&r.log);
    // -m: a line per sample, its function and the function's bounds.
    let lines: Vec<String> = analyse(r, &["-m", "-"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), all.len());
    for (l, (_, _, pcs)) in lines.iter().zip(&all) {
        let f: Vec<&str> = l.split(' ').collect();
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        assert_eq!(hex(f[0]), pcs[0], "{l}");
        let (start, end, name) = funcs
            .iter()
            .find(|(s, e, _)| (*s..*e).contains(&pcs[0]))
            .unwrap();
        assert_eq!(
            (hex(f[2]), hex(f[3]), f[1]),
            (*start, *end, name.as_str()),
            "{l}"
        );
    }
    // -a: each sample's frames then "--"; file and line as addr2line(1)
    // gives them for the same addresses.
    let out = analyse(r, &["-a", "-"]);
    let blocks: Vec<&str> = out.split_terminator("--\n").collect();
    assert_eq!(blocks.len(), all.len());
    let mut pcs = Vec::new();
    let mut ours = Vec::new();
    for (b, (_, _, chain)) in blocks.iter().zip(&all) {
        let frames: Vec<&str> = b.lines().collect();
        assert_eq!(frames.len(), chain.len(), "{b}");
        for (f, pc) in frames.iter().zip(chain) {
            let mut w = f.splitn(3, ' ');
            let at = w.next().unwrap();
            assert_eq!(at, format!("{pc:#x}"));
            let _func = w.next().unwrap();
            ours.push(w.next().unwrap().to_owned());
            pcs.push(format!("{pc:#x}"));
        }
    }
    let theirs = addr2line(&binary, &pcs);
    assert_eq!(theirs.len(), ours.len());
    let mut compared = 0;
    for (mine, theirs) in ours.iter().zip(&theirs) {
        // addr2line says ?:? or file:? where the table has no line.
        if theirs.ends_with(":?") {
            assert!(mine.ends_with(":0"), "{mine} against {theirs}");
            continue;
        }
        assert_eq!(mine, theirs);
        compared += 1;
    }
    assert!(compared > all.len(), "{compared}");
}

/// The folded stacks of the log: stack text (root first) to samples.
fn folded(r: &Run) -> BTreeMap<String, u64> {
    analyse(r, &["-x", "-"])
        .lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap();
            (stack.to_owned(), n.parse().unwrap())
        })
        .collect()
}

/// The stacks that the -G text holds, read the way the folded-stack
/// collapsers for pmcstat read it: each line's indentation is its depth
/// below the sampled function, and a line with no deeper line under it
/// ends a stack, with that line's count; the stack is the lines above it
/// on its path, the outermost caller first.
fn stacks_of_callgraph_text(text: &str) -> BTreeMap<String, u64> {
    let mut stacks = BTreeMap::new();
    let mut path: Vec<String> = Vec::new();
    let mut last: Option<(usize, u64)> = None;
    let mut flush = |path: &[String], last: Option<(usize, u64)>, next: Option<usize>| {
        if let Some((depth, n)) = last {
            if next.is_none_or(|d| d <= depth) {
                let stack: Vec<&str> = path[..=depth].iter().rev().map(String::as_str).collect();
                *stacks.entry(stack.join(";")).or_insert(0) += n;
            }
        }
    };
    for line in text.lines() {
        let depth = line.len() - line.trim_start().len();
        let fields: Vec<&str> = line.split_whitespace().collect();
        let is_node = fields.len() >= 3
            && fields[0].ends_with('%')
            && fields[1].starts_with('[')
            && fields[1].ends_with(']');
        if !is_node {
            continue;
        }
        let n: u64 = fields[1][1..fields[1].len() - 1].parse().unwrap();
        flush(&path, last, Some(depth));
        path.truncate(depth);
        path.push(fields[2].to_owned());
        assert_eq!(path.len(), depth + 1, "one space a level: {line}");
        last = Some((depth, n));
    }
    flush(&path, last, None);
    stacks
}

/// The -G text read as the collapsers read it gives exactly the folded
/// stacks of -x: the indentation, names and counts carry the chains.
#[test]
fn the_call_graph_text_collapses_into_the_folded_stacks() {
    let r = run();
    let graph = analyse(r, &["-G", "-"]);
    let collapsed = stacks_of_callgraph_text(&graph);
    assert!(collapsed.len() > 5, "{graph}");
    assert_eq!(collapsed, folded(r));
}

#[test]
fn the_pprof_profile_decodes_with_googles_runtime() {
    let r = run();
    let out = r.dir.join("profile.pb");
    analyse(r, &["-j", out.to_str().unwrap()]);
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/venv/bin/python3");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pprof_decode.py");
    let o = Command::new(&python)
        .arg(&script)
        .arg(&out)
        .output()
        .expect("the Python environment of tools/setup, with protobuf");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let json = text(&o.stdout);
    // The decoded samples, as root-first stacks, are the folded stacks.
    let start = json.find("\"samples\": [").unwrap();
    let mut decoded = BTreeMap::new();
    for part in json[start..].split("{\"functions\": [").skip(1) {
        let (names, rest) = part.split_once("], \"values\": [").unwrap();
        let value: u64 = rest.split(']').next().unwrap().parse().unwrap();
        let mut frames: Vec<&str> = names.split(", ").map(|n| n.trim_matches('"')).collect();
        frames.reverse();
        *decoded.entry(frames.join(";")).or_insert(0) += value;
    }
    assert_eq!(decoded, folded(r));
    assert!(json.contains("\"sample_types\": [[\""), "{json}");
    assert!(json.contains("\"count\"]]"), "{json}");
    assert!(
        json.contains("/usr/bin/sort\"]"),
        "the mapping's file: {json}"
    );
    assert!(
        json.contains("sort.c\""),
        "the functions' source file: {json}"
    );
}

#[test]
fn the_flame_graph_shows_every_sample() {
    let r = run();
    let expected = expected_self_counts(r);
    let total: u64 = expected.values().sum();
    let out = r.dir.join("flame.svg");
    analyse(r, &["-X", out.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
    let with_commas = |n: u64| {
        let s = n.to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    };
    assert!(
        svg.contains(&format!(
            "<title>all ({} samples, 100%)</title>",
            with_commas(total)
        )),
        "{svg}"
    );
    // Each stack frame of the folded stacks has its box.
    for stack in folded(r).keys() {
        let leaf = stack.rsplit(';').next().unwrap();
        assert!(svg.contains(&format!("<title>{leaf} (")), "{leaf}");
    }
}

#[test]
fn the_source_summary_counts_lines_as_addr2line_places_them() {
    let r = run();
    let binary = Path::new(&r.root).join("usr/bin/sort");
    let funcs = functions(&binary);
    let all = samples(&r.log);
    let pcs: Vec<String> = all.iter().map(|(_, _, c)| format!("{:#x}", c[0])).collect();
    let places = addr2line(&binary, &pcs);
    // (function, file:line) of each sample, as nm and addr2line say.
    let mut expected: BTreeMap<(String, String), u64> = BTreeMap::new();
    for ((_, _, chain), place) in all.iter().zip(&places) {
        if place.ends_with(":?") {
            continue;
        }
        let (file, line) = place.rsplit_once(':').unwrap();
        let short = format!("{}:{line}", file.rsplit('/').next().unwrap());
        let f = funcs
            .iter()
            .find(|(s, e, _)| (*s..*e).contains(&chain[0]))
            .unwrap()
            .2
            .clone();
        *expected.entry((f, short)).or_insert(0) += 1;
    }
    let out = analyse(r, &["-y", "-"]);
    let mut seen: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut function = String::new();
    let mut functions_seen = BTreeMap::new();
    for l in out.lines().skip(2).filter(|l| !l.is_empty()) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if !l.starts_with("        ") {
            function = f[2].to_owned();
            functions_seen.insert(function.clone(), f[1].parse::<u64>().unwrap());
        } else if !f[2].ends_with(":0") {
            seen.insert((function.clone(), f[2].to_owned()), f[1].parse().unwrap());
        }
    }
    assert_eq!(functions_seen, expected_self_counts(r));
    assert_eq!(seen, expected);
    // The source text is shown where the file can be read.
    assert!(out.contains("quick_sort(a, lo, j);"), "{out}");
}

/// A copy of the run's file system root, for damaging.
fn copy_root(r: &Run, name: &str) -> PathBuf {
    let to = r.dir.join(name);
    let _ = std::fs::remove_dir_all(&to);
    let o = Command::new("cp")
        .arg("-r")
        .arg(&r.root)
        .arg(&to)
        .output()
        .unwrap();
    assert!(o.status.success());
    to
}

#[test]
fn stripped_changed_and_foreign_inputs_give_partial_results() {
    let r = run();
    let total = samples(&r.log).len();
    // A stripped program: every sampled function is an address.
    let stripped = copy_root(r, "stripped");
    let o = Command::new("strip")
        .arg("--strip-all")
        .arg(stripped.join("usr/bin/sort"))
        .output()
        .expect("strip (binutils)");
    assert!(o.status.success());
    let o = pmcstat(&["-R", &r.log, "-r", stripped.to_str().unwrap(), "-G", "-"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains(&format!("[{total} samples]")), "{out}");
    assert!(
        out.contains(&format!(" {:<40} {total}\n", "#samples/unknown-function")),
        "{out}"
    );
    let top = out.lines().nth(2).unwrap();
    assert!(top.contains(" 0x20"), "an address, not a name: {top}");
    // A program changed since the run (another one at its path): the
    // analysis still ends, with what the new file's symbols say.
    let changed = copy_root(r, "changed");
    let other = ksim::programs::image(ksim::cpu::Arch::X86_64, "calls").unwrap();
    std::fs::write(changed.join("usr/bin/sort"), other).unwrap();
    let o = pmcstat(&[
        "-R",
        &r.log,
        "-r",
        changed.to_str().unwrap(),
        "-x",
        "/dev/null",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains(&format!(" {:<40} {total}\n", "#samples/total")));
    // A log of another major version of hwpmc: a warning, and the
    // analysis goes on.
    let mut bytes = std::fs::read(&r.log).unwrap();
    // The INITIALIZE record comes first; its version follows the
    // 16-byte header.
    bytes[16..20].copy_from_slice(&0x0900_0000u32.to_ne_bytes());
    let foreign = r.dir.join("foreign.log");
    std::fs::write(&foreign, &bytes).unwrap();
    let o = pmcstat(&[
        "-R",
        foreign.to_str().unwrap(),
        "-r",
        &r.root,
        "-G",
        "/dev/null",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(
            "pmcstat: WARNING: Log version 0x9000000 does not match compiled version 0xa.\n"
        ),
        "{}",
        text(&o.stderr)
    );
    assert!(text(&o.stdout).contains(&format!(" {:<40} {total}\n", "#samples/total")));
}
