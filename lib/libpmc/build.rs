//! Build script of libpmc:
//! - gives the shared library FreeBSD's soname, so programs linked against
//!   FreeBSD's libpmc load this one and the other way round;
//! - generates the PMU event tables (FreeBSD's jevents step) from the
//!   pmu-events JSON tree of the target architecture.
//!
//! The tree is, in order: `$PMU_EVENTS_ARCH` (set by the FreeBSD make
//! glue), the FreeBSD tree's `lib/libpmc/pmu-events/arch` beside this
//! crate, or the test copy under `tests/data`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

#[path = "pmc_version.rs"]
mod pmc_version;

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpmc.so.5");
    tree_pmc_version();
    println!("cargo:rerun-if-env-changed=PMU_EVENTS_ARCH");
    println!("cargo:rerun-if-changed=build.rs");

    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let tree = env::var_os("PMU_EVENTS_ARCH")
        .map(PathBuf::from)
        .or_else(|| Some(manifest.join("pmu-events/arch")).filter(|p| p.is_dir()))
        .unwrap_or_else(|| manifest.join("tests/data/pmu-events/arch"));
    // The target's directory of the tree; PMU_EVENTS_ARCH_DIR names
    // another (tools/pmu-compat builds every architecture's tables on
    // one host).
    println!("cargo:rerun-if-env-changed=PMU_EVENTS_ARCH_DIR");
    let chosen = env::var("PMU_EVENTS_ARCH_DIR").ok();
    let arch = match (
        chosen.as_deref(),
        env::var("CARGO_CFG_TARGET_ARCH").as_deref(),
    ) {
        (Some(dir), _) => Some(dir),
        (None, Ok("x86_64" | "x86")) => Some("x86"),
        (None, Ok("aarch64")) => Some("arm64"),
        (None, Ok("powerpc64" | "powerpc")) => Some("powerpc"),
        _ => None,
    };
    let models = match arch {
        Some(arch) => read_arch(&tree.join(arch)),
        None => Vec::new(),
    };
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it"));
    fs::write(out.join("pmu_events.rs"), render(&models)).expect("write pmu_events.rs");
}

/// One mapfile.csv line whose event directory exists.
struct Model {
    cpuid: String,
    version: String,
    name: String,
    events: Vec<Event>,
}

/// One event as the tables keep it.
struct Event {
    name: String,
    encoding: String,
    desc: String,
    long_desc: String,
    topic: String,
    pmu: String,
    counter: String,
    deprecated: bool,
}

impl Event {
    /// A table entry without a name.
    fn nameless(topic: &str) -> Event {
        Event {
            name: String::new(),
            encoding: String::new(),
            desc: String::new(),
            long_desc: String::new(),
            topic: topic.replace('-', " "),
            pmu: String::new(),
            counter: String::new(),
            deprecated: false,
        }
    }
}

fn read_arch(dir: &Path) -> Vec<Model> {
    let standard = read_standard_events(dir);
    let mapfile = dir.join("mapfile.csv");
    println!("cargo:rerun-if-changed={}", mapfile.display());
    let Ok(text) = fs::read_to_string(&mapfile) else {
        return Vec::new();
    };
    let mut models = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with("Family-model") {
            continue;
        }
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() < 4 || fields[3].trim() != "core" {
            continue;
        }
        let sub = dir.join(fields[2].trim());
        if !sub.is_dir() {
            continue;
        }
        models.push(Model {
            cpuid: fields[0].trim().to_owned(),
            version: fields[1].trim().to_owned(),
            name: fields[2].trim().to_owned(),
            events: read_model(&sub, &standard),
        });
    }
    models
}

type Fields = BTreeMap<String, String>;

/// The architecture-standard events (arm64's `ArchStdEvent` entries refer
/// to them): the JSON files directly in the architecture directory.
fn read_standard_events(dir: &Path) -> BTreeMap<String, Fields> {
    let mut standard = BTreeMap::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return standard;
    };
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        println!("cargo:rerun-if-changed={}", path.display());
        let text = fs::read_to_string(&path).expect("read standard events");
        let Ok(Json::Array(items)) = Json::parse(&text) else {
            panic!("{}: not an array of events", path.display());
        };
        for item in items {
            if let Json::Object(fields) = item
                && let Some(name) = fields.get("ArchStdEvent").or(fields.get("EventName"))
            {
                standard.insert(name.to_ascii_uppercase(), fields.clone());
            }
        }
    }
    standard
}

