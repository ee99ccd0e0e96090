//! Coverage: every definition of the ABI headers the check reads is
//! compared, is a deliberate 2026 difference (`ADDITIONS_2026`), or is
//! listed in [`EXCLUSIONS`] with the reason it is not compared.
//!
//! The headers are preprocessed as the check compiles them (`-E -dD`,
//! which keeps the `#define`s and the line markers naming their files);
//! from the parts that come from the ABI headers it takes the macros, the
//! enumerators, the typedefs, and the structs and unions with their
//! members (anonymous members flattened, as `offsetof` reaches them).

use std::collections::BTreeSet;

/// What kind of definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `#define NAME` (object-like or function-like).
    Macro,
    /// An enumerator.
    Enumerator,
    /// A `typedef` name.
    Typedef,
    /// `struct X` or `union X`, named `struct X`.
    Aggregate,
    /// A member, named `struct X.member`.
    Member,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Macro => "macro",
            Kind::Enumerator => "enumerator",
            Kind::Typedef => "typedef",
            Kind::Aggregate => "type",
            Kind::Member => "member",
        }
    }
}

/// One definition found in an ABI header.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Item {
    /// What it is.
    pub kind: Kind,
    /// Its name (see [`Kind`]).
    pub name: String,
    /// The header, e.g. `sys/pmc.h`.
    pub header: String,
}

impl std::fmt::Display for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({})", self.kind.word(), self.name, self.header)
    }
}

/// A deliberate exclusion: what it matches and why it is not compared.
#[derive(Debug, Clone, Copy)]
pub struct Exclusion {
    /// The kind of definition.
    pub kind: Kind,
    /// Names it covers, `|` between alternatives; `*` matches any run of
    /// characters.
    pub names: &'static str,
    /// Headers it covers (a path suffix; `*` for any).
    pub header: &'static str,
    /// Why.
    pub reason: &'static str,
}

use Kind::*;

/// Everything of the headers deliberately not compared, with the reason.
pub const EXCLUSIONS: &[Exclusion] = &[
    Exclusion {
        kind: Macro,
        names: "_*_H*",
        header: "*",
        reason: "include guard",
    },
    Exclusion {
        kind: Macro,
        names: "__PMC_*",
        header: "*",
        reason: "list macro that generates enumerators, names or tables (the enumerators it makes are compared)",
    },
    Exclusion {
        kind: Macro,
        names: "PMC_EV_ARMV7_CORTEX_A8_*",
        header: "dev/hwpmc/pmc_events.h",
        reason: "defined as PMC_EV_ARMV7_PMNC_SW_INCR and PMC_EV_ARMV7_PMUEXTIN_EVT, which are alias strings, not enumerators: C cannot evaluate them either",
    },
    Exclusion {
        kind: Macro,
        names: "PMC_MODULE_NAME",
        header: "sys/pmc.h",
        reason: "a string (\"hwpmc\"), not a number; libpmc looks the module up by it (transport.rs)",
    },
    Exclusion {
        kind: Macro,
        names: "PMCLOG_ENTRY_HEADER",
        header: "sys/pmclog.h",
        reason: "expands to the three header members, compared in every record",
    },
    Exclusion {
        kind: Macro,
        names: "PMCLOG_*ADDR",
        header: "machine/pmc_mdep.h",
        reason: "the kernel log writer's statement macros (emit or read an address); their effect is the record layout, compared",
    },
    Exclusion {
        kind: Macro,
        names: "PMC_CALL_HOOK*|PMC_HOOK_INSTALLED|PMC_SOFT_*|PMC_SWITCH_CONTEXT|PMC_*_HAS_SAMPLES\
                |PMC_IS_PENDING_CALLCHAIN|PMC_PROC_IS_USING_PMCS|PMC_SYSTEM_SAMPLING_ACTIVE",
        header: "sys/pmckern.h",
        reason: "kernel hook and soft-event macros (PMC_CALL_HOOK, PMC_SOFT_DEFINE, ...) that expand to code inside the kernel, not to values",
    },
    Exclusion {
        kind: Aggregate,
        names: "struct pmc_soft",
        header: "sys/pmckern.h",
        reason: "kernel-internal (a soft event's descriptor, with kernel pointers); never crosses to user space",
    },
    Exclusion {
        kind: Aggregate,
        names: "struct pmc_domain_buffer_header",
        header: "sys/pmckern.h",
        reason: "kernel-internal (the log's per-domain buffer list); never crosses to user space",
    },
    Exclusion {
        kind: Member,
        names: "struct pmc_soft.*",
        header: "sys/pmckern.h",
        reason: "members of a kernel-internal struct (see struct pmc_soft)",
    },
    Exclusion {
        kind: Member,
        names: "struct pmc_domain_buffer_header.*",
        header: "sys/pmckern.h",
        reason: "members of a kernel-internal struct (see struct pmc_domain_buffer_header)",
    },
    Exclusion {
        kind: Macro,
        names: "AMD_*",
        header: "dev/hwpmc/hwpmc_amd.h",
        reason: "the AMD class's MSR numbers and register helpers, used only inside the driver's AMD backend (still to come); the allocation ABI's AMD bits are compared",
    },
    Exclusion {
        kind: Macro,
        names: "*",
        header: "dev/hwpmc/hwpmc_core.h",
        reason: "the Intel class's MSR numbers and register helpers (IA32_PERF_CAPABILITIES, PERFCAP_*, ...), used only inside the driver's Intel backend (still to come); the allocation ABI's Intel bits are compared",
    },
    Exclusion {
        kind: Macro,
        names: "UCP_*",
        header: "dev/hwpmc/hwpmc_uncore.h",
        reason: "the uncore class's field helpers (UCP_EVSEL(x), ...), used only inside the driver's uncore backend (still to come); the UCP_* bits are compared",
    },
    Exclusion {
        kind: Macro,
        names: "*",
        header: "dev/hwpmc/hwpmc_arm64.h",
        reason: "the ARMv8 class's register helpers, used only inside the driver's arm64 backend (still to come)",
    },
    Exclusion {
        kind: Macro,
        names: "*",
        header: "dev/hwpmc/pmu_dmc620_reg.h",
        reason: "DMC-620 register offsets and helpers of the driver's arm64 backend (still to come)",
    },
    Exclusion {
        kind: Macro,
        names: "EXTERR_*",
        header: "sys/exterr_cat.h",
        reason: "the extended-error categories of other subsystems (mmap, file descriptors, ...); uapi carries hwpmc's",
    },
    Exclusion {
        kind: Aggregate,
        names: "struct kexterr",
        header: "sys/_exterr.h",
        reason: "kernel-internal (a thread's pending extended error, with a kernel pointer); what reaches user space is struct uexterror, compared",
    },
    Exclusion {
        kind: Member,
        names: "struct kexterr.*",
        header: "sys/_exterr.h",
        reason: "members of a kernel-internal struct (see struct kexterr)",
    },
    Exclusion {
        kind: Enumerator,
        names: "PMC_CPU_INTEL_XSCALE",
        header: "sys/pmc.h",
        reason: "retired in the 2026 ABI (ADDITIONS_2026: PMC_CLASS_XSCALE and PMC_CPU_INTEL_XSCALE are gone)",
    },
    Exclusion {
        kind: Enumerator,
        names: "PMC_CLASS_XSCALE",
        header: "sys/pmc.h",
        reason: "retired in the 2026 ABI (ADDITIONS_2026: PMC_CLASS_XSCALE and PMC_CPU_INTEL_XSCALE are gone)",
    },
];

