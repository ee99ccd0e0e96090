//! The driver's sysctls and loader tunables against FreeBSD's own
//! declarations (issue 12, item 9).
//!
//! The FreeBSD tree is `$FREEBSD_SRC`, else `../shared/freebsd-15.0` next
//! to this repository. Every `SYSCTL_*` and `TUNABLE_*` that
//! sys/dev/hwpmc/hwpmc_mod.c and hwpmc_logging.c declare at file scope is
//! read from there, with its type, access flags (the macro's own
//! included) and default (the initializer of its variable, macros taken
//! from the tree's sys/sys/pmc.h and sys/sys/sysctl.h). Then:
//! - the module's C glue (sys/dev/hwpmc/hwpmc_glue.c and
//!   sys/rust/kpi/kpi_glue.c, read with the same parser) must declare
//!   exactly those, with the same name, type, flags and default;
//! - the simulator, with the driver loaded, must expose exactly those and
//!   kern_pmc.c's (the kernel's part of kern.hwpmc), with the same type,
//!   flags and value, take loader tunables for `CTLFLAG_TUN` oids only,
//!   and let sysctl(8) write only `CTLFLAG_WR` ones.
//!
//! Two differences are allowed, and printed: FreeBSD declares debugflags
//! only in `HWPMC_DEBUG` kernels, and this driver always has its trace
//! points; and FreeBSD's `TUNABLE_STR` for it is met by the string oid
//! declared `CTLFLAG_TUN | CTLFLAG_NOFETCH`, whose tunable the driver
//! fetches itself at load (`TUNABLE_STR_FETCH`, as FreeBSD's does too).
//!
//! With `FREEBSD_SRC` set to a missing tree the test fails; with no tree
//! at all it says that it did not run, and why.

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use ksim::{Cred, Machine, MachineConfig, SysctlType, SysctlValue};

/// The repository's top directory.
fn top() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// The FreeBSD tree, or why there is none.
fn freebsd_src() -> Result<PathBuf, String> {
    match std::env::var_os("FREEBSD_SRC") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            assert!(
                dir.join("sys/dev/hwpmc/hwpmc_mod.c").is_file(),
                "FREEBSD_SRC={} has no sys/dev/hwpmc/hwpmc_mod.c",
                dir.display()
            );
            Ok(dir)
        }
        None => {
            let dir = top().join("../shared/freebsd-15.0");
            if dir.join("sys/dev/hwpmc/hwpmc_mod.c").is_file() {
                Ok(dir)
            } else {
                Err(format!(
                    "FREEBSD_SRC is not set and there is no FreeBSD tree at {}",
                    dir.display()
                ))
            }
        }
    }
}

/// The C macros of a file and of the headers it takes names from:
/// object-like `#define NAME value` lines.
fn defines(texts: &[&str]) -> BTreeMap<String, String> {
    let mut d = BTreeMap::new();
    for text in texts {
        for line in strip_comments(text).lines() {
            let mut w = line.split_whitespace();
            if w.next() != Some("#define") {
                continue;
            }
            let Some(name) = w.next() else { continue };
            if name.contains('(') {
                continue;
            }
            d.insert(name.to_string(), w.collect::<Vec<_>>().join(" "));
        }
    }
    d
}