fn read_model(dir: &Path, standard: &BTreeMap<String, Fields>) -> Vec<Event> {
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("read event directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut events = Vec::new();
    for file in files {
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let topic = stem.split('.').next().unwrap_or("").to_owned();
        let text = fs::read_to_string(&file).expect("read event file");
        let value = Json::parse(&text)
            .unwrap_or_else(|e| panic!("{}: bad JSON at byte {e}", file.display()));
        let Json::Array(items) = value else {
            panic!("{}: not an array of events", file.display());
        };
        for item in items {
            let Json::Object(mut fields) = item else {
                continue;
            };
            // A reference to a standard event takes what it does not say
            // itself from there.
            if let Some(std_name) = fields.get("ArchStdEvent").cloned() {
                if let Some(base) = standard.get(&std_name.to_ascii_uppercase()) {
                    for (k, v) in base {
                        fields.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
                fields.entry("EventName".into()).or_insert(std_name);
            }
            // Every object is an entry of the table, as FreeBSD's
            // jevents writes it, those without an EventName (metrics,
            // counter descriptions) too: the index of an event, which
            // logs and PMC_OP_PMCALLOCATE carry, counts them. Such an
            // entry has no name, and nothing finds or lists it.
            events.push(event_of(&fields, &topic).unwrap_or_else(|| Event::nameless(&topic)));
        }
    }
    events
}

/// Builds an entry as FreeBSD's jevents does: the lowercase name, the
/// encoding string FreeBSD's pmu util parses (`event=0xc4,period=400009`,
/// fixed fields in jevents' order, a field skipped only when it is "0"),
/// the description without its final period, the topic from the file name
/// and the PMU from the unit.
fn event_of(f: &BTreeMap<String, String>, topic: &str) -> Option<Event> {
    let name = f.get("EventName")?.to_ascii_lowercase();
    let nz = |k: &str| f.get(k).filter(|v| v.as_str() != "0").map(|v| v.trim());
    let parse = |v: &str| {
        let v = v.split(',').next().unwrap_or("").trim();
        match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => v.parse().ok(),
        }
    };
    let mut pieces = Vec::new();
    let code = f.get("EventCode").and_then(|c| parse(c)).unwrap_or(0)
        | f.get("ExtSel").and_then(|c| parse(c)).unwrap_or(0) << 8;
    pieces.push(if code == 0 {
        "event=0".to_owned()
    } else {
        format!("event={code:#x}")
    });
    for (field, key) in [
        ("AnyThread", "any"),
        ("PortMask", "ch_mask"),
        ("CounterMask", "cmask"),
        ("EdgeDetect", "edge"),
        ("FCMask", "fc_mask"),
        ("Invert", "inv"),
        ("SampleAfterValue", "period"),
        ("UMask", "umask"),
    ] {
        if let Some(v) = nz(field) {
            pieces.push(format!("{key}={v}"));
        }
    }
    if let (Some(index), Some(value)) = (nz("MSRIndex"), f.get("MSRValue")) {
        let index = index
            .split(',')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let key = match index.as_str() {
            "0x3f6" => Some("ldlat"),
            "0x1a6" | "0x1a7" => Some("offcore_rsp"),
            "0x3f7" => Some("frontend"),
            _ => None,
        };
        if let Some(key) = key {
            pieces.push(format!("{key}={}", value.trim()));
        }
    }
    let unit = f.get("Unit").map(|u| u.trim().to_owned());
    let pmu = match unit.as_deref() {
        None => "cpu".to_owned(),
        Some("CBO") => "uncore_cbox".to_owned(),
        Some("QPI LL") => "uncore_qpi".to_owned(),
        Some("SBO") => "uncore_sbox".to_owned(),
        Some("iMPH-U") => "uncore_arb".to_owned(),
        Some("UPI LL") => "uncore_upi".to_owned(),
        Some("L3PMC") => "amd_l3".to_owned(),
        Some("DFPMC") => "amd_df".to_owned(),
        Some("CPU-M-CF") => "cpum_cf".to_owned(),
        Some(u @ ("cpu_core" | "cpu_atom")) => u.to_owned(),
        Some(u) => format!("uncore_{}", u.to_ascii_lowercase()),
    };
    let describe = |text: &str| {
        let mut d = text.trim_end().trim_end_matches('.').to_owned();
        if let Some(errata) = f.get("Errata").filter(|e| e.as_str() != "null") {
            d += &format!(". Spec update: {errata}");
        }
        if unit.is_some() {
            d += &format!(". Unit: {pmu} ");
        }
        d
    };
    Some(Event {
        name,
        encoding: pieces.join(","),
        desc: f
            .get("BriefDescription")
            .map(|d| describe(d))
            .unwrap_or_default(),
        long_desc: f
            .get("PublicDescription")
            .map(|d| describe(d))
            .unwrap_or_default(),
        topic: topic.replace('-', " "),
        pmu,
        counter: f.get("Counter").cloned().unwrap_or_default(),
        deprecated: f.get("Deprecated").is_some_and(|v| v == "1"),
    })
}

fn render(models: &[Model]) -> String {
    let mut s = String::from("// Generated by lib/libpmc/build.rs from pmu-events JSON.\n");
    for (i, m) in models.iter().enumerate() {
        let _ = writeln!(s, "static EVENTS_{i}: [PmuEvent; {}] = [", m.events.len());
        for e in &m.events {
            let _ = writeln!(
                s,
                "PmuEvent{{name:c{:?},encoding:{:?},desc:{:?},long_desc:{:?},topic:{:?},pmu:{:?},counter:{:?},deprecated:{}}},",
                e.name, e.encoding, e.desc, e.long_desc, e.topic, e.pmu, e.counter, e.deprecated
            );
        }
        s.push_str("];\n");
    }
    s.push_str("/// The models of mapfile.csv with their events, in mapfile order.\n");
    s.push_str("pub static PMU_MODELS: &[PmuModel] = &[\n");
    for (i, m) in models.iter().enumerate() {
        let _ = writeln!(
            s,
            "PmuModel{{cpuid:{:?},version:{:?},name:{:?},events:&EVENTS_{i}}},",
            m.cpuid, m.version, m.name
        );
    }
    s.push_str("];\n");
    s
}

/// The JSON subset of pmu-events files: arrays, objects, strings and
/// scalars (kept as their text).
enum Json {
    Array(Vec<Json>),
    Object(BTreeMap<String, String>),
    Scalar(String),
}

impl Json {
    fn parse(text: &str) -> Result<Json, usize> {
        let mut p = Parser {
            b: text.as_bytes(),
            i: 0,
        };
        let v = p.value()?;
        p.ws();
        if p.i != p.b.len() {
            return Err(p.i);
        }
        Ok(v)
    }
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Result<(), usize> {
        self.ws();
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.i)
        }
    }

    fn value(&mut self) -> Result<Json, usize> {
        self.ws();
        match self.b.get(self.i) {
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.b.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Json::Array(items));
                }
                loop {
                    items.push(self.value()?);
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Json::Array(items));
                        }
                        _ => return Err(self.i),
                    }
                }
            }
            Some(b'{') => {
                self.i += 1;
                let mut fields = BTreeMap::new();
                self.ws();
                if self.b.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Json::Object(fields));
                }
                loop {
                    self.ws();
                    let key = self.string()?;
                    self.eat(b':')?;
                    // Nested values are not part of event entries.
                    if let Json::Scalar(v) = self.value()? {
                        fields.insert(key, v);
                    }
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Object(fields));
                        }
                        _ => return Err(self.i),
                    }
                }
            }
            Some(b'"') => Ok(Json::Scalar(self.string()?)),
            Some(_) => {
                let start = self.i;
                while self.i < self.b.len() && !b",]} \t\r\n".contains(&self.b[self.i]) {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.b[start..self.i]).map_err(|_| start)?;
                Ok(Json::Scalar(text.to_owned()))
            }
            None => Err(self.i),
        }
    }

    fn string(&mut self) -> Result<String, usize> {
        if self.b.get(self.i) != Some(&b'"') {
            return Err(self.i);
        }
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let c = *self.b.get(self.i).ok_or(self.i)?;
            self.i += 1;
            match c {
                b'"' => return String::from_utf8(out).map_err(|_| self.i),
                b'\\' => {
                    let e = *self.b.get(self.i).ok_or(self.i)?;
                    self.i += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'b' | b'f' => {}
                        b'u' => {
                            let hex = self.b.get(self.i..self.i + 4).ok_or(self.i)?;
                            let hex = std::str::from_utf8(hex).map_err(|_| self.i)?;
                            let code = u32::from_str_radix(hex, 16).map_err(|_| self.i)?;
                            self.i += 4;
                            let ch = char::from_u32(code).unwrap_or('\u{fffd}');
                            out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                        }
                        other => out.push(other),
                    }
                }
                _ => out.push(c),
            }
        }
    }
}

/// Installed in a FreeBSD tree (lib/libpmc beside sys/), libpmc sends the
/// tree's `PMC_VERSION`, which the driver built in the same tree reports;
/// elsewhere (the host's builds) the newest ABI's, as `uapi` has it.
fn tree_pmc_version() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let header = manifest.join("../../sys/sys/pmc.h");
    // Only a header that exists is watched: cargo takes a missing one for
    // a change, and would run this script again on every build.
    if let Ok(text) = std::fs::read_to_string(&header) {
        println!("cargo:rerun-if-changed={}", header.display());
        match pmc_version::parse(&text) {
            Some(v) => println!("cargo:rustc-env=LIBPMC_TREE_PMC_VERSION={v}"),
            None => panic!("{}: no PMC_VERSION_MAJOR/MINOR/PATCH", header.display()),
        }
    }
}