/// The kernel-only definitions of the headers (the `_KERNEL` parts, read
/// by the kernel translation unit) are the driver's own structures,
/// macros and prototypes, not ABI; those that matter to the ABI (the
/// tunables' defaults) are in the manifest. This is the one exclusion
/// that covers the rest.
pub const KERNEL_ONLY: &str = "defined only under _KERNEL: the driver's own structures, macros and \
     prototypes, not the user/kernel ABI (the tunables' defaults among them are compared)";

/// Whether `name` matches `pattern`, where `*` stands for any run of
/// characters.
pub fn glob(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, rest)) => {
            let Some(tail) = name.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len())
                .filter(|&i| tail.is_char_boundary(i))
                .any(|i| glob(rest, &tail[i..]))
        }
    }
}

impl Exclusion {
    /// The kind, as a word.
    pub fn kind_word(&self) -> &'static str {
        self.kind.word()
    }

    /// Whether the exclusion covers `item`.
    pub fn covers(&self, item: &Item) -> bool {
        self.kind == item.kind
            && (self.header == "*" || item.header.ends_with(self.header))
            && self.names.split('|').any(|p| glob(p.trim(), &item.name))
    }
}

/// The ABI header a preprocessor file name belongs to, as a short path;
/// None for other headers.
fn abi_header(file: &str) -> Option<String> {
    const EXACT: &[&str] = &[
        "sys/pmc.h",
        "sys/pmclog.h",
        "sys/pmckern.h",
        "sys/hwt.h",
        "sys/hwt_record.h",
        "sys/exterrvar.h",
        "sys/_exterr.h",
        "sys/_uexterror.h",
        "sys/exterr_cat.h",
        "machine/pmc_mdep.h",
    ];
    if let Some(h) = EXACT.iter().find(|h| file.ends_with(&format!("/{h}"))) {
        return Some((*h).to_string());
    }
    file.find("/dev/hwpmc/").map(|i| file[i + 1..].to_string())
}