/// The text with comments blanked (newlines kept, so that lines stay).
fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        if in_str {
            out.push(b[i] as char);
            if b[i] == b'\\' && i + 1 < b.len() {
                out.push(b[i + 1] as char);
                i += 2;
                continue;
            }
            if b[i] == b'"' {
                in_str = false;
            }
            i += 1;
        } else if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            out.extend(
                text[i..end]
                    .chars()
                    .map(|c| if c == '\n' { '\n' } else { ' ' }),
            );
            i = end;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'\'' {
            // A character literal, '"' included.
            let mut j = i + 1;
            while j < b.len() && b[j] != b'\'' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            out.extend(b[i..end].iter().map(|&c| c as char));
            i = end;
        } else {
            if b[i] == b'"' {
                in_str = true;
            }
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// The value of a C integer expression made of `|`, parentheses, numbers
/// and macros.
fn eval(expr: &str, d: &BTreeMap<String, String>) -> i64 {
    let expr = expr.trim();
    let expr = expr
        .strip_prefix('(')
        .and_then(|e| e.strip_suffix(')'))
        .filter(|e| !e.contains('(') && !e.contains(')'))
        .unwrap_or(expr);
    if expr.contains('|') {
        return expr.split('|').map(|t| eval(t, d)).fold(0, |a, b| a | b);
    }
    let t = expr.trim_end_matches(['U', 'u', 'L', 'l']);
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return i64::from_str_radix(h, 16).unwrap_or_else(|_| panic!("bad number {expr}"));
    }
    if let Ok(v) = t.parse::<i64>() {
        return v;
    }
    match d.get(expr) {
        Some(v) => eval(v, d),
        None => panic!("no definition of {expr:?}"),
    }
}

/// A C string expression: adjacent literals and macros that expand to
/// them (`PMC_SYSCTL_NAME_PREFIX "debugflags"`).
fn c_string(expr: &str, d: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = expr.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('"') {
            let end = r.find('"').expect("closed string");
            out.push_str(&r[..end]);
            rest = r[end + 1..].trim_start();
        } else {
            let end = rest.find([' ', '\t', '"']).unwrap_or(rest.len());
            let name = &rest[..end];
            let v = d
                .get(name)
                .unwrap_or_else(|| panic!("no definition of {name:?}"));
            out.push_str(&c_string(v, d));
            rest = rest[end..].trim_start();
        }
    }
    out
}

/// The arguments of the macro call whose `(` is at `open`, split at
/// top-level commas; and where the call ends.
fn call_args(text: &str, open: usize) -> (Vec<String>, usize) {
    let b = text.as_bytes();
    let (mut depth, mut in_str) = (0, false);
    let mut args = Vec::new();
    let mut start = open + 1;
    let mut i = open;
    loop {
        let c = b[i];
        if in_str {
            if c == b'\\' {
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
        } else {
            match c {
                b'"' => in_str = true,
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        args.push(text[start..i].trim().to_string());
                        return (args, i + 1);
                    }
                }
                b',' if depth == 1 => {
                    args.push(text[start..i].trim().to_string());
                    start = i + 1;
                }
                _ => {}
            }
        }
        i += 1;
    }
}

/// A sysctl oid's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Node,
    Int,
    Counter,
    String,
    /// A loader tunable with no oid (`TUNABLE_STR`).
    TunableStr,
}

/// One declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decl {
    kind: Kind,
    /// `CTLFLAG_*` bits, the macro's own included, without the type.
    flags: u32,
    /// Integers' initial value.
    int: i64,
    /// Strings' initial value.
    text: String,
    /// The `#if` conditions it is under.
    cond: Vec<String>,
}

const CTLTYPE: i64 = 0xf;