/// Splits `body` at `sep` outside braces, brackets and parentheses.
fn split_top(body: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in body.char_indices() {
        match c {
            '{' | '(' | '[' => depth += 1,
            '}' | ')' | ']' => depth -= 1,
            c if c == sep && depth == 0 => {
                out.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&body[start..]);
    out
}

/// The text between the brace at `open` and its match, and the index after
/// the closing brace.
fn braced(text: &str, open: usize) -> Option<(&str, usize)> {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some((&text[open + 1..open + i], open + i + 1));
                }
            }
            _ => {}
        }
    }
    None
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The last identifier of a declaration, with array bounds, bit-field
/// widths and attributes taken away.
fn declared_name(decl: &str) -> Option<String> {
    let mut d = decl.to_string();
    while let Some(i) = d.find("__attribute__") {
        let Some(open) = d[i..].find('(') else { break };
        let mut depth = 0;
        let mut end = d.len();
        for (j, c) in d[i + open..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + open + j + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        d.replace_range(i..end, "");
    }
    let d = d.split('[').next().unwrap_or("");
    let d = d.split(':').next().unwrap_or("").trim_end();
    let start = d
        .char_indices()
        .rev()
        .take_while(|&(_, c)| is_ident(c))
        .last()
        .map(|(i, _)| i)?;
    let name = &d[start..];
    (!name.is_empty() && !name.chars().next()?.is_ascii_digit()).then(|| name.to_string())
}

/// The members of an aggregate body, anonymous members flattened.
fn members(body: &str, out: &mut Vec<String>) {
    for decl in split_top(body, ';') {
        let decl = decl.trim();
        if decl.is_empty() {
            continue;
        }
        if let Some(open) = decl.find('{') {
            let Some((inner, after)) = braced(decl, open) else {
                continue;
            };
            match declared_name(&decl[after..]) {
                Some(name) => out.push(name),
                // Anonymous: its members are the parent's.
                None => members(inner, out),
            }
            continue;
        }
        // `int a, b;` declares two.
        for part in split_top(decl, ',') {
            if let Some(name) = declared_name(part) {
                out.push(name);
            }
        }
    }
}

/// The definitions of the ABI headers in `-E -dD` output.
pub fn scan(preprocessed: &str) -> BTreeSet<Item> {
    let mut items = BTreeSet::new();
    let mut header: Option<String> = None;
    // Code of the ABI headers, with the header of each piece.
    let mut code: Vec<(String, String)> = Vec::new();
    for line in preprocessed.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            if let Some(q) = rest.find('"') {
                let file = rest[q + 1..].split('"').next().unwrap_or("");
                header = abi_header(file);
                continue;
            }
        }
        let Some(h) = &header else { continue };
        if let Some(def) = line.strip_prefix("#define ") {
            let name: String = def.chars().take_while(|&c| is_ident(c)).collect();
            items.insert(Item {
                kind: Macro,
                name,
                header: h.clone(),
            });
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        match code.last_mut() {
            Some((last, text)) if last == h => {
                text.push('\n');
                text.push_str(line);
            }
            _ => code.push((h.clone(), line.to_string())),
        }
    }
    for (h, text) in &code {
        let mut at = 0;
        while at < text.len() {
            let Some(open) = text[at..].find('{').map(|i| at + i) else {
                break;
            };
            let Some((body, after)) = braced(text, open) else {
                break;
            };
            // What introduces the braces: `struct X`, `union X`, `enum X`.
            let head: Vec<&str> = text[..open].split_whitespace().rev().take(2).collect();
            match head.as_slice() {
                [tag, kw] if *kw == "struct" || *kw == "union" => {
                    let name = format!("{kw} {tag}");
                    items.insert(Item {
                        kind: Aggregate,
                        name: name.clone(),
                        header: h.clone(),
                    });
                    let mut m = Vec::new();
                    members(body, &mut m);
                    for f in m {
                        items.insert(Item {
                            kind: Member,
                            name: format!("{name}.{f}"),
                            header: h.clone(),
                        });
                    }
                }
                [tag, _] | [tag] if *tag == "enum" || head.get(1) == Some(&"enum") => {
                    for e in split_top(body, ',') {
                        let name = e.split('=').next().unwrap_or("").trim();
                        if !name.is_empty() {
                            items.insert(Item {
                                kind: Enumerator,
                                name: name.to_string(),
                                header: h.clone(),
                            });
                        }
                    }
                }
                _ => {}
            }
            at = after;
        }
        // Typedefs outside braces.
        for stmt in split_top(text, ';') {
            let stmt = stmt.trim();
            if let Some(rest) = stmt.strip_prefix("typedef ") {
                if !rest.contains('(') {
                    if let Some(name) = declared_name(rest) {
                        items.insert(Item {
                            kind: Typedef,
                            name,
                            header: h.clone(),
                        });
                    }
                }
            }
        }
    }
    items
}