/// Every file-scope `SYSCTL_*` and `TUNABLE_*` declaration of `files`, by
/// full name (a tunable with no oid as `name (tunable)`). Names of nodes
/// come from the `SYSCTL_NODE` declarations read, and else from the
/// symbol (`_security_bsd` is `security.bsd`).
fn declarations(files: &[PathBuf], d: &BTreeMap<String, String>) -> BTreeMap<String, Decl> {
    let mut nodes: BTreeMap<String, String> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for f in files {
        let raw = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let text = strip_comments(&raw);
        let mut d = d.clone();
        d.extend(defines(&[&text]));
        let mut cond: Vec<String> = Vec::new();
        let mut offset = 0;
        let mut skip_until = 0;
        for line in text.split_inclusive('\n') {
            let at = offset;
            offset += line.len();
            if at < skip_until {
                continue;
            }
            let l = line.trim_end();
            if let Some(c) = l.strip_prefix("#if") {
                cond.push(c.trim().to_string());
                continue;
            }
            if l.starts_with("#endif") {
                cond.pop();
                continue;
            }
            if l.starts_with("#else") || l.starts_with("#elif") {
                if let Some(c) = cond.last_mut() {
                    *c = format!("!({c})");
                }
                continue;
            }
            let Some(mac) = l
                .split('(')
                .next()
                .filter(|m| m.starts_with("SYSCTL_") || m.starts_with("TUNABLE_"))
                .filter(|m| {
                    m.chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                })
            else {
                continue;
            };
            let (a, end) = call_args(&text, at + mac.len());
            skip_until = end;
            let var_init = |ptr: &str| -> i64 {
                let var = ptr.trim_start_matches('&').trim();
                // `static int var = value;` (or u_int, or no value: 0).
                let types = ["int", "u_int", "long", "u_long", "unsigned"];
                for decl in text.split(';') {
                    let words: Vec<&str> = decl.split_whitespace().collect();
                    let Some(pos) = words.iter().position(|w| *w == var) else {
                        continue;
                    };
                    if pos == 0 || !types.contains(&words[pos - 1]) {
                        continue;
                    }
                    match &words[pos + 1..] {
                        [] => return 0,
                        ["=", value @ ..] => return eval(&value.join(" "), &d),
                        _ => continue,
                    }
                }
                panic!("{}: no definition of {var}", f.display());
            };
            let parent = |p: &str| -> String {
                nodes
                    .get(p)
                    .cloned()
                    .unwrap_or_else(|| p.trim_start_matches('_').replace('_', "."))
            };
            let decl = |kind, flags: i64, int, text: &str| Decl {
                kind,
                flags: (flags & !CTLTYPE) as u32,
                int,
                text: text.to_string(),
                cond: cond.clone(),
            };
            let mpsafe = eval("CTLFLAG_MPSAFE", &d);
            let (name, decl) = match mac {
                "SYSCTL_DECL" => continue,
                "SYSCTL_NODE" => {
                    let name = format!("{}.{}", parent(&a[0]), a[2]);
                    nodes.insert(format!("{}_{}", a[0], a[2]), name.clone());
                    (name, decl(Kind::Node, eval(&a[3], &d), 0, ""))
                }
                "SYSCTL_INT" => {
                    let init = if a[4] == "NULL" || a[4] == "0" {
                        eval(&a[5], &d)
                    } else {
                        var_init(&a[4])
                    };
                    (
                        format!("{}.{}", parent(&a[0]), a[2]),
                        decl(Kind::Int, eval(&a[3], &d) | mpsafe, init, ""),
                    )
                }
                "SYSCTL_COUNTER_U64" => (
                    format!("{}.{}", parent(&a[0]), a[2]),
                    decl(
                        Kind::Counter,
                        eval(&a[3], &d) | mpsafe | eval("CTLFLAG_STATS", &d),
                        0,
                        "",
                    ),
                ),
                "SYSCTL_STRING" => (
                    format!("{}.{}", parent(&a[0]), a[2]),
                    decl(Kind::String, eval(&a[3], &d) | mpsafe, 0, ""),
                ),
                "SYSCTL_PROC" => {
                    let flags = eval(&a[3], &d);
                    assert_eq!(
                        flags & CTLTYPE,
                        eval("CTLTYPE_STRING", &d),
                        "{}: SYSCTL_PROC {} is not a string: add its type here",
                        f.display(),
                        a[2]
                    );
                    (
                        format!("{}.{}", parent(&a[0]), a[2]),
                        decl(Kind::String, flags, 0, ""),
                    )
                }
                "TUNABLE_STR" => (
                    format!("{} (tunable)", c_string(&a[0], &d)),
                    decl(Kind::TunableStr, 0, 0, ""),
                ),
                other => panic!(
                    "{}: {other} is not known to this check: teach it the macro",
                    f.display()
                ),
            };
            assert!(
                out.insert(name.clone(), decl).is_none(),
                "{name} declared twice"
            );
        }
    }
    out
}