/// Whether the manifest's C texts (`texts`, and their words `words`)
/// account for `item`.
pub fn in_manifest(item: &Item, texts: &BTreeSet<String>, words: &BTreeSet<String>) -> bool {
    match item.kind {
        Macro | Enumerator => words.contains(&item.name),
        Typedef => texts.contains(&format!("sizeof({})", item.name)),
        Aggregate => texts.contains(&format!("sizeof({})", item.name)),
        Member => {
            let (agg, member) = item.name.rsplit_once('.').expect("aggregate.member");
            texts.contains(&format!("offsetof({agg}, {member})"))
        }
    }
}

/// The words (identifiers) of C texts.
pub fn words<'a>(texts: impl IntoIterator<Item = &'a String>) -> BTreeSet<String> {
    texts
        .into_iter()
        .flat_map(|t| t.split(|c: char| !is_ident(c)))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"# 1 "/inc/sys/pmc.h" 1
#define _SYS_PMC_H_
#define PMC_VERSION 0x0A000000
#define PMC_ID_TO_CPU(ID) (((ID) & 0xFFF00000) >> 20)
enum pmc_mode { PMC_MODE_SS = 0, PMC_MODE_SC = 1, };
typedef uint32_t pmc_id_t;
struct pmc_op_x {
 uint32_t a, b;
 uint64_t c[4];
 union { struct { int d; } s; int e; };
 unsigned f : 3;
} __attribute__((__packed__));
# 5 "/inc/sys/types.h" 2
#define NOT_OURS 1
struct not_ours { int z; };
"#;

    #[test]
    fn the_scan_finds_what_the_abi_headers_define() {
        let items = scan(SAMPLE);
        let names: Vec<String> = items.iter().map(|i| format!("{}", i)).collect();
        for want in [
            "macro _SYS_PMC_H_ (sys/pmc.h)",
            "macro PMC_VERSION (sys/pmc.h)",
            "macro PMC_ID_TO_CPU (sys/pmc.h)",
            "enumerator PMC_MODE_SS (sys/pmc.h)",
            "enumerator PMC_MODE_SC (sys/pmc.h)",
            "typedef pmc_id_t (sys/pmc.h)",
            "type struct pmc_op_x (sys/pmc.h)",
            "member struct pmc_op_x.a (sys/pmc.h)",
            "member struct pmc_op_x.b (sys/pmc.h)",
            "member struct pmc_op_x.c (sys/pmc.h)",
            "member struct pmc_op_x.s (sys/pmc.h)",
            "member struct pmc_op_x.e (sys/pmc.h)",
            "member struct pmc_op_x.f (sys/pmc.h)",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
        }
        assert_eq!(items.len(), 13, "{names:?}");
    }

    #[test]
    fn globs_and_exclusions() {
        assert!(glob("_*_H*", "_SYS_PMC_H_"));
        assert!(glob("__PMC_*", "__PMC_EV_BLOCK"));
        assert!(!glob("__PMC_*", "PMC_EV_K8_FIRST"));
        assert!(glob("PMCLOG_*ADDR", "PMCLOG_EMITADDR"));
        assert!(!glob("PMCLOG_*ADDR", "PMCLOG_EMITADDRX"));
        let guard = Item {
            kind: Macro,
            name: "_SYS_HWT_H_".into(),
            header: "sys/hwt.h".into(),
        };
        assert!(EXCLUSIONS.iter().any(|e| e.covers(&guard)));
        let constant = Item {
            kind: Macro,
            name: "PMC_VERSION_MAJOR".into(),
            header: "sys/pmc.h".into(),
        };
        assert!(!EXCLUSIONS.iter().any(|e| e.covers(&constant)));
    }

    #[test]
    fn the_manifest_accounts_for_items_by_their_c_text() {
        let texts: BTreeSet<String> = [
            "PMC_ID_TO_CPU(0xABC30F7E)",
            "sizeof(struct pmc_op_x)",
            "offsetof(struct pmc_op_x, a)",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let w = words(&texts);
        let item = |kind, name: &str| Item {
            kind,
            name: name.into(),
            header: "sys/pmc.h".into(),
        };
        assert!(in_manifest(&item(Macro, "PMC_ID_TO_CPU"), &texts, &w));
        assert!(in_manifest(&item(Aggregate, "struct pmc_op_x"), &texts, &w));
        assert!(in_manifest(&item(Member, "struct pmc_op_x.a"), &texts, &w));
        assert!(!in_manifest(&item(Member, "struct pmc_op_x.b"), &texts, &w));
        assert!(!in_manifest(&item(Typedef, "pmc_id_t"), &texts, &w));
    }
}