/// The tree's headers that give the macros their values.
fn header_defines(src: &Path) -> BTreeMap<String, String> {
    let read =
        |p: &str| std::fs::read_to_string(src.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    defines(&[&read("sys/sys/sysctl.h"), &read("sys/sys/pmc.h")])
}

fn freebsd_module(src: &Path) -> BTreeMap<String, Decl> {
    declarations(
        &[
            src.join("sys/dev/hwpmc/hwpmc_mod.c"),
            src.join("sys/dev/hwpmc/hwpmc_logging.c"),
        ],
        &header_defines(src),
    )
}

/// Whether FreeBSD's declaration `f` of `name` is met by ours, `o`, and
/// what difference was allowed.
fn meets(
    name: &str,
    f: &Decl,
    o: Option<&Decl>,
    ours: &BTreeMap<String, Decl>,
) -> Result<Option<String>, String> {
    if f.kind == Kind::TunableStr {
        if o.is_some() {
            return Ok(None);
        }
        let oid = name.trim_end_matches(" (tunable)");
        let tun = 0x0008_0000;
        return match ours.get(oid) {
            Some(d) if d.kind == Kind::String && d.flags & tun != 0 => Ok(Some(format!(
                "{name}: met by the string oid {oid}, declared CTLFLAG_TUN, whose tunable the driver fetches at load"
            ))),
            _ => Err(format!(
                "{name}: no TUNABLE_STR and no string oid with CTLFLAG_TUN"
            )),
        };
    }
    let Some(o) = o else {
        return Err(format!("{name}: not declared"));
    };
    let same = (o.kind, o.flags, o.int, &o.text) == (f.kind, f.flags, f.int, &f.text);
    if !same {
        return Err(format!("{name}: FreeBSD {f:?}, ours {o:?}"));
    }
    match (f.cond.is_empty(), o.cond.is_empty()) {
        (true, true) => Ok(None),
        (false, true) if f.cond == ["def HWPMC_DEBUG"] => Ok(Some(format!(
            "{name}: FreeBSD declares it only with options HWPMC_DEBUG; this driver always"
        ))),
        _ => Err(format!(
            "{name}: under #if {:?} in FreeBSD, #if {:?} here",
            f.cond, o.cond
        )),
    }
}

#[test]
fn the_glue_declares_freebsds_sysctls_and_tunables() {
    let src = match freebsd_src() {
        Ok(s) => s,
        Err(why) => {
            println!("freebsd_sysctls: NOT RUN: {why}");
            return;
        }
    };
    let freebsd = freebsd_module(&src);
    // Read as they are compiled: against the tree's headers.
    let ours = declarations(
        &[
            top().join("sys/dev/hwpmc/hwpmc_glue.c"),
            top().join("sys/rust/kpi/kpi_glue.c"),
        ],
        &header_defines(&src),
    );
    assert!(freebsd.len() > 20, "FreeBSD's parse found {freebsd:?}");
    let mut errors = Vec::new();
    for (name, f) in &freebsd {
        match meets(name, f, ours.get(name), &ours) {
            Ok(Some(note)) => println!("allowed: {note}"),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    for name in ours.keys().filter(|n| !freebsd.contains_key(*n)) {
        errors.push(format!("{name}: declared here, not by FreeBSD"));
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// A machine with the driver loaded and loader tunables `kenv`.
fn loaded(kenv: &[(String, String)]) -> Sim {
    let kenv: Vec<(&str, &str)> = kenv.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Sim::with(MachineConfig::default(), &kenv)
}

fn sim_kind(k: Kind) -> SysctlType {
    match k {
        Kind::Node => SysctlType::Node,
        Kind::Int => SysctlType::Int,
        Kind::Counter => SysctlType::Counter,
        Kind::String => SysctlType::String,
        Kind::TunableStr => unreachable!("not an oid"),
    }
}

#[test]
fn the_simulator_exposes_freebsds_sysctls() {
    let src = match freebsd_src() {
        Ok(s) => s,
        Err(why) => {
            println!("freebsd_sysctls: NOT RUN: {why}");
            return;
        }
    };
    let module = freebsd_module(&src);
    let kernel = declarations(&[src.join("sys/kern/kern_pmc.c")], &header_defines(&src));
    let oids = |decls: &BTreeMap<String, Decl>| -> Vec<(String, Decl)> {
        decls
            .iter()
            .filter(|(_, d)| d.kind != Kind::TunableStr)
            .map(|(n, d)| (n.clone(), d.clone()))
            .collect()
    };
    let cpuid = MachineConfig::default().cpuid;

    // Types, flags and values after a load with no tunables; and no oid
    // under kern.hwpmc that FreeBSD has not.
    let s = loaded(&[]);
    let mut errors = Vec::new();
    for (name, f) in oids(&module).iter().chain(oids(&kernel).iter()) {
        let Some(info) = s.m.sysctl_info(name) else {
            errors.push(format!("{name}: missing"));
            continue;
        };
        let want = match f.kind {
            Kind::Node => SysctlValue::Node,
            Kind::Int | Kind::Counter => SysctlValue::Int(f.int),
            // Filled at load by the machine-dependent code.
            Kind::String if name == "kern.hwpmc.cpuid" => SysctlValue::Str(cpuid.clone()),
            Kind::String => SysctlValue::Str(f.text.clone()),
            Kind::TunableStr => unreachable!(),
        };
        if (info.kind, info.flags, &info.value) != (sim_kind(f.kind), f.flags, &want) {
            errors.push(format!("{name}: FreeBSD {f:?}, the simulator {info:?}"));
        }
    }
    for (name, _) in s.m.sysctl_list("kern.hwpmc") {
        if !module.contains_key(&name) && !kernel.contains_key(&name) {
            errors.push(format!("{name}: in the simulator, not in FreeBSD"));
        }
    }

    // sysctl(8) writes CTLFLAG_WR oids only; a counter write zeroes it.
    let wr = 0x4000_0000;
    for (name, f) in oids(&module) {
        let r = match f.kind {
            Kind::Int | Kind::Counter => s.m.sysctl_write(&name, f.int),
            Kind::String => s.m.sysctl_write_str(&name, ""),
            _ => continue,
        };
        let want = if f.flags & wr != 0 {
            Ok(())
        } else {
            Err(EPERM.get())
        };
        if r != want {
            errors.push(format!(
                "{name}: sysctl(8) write gives {r:?}, flags {:#x}",
                f.flags
            ));
        }
    }
    let _ = s.stats(s.root());
    s.m.sysctl_set("kern.hwpmc.stats.syscalls", 12345);
    assert_eq!(s.m.sysctl_get("kern.hwpmc.stats.syscalls"), Some(0));
    s.finish();

    // Loader tunables: each int oid's is its default plus one (a valid
    // value for all). CTLFLAG_TUN oids take it, unless CTLFLAG_NOFETCH;
    // the others keep their default.
    let tun = 0x0008_0000;
    let nofetch = 0x0000_1000;
    let ints: Vec<(String, Decl)> = oids(&module)
        .into_iter()
        .filter(|(_, d)| d.kind == Kind::Int)
        .collect();
    let kenv: Vec<(String, String)> = ints
        .iter()
        .map(|(n, d)| (n.clone(), (d.int + 1).to_string()))
        .collect();
    let s = loaded(&kenv);
    for (name, f) in &ints {
        let fetched = f.flags & tun != 0 && f.flags & nofetch == 0;
        let want = if fetched { f.int + 1 } else { f.int };
        if s.m.sysctl_get(name) != Some(want) {
            errors.push(format!(
                "{name}: tunable {} gives {:?}, flags {:#x}",
                f.int + 1,
                s.m.sysctl_get(name),
                f.flags
            ));
        }
    }
    s.finish();
    assert!(errors.is_empty(), "{}", errors.join("\n"));

    // The module's oids go with it.
    let m = Machine::new(MachineConfig::default());
    let _e = m.enter();
    let (_, t) = m.spawn(Cred::root(), "kldload");
    let module_loaded = m.in_thread(t, hwpmc::Module::load).expect("loads");
    assert!(m.sysctl_info("kern.hwpmc.stats.syscalls").is_some());
    m.in_thread(t, || module_loaded.unload());
    let left: Vec<String> = m
        .sysctl_list("kern.hwpmc")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let kernel_names: Vec<String> = kernel.keys().cloned().collect();
    assert_eq!(
        left, kernel_names,
        "after unload only the kernel's are left"
    );
}

/// The parser on what it must understand, so that a FreeBSD change it
/// misreads fails loudly rather than passing.
#[test]
fn the_parser_reads_declarations() {
    let dir = std::env::temp_dir().join(format!("freebsd-sysctls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("x.c");
    std::fs::write(
        &f,
        r#"
#define	LIMIT	(3|4)
SYSCTL_DECL(_kern_x);
SYSCTL_NODE(_kern_x, OID_AUTO, sub, CTLFLAG_RW | CTLFLAG_MPSAFE, 0,
    "sub, node");
/* SYSCTL_INT(_kern_x, OID_AUTO, commented, CTLFLAG_RD, &a, 0, "no"); */
static int a = LIMIT;
SYSCTL_INT(_kern_x_sub, OID_AUTO, a, CTLFLAG_RDTUN,
    &a, 0, "a, (with) \"quotes\"");
static u_int b;
SYSCTL_INT(_kern_x, OID_AUTO, b, CTLFLAG_RW, &b, 0, "b");
SYSCTL_INT(_kern_x, OID_AUTO, c, CTLFLAG_RD, NULL, 0x10, "c");
#ifdef DEBUGGING
TUNABLE_STR("kern.x." "d", buf, sizeof(buf));
#endif
int
f(void)
{
	TUNABLE_STR_FETCH("kern.x.d", buf, sizeof(buf));
}
"#,
    )
    .unwrap();
    let d = defines(&[
        "#define CTLFLAG_RD 0x80000000\n#define CTLFLAG_WR 0x40000000\n#define CTLFLAG_RW (CTLFLAG_RD|CTLFLAG_WR)\n#define CTLFLAG_TUN 0x00080000\n#define CTLFLAG_RDTUN (CTLFLAG_RD|CTLFLAG_TUN)\n#define CTLFLAG_MPSAFE 0x00040000\n",
    ]);
    let got = declarations(&[f], &d);
    std::fs::remove_dir_all(&dir).unwrap();
    let decl = |kind, flags, int, cond: &[&str]| Decl {
        kind,
        flags,
        int,
        text: String::new(),
        cond: cond.iter().map(|c| c.to_string()).collect(),
    };
    let want: BTreeMap<String, Decl> = [
        ("kern.x.sub", decl(Kind::Node, 0xc004_0000, 0, &[])),
        ("kern.x.sub.a", decl(Kind::Int, 0x800c_0000, 7, &[])),
        ("kern.x.b", decl(Kind::Int, 0xc004_0000, 0, &[])),
        ("kern.x.c", decl(Kind::Int, 0x8004_0000, 16, &[])),
        (
            "kern.x.d (tunable)",
            decl(Kind::TunableStr, 0, 0, &["def DEBUGGING"]),
        ),
    ]
    .into_iter()
    .map(|(n, d)| (n.to_string(), d))
    .collect();
    assert_eq!(got, want);
}
