//! The PMU event tables generated from the pmu-events JSON, the CPU-key
//! lookup, aliases, the encoding of allocation requests for Intel, AMD
//! and ARMv8, the C entry points, and event names in logs.
#![cfg(any(target_arch = "x86_64", target_arch = "x86"))]

use core::ffi::CStr;
use std::collections::BTreeMap;
use std::path::Path;

use pmc::libpmc_pmu_util::{
    DEFAULT_SAMPLE_COUNT, EventDesc, PMU_MODELS, PmuEvent, PmuModel, PmuTable, Vendor, md_bytes,
};
use uapi::Plain;
use uapi::pmc::{PmcCaps, PmcClass, PmcFlags, PmcOpPmcallocate};

const SKYLAKE: &str = "GenuineIntel-6-5E-3";
const USR: u64 = 1 << 16;
const OS: u64 = 1 << 17;
const EDGE: u64 = 1 << 18;
const INT: u64 = 1 << 20;
const ANY: u64 = 1 << 21;
const INV: u64 = 1 << 23;

fn skylake() -> PmuTable {
    PmuTable::for_cpuid(SKYLAKE).expect("skylake table")
}

fn request(caps: PmcCaps) -> PmcOpPmcallocate {
    let mut a = PmcOpPmcallocate::zeroed();
    a.pm_caps = caps.bits();
    a
}

fn md_u64(a: &PmcOpPmcallocate, at: usize) -> u64 {
    u64::from_ne_bytes(md_bytes(a)[at..at + 8].try_into().unwrap())
}

fn md_u32(a: &PmcOpPmcallocate, at: usize) -> u32 {
    u32::from_ne_bytes(md_bytes(a)[at..at + 4].try_into().unwrap())
}

/// The objects of a model's JSON files, in jevents' order (files sorted
/// by name), each with its EventName if it has one: read independently
/// of the generator, by a plain scan of the pretty-printed files (each
/// object opens with a line of its own).
fn json_entries(model: &str) -> Vec<Option<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/pmu-events/arch/x86")
        .join(model);
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut entries = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        for line in text.lines() {
            let line = line.trim();
            if line == "{" {
                entries.push(None);
            } else if let Some(rest) = line.strip_prefix("\"EventName\": \"") {
                let name = rest.trim_end_matches(',').trim_end_matches('"');
                *entries.last_mut().expect("inside an object") = Some(name.to_ascii_lowercase());
            }
        }
    }
    entries
}

/// Every object of the JSON is an entry, as jevents writes the table:
/// those without an EventName (the counter descriptions of counter.json,
/// FreeBSD's metrics files) have no name but count in the indices that
/// PMU events are allocated and logged by.
#[test]
fn tables_hold_every_object_of_the_json_in_order() {
    let names: Vec<&str> = PMU_MODELS.iter().map(|m| m.name).collect();
    // mapfile.csv order, only models whose directory exists.
    assert_eq!(
        names,
        [
            "alderlake",
            "goldmont",
            "haswell",
            "icelake",
            "sapphirerapids",
            "skylake"
        ]
    );
    for model in PMU_MODELS {
        let generated: Vec<Option<String>> = model
            .events
            .iter()
            .map(|e| e.is_named().then(|| e.name.to_str().unwrap().to_owned()))
            .collect();
        assert_eq!(generated, json_entries(model.name), "{}", model.name);
    }
    // Such an entry is neither found nor named by its index; the index
    // of an event after it counts it.
    let t = skylake();
    let nameless = t
        .model
        .events
        .iter()
        .position(|e| !e.is_named())
        .expect("skylake's counter.json has objects without a name");
    assert!(t.event(nameless).is_none());
    assert!(t.find("").is_none());
    let json = json_entries("skylake");
    let after = (nameless + 1..json.len())
        .find(|&i| json[i].is_some())
        .unwrap();
    let name = json[after].clone().unwrap();
    assert_eq!(t.find(&name).map(|(i, _)| i), Some(after));
}

#[test]
fn encodings_are_built_as_jevents_builds_them() {
    let t = skylake();
    let enc = |n: &str| t.find(n).unwrap().1.encoding;
    // EventCode 0x14, CounterMask 1, SampleAfterValue 2000003, UMask 0x1.
    assert_eq!(
        enc("arith.divider_active"),
        "event=0x14,cmask=1,period=2000003,umask=0x1"
    );
    // No UMask in the JSON.
    assert_eq!(
        enc("br_inst_retired.all_branches"),
        "event=0xc4,period=400009"
    );
    // No EventCode: a fixed-counter event.
    assert_eq!(enc("inst_retired.any"), "event=0,period=2000003,umask=0x1");
    let e = t.find("longest_lat_cache.miss").unwrap().1;
    assert_eq!(e.encoding, "event=0x2e,period=100003,umask=0x41");
    assert_eq!(e.topic, "cache");
    assert_eq!(e.pmu, "cpu");
    // The final period goes, the errata are appended.
    assert_eq!(
        e.desc,
        "Core-originated cacheable demand requests missed L3. Spec update: SKL057"
    );
    // The off-core response MSR value travels as offcore_rsp.
    let haswell = PmuTable::for_cpuid("GenuineIntel-6-3C-3").unwrap();
    let e = haswell
        .find("offcore_response.all_data_rd.l3_miss.any_response")
        .unwrap()
        .1;
    assert_eq!(
        e.encoding,
        "event=0xb7,period=100003,umask=0x1,offcore_rsp=0x3FFFC00091"
    );
    assert_eq!(
        EventDesc::parse(e.encoding).unwrap(),
        EventDesc {
            event: 0xb7,
            umask: Some(1),
            period: Some(100003),
            offcore_rsp: 0x3F_FFC0_0091,
            ..EventDesc::default()
        }
    );
}

#[test]
fn cpu_keys_pick_the_first_matching_row() {
    let model = |k: &str| PmuTable::for_cpuid(k).map(|t| t.model.name);
    assert_eq!(model("GenuineIntel-6-5E-3"), Some("skylake"));
    assert_eq!(model("GenuineIntel-6-5E"), Some("skylake"));
    assert_eq!(model("GenuineIntel-6-3C"), Some("haswell"));
    assert_eq!(model("GenuineIntel-6-9A-4"), Some("alderlake"));
    assert_eq!(model("GenuineIntel-6-8F-8"), Some("sapphirerapids"));
    // A match must end at the key's end or a '-'.
    assert_eq!(model("GenuineIntel-6-5E3"), None);
    // A row whose directory is absent (skylakex) gives no table.
    assert_eq!(model("GenuineIntel-6-55-4"), None);
    assert_eq!(model("AuthenticAMD-23-31-0"), None);
    assert_eq!(model("nonsense"), None);
}

#[test]
fn intel_programmable_events_and_qualifiers() {
    let t = skylake();
    let (index, _) = t.find("br_inst_retired.all_branches").unwrap();
    let mut a = request(PmcCaps::empty());
    t.allocate("BR_INST_RETIRED.ALL_BRANCHES", &mut a).unwrap();
    assert_eq!(a.pm_class, PmcClass::Iap.raw());
    assert_eq!(a.pm_ev, index as u32);
    assert_eq!(a.pm_flags, PmcFlags::EV_PMU.bits());
    assert_eq!(
        a.pm_caps,
        (PmcCaps::READ | PmcCaps::WRITE | PmcCaps::QUALIFIER).bits()
    );
    // Neither usr nor os: both.
    assert_eq!(md_u64(&a, 0), 0xC4 | USR | OS);

    let mut a = request(PmcCaps::empty());
    t.allocate("br_inst_retired.all_branches,usr", &mut a)
        .unwrap();
    assert_eq!(md_u64(&a, 0), 0xC4 | USR);
    assert_ne!(a.pm_caps & PmcCaps::USER.bits(), 0);

    let mut a = request(PmcCaps::INTERRUPT);
    t.allocate("arith.divider_active,os,edge,inv,cmask=3,any", &mut a)
        .unwrap();
    assert_eq!(
        md_u64(&a, 0),
        0x14 | 0x1 << 8 | OS | EDGE | INV | ANY | INT | 3 << 24
    );

    // The table's own cmask=1 stays unless a qualifier overrides it.
    let mut a = request(PmcCaps::empty());
    t.allocate("arith.divider_active", &mut a).unwrap();
    assert_eq!(md_u64(&a, 0), 0x14 | 0x1 << 8 | USR | OS | 1 << 24);

    // Off-core response: the MSR value in pm_iap_rsp.
    let haswell = PmuTable::for_cpuid("GenuineIntel-6-3C").unwrap();
    let mut a = request(PmcCaps::empty());
    haswell
        .allocate("offcore_response.all_data_rd.l3_miss.any_response", &mut a)
        .unwrap();
    assert_eq!(md_u64(&a, 0), 0xB7 | 0x1 << 8 | USR | OS);
    assert_eq!(md_u64(&a, 8), 0x3F_FFC0_0091);
}

#[test]
fn fixed_and_uncore_events_pick_their_classes() {
    let t = skylake();
    let mut a = request(PmcCaps::empty());
    t.allocate("inst_retired.any,usr", &mut a).unwrap();
    assert_eq!(a.pm_class, PmcClass::Iaf.raw());
    assert_eq!(md_u64(&a, 0), 0x1 << 8 | USR);
    assert_eq!(a.pm_caps & PmcCaps::QUALIFIER.bits(), 0);
    // Fixed counters have no edge, invert or counter mask.
    for bad in [
        "inst_retired.any,edge",
        "inst_retired.any,inv",
        "inst_retired.any,cmask=1",
    ] {
        let mut a = request(PmcCaps::empty());
        assert_eq!(t.allocate(bad, &mut a), Err(libc::EINVAL), "{bad}");
    }
    let alderlake = PmuTable::for_cpuid("GenuineIntel-6-97").unwrap();
    let mut a = request(PmcCaps::empty());
    alderlake
        .allocate("unc_arb_trk_requests.all", &mut a)
        .unwrap();
    assert_eq!(a.pm_class, PmcClass::Ucp.raw());
}

/// FreeBSD's ARMv8 aliases (pmu_armv8_alias_table), any case; the
/// tables of this host's build are x86's, so the names are resolved,
/// not looked up.
#[test]
fn armv8_aliases_are_freebsds() {
    let arm = PmuTable {
        model: &PMU_MODELS[0],
        vendor: pmc::libpmc_pmu_util::Vendor::Arm64,
    };
    for (alias, event) in [
        ("UNHALTED_CORE_CYCLES", "cpu_cycles"),
        ("unhalted-core-cycles", "cpu_cycles"),
        ("unhalted-cycles", "cpu_cycles"),
        ("LLC_MISSES", "ll_cache_miss_rd"),
        ("LLC-REFERENCE", "ll_cache_rd"),
        ("BRANCH_INSTRUCTION_RETIRED", "br_retired"),
        ("BRANCH-MISSES-RETIRED", "br_mis_pred_retired"),
        ("instructions", "inst_retired"),
        ("branches", "br_retired"),
        ("branch-mispredicts", "br_mis_pred_retired"),
        ("interrupts", "exc_irq"),
    ] {
        assert_eq!(arm.resolve_alias(alias), event, "{alias}");
    }
}

#[test]
fn aliases_resolve_per_model() {
    let name = |t: &PmuTable, alias: &str| {
        let (_, e) = t
            .find(alias)
            .unwrap_or_else(|| panic!("{alias} on {}", t.model.name));
        e.name.to_str().unwrap().to_owned()
    };
    let t = skylake();
    assert_eq!(name(&t, "instructions"), "inst_retired.any_p");
    assert_eq!(name(&t, "cycles"), "cpu_clk_unhalted.thread_p");
    assert_eq!(name(&t, "unhalted-cycles"), "cpu_clk_unhalted.thread_p");
    assert_eq!(name(&t, "branches"), "br_inst_retired.all_branches");
    assert_eq!(
        name(&t, "branch-mispredicts"),
        "br_misp_retired.all_branches"
    );
    assert_eq!(name(&t, "cache-references"), "longest_lat_cache.reference");
    assert_eq!(name(&t, "cache-misses"), "longest_lat_cache.miss");
    assert_eq!(name(&t, "LLC-MISSES"), "longest_lat_cache.miss");
    // Goldmont (an Atom) has core_p rather than thread_p.
    let goldmont = PmuTable::for_cpuid("GenuineIntel-6-5C").unwrap();
    assert_eq!(name(&goldmont, "cycles"), "cpu_clk_unhalted.core_p");
    // Every model resolves the common aliases to an event it has.
    for model in PMU_MODELS {
        let t = PmuTable {
            model,
            vendor: Vendor::Intel,
        };
        for alias in ["instructions", "cycles", "branches", "branch-mispredicts"] {
            assert!(t.find(alias).is_some(), "{alias} on {}", model.name);
        }
    }
    let mut a = request(PmcCaps::empty());
    t.allocate("cache-misses,usr", &mut a).unwrap();
    assert_eq!(md_u64(&a, 0), 0x2E | 0x41 << 8 | USR);
}

#[test]
fn unknown_names_and_bad_qualifiers_change_nothing() {
    let t = skylake();
    let before = request(PmcCaps::INTERRUPT);
    for (spec, errno) in [
        ("no_such.event", libc::ENOENT),
        ("", libc::ENOENT),
        ("br_inst_retired.all_branches,bogus", libc::EINVAL),
        ("br_inst_retired.all_branches,cmask=256", libc::EINVAL),
        ("br_inst_retired.all_branches,cmask=", libc::EINVAL),
        ("br_inst_retired.all_branches,usr=1", libc::EINVAL),
    ] {
        let mut a = before;
        assert_eq!(t.allocate(spec, &mut a), Err(errno), "{spec}");
        let fields =
            |r: &PmcOpPmcallocate| (r.pm_caps, r.pm_class, r.pm_ev, r.pm_flags, md_bytes(r));
        assert_eq!(fields(&a), fields(&before), "{spec}");
    }
}

#[test]
fn sample_rates_come_from_the_table() {
    let t = skylake();
    assert_eq!(t.sample_rate("br_inst_retired.all_branches"), 400009);
    assert_eq!(t.sample_rate("branches,usr"), 400009);
    assert_eq!(t.sample_rate("no_such.event"), DEFAULT_SAMPLE_COUNT);
}

static AMD_EVENTS: [PmuEvent; 3] = [
    PmuEvent {
        name: c"ex_ret_brn",
        encoding: "event=0xc2",
        desc: "Retired branch instructions",
        long_desc: "",
        topic: "core",
        pmu: "cpu",
        counter: "",
        deprecated: false,
    },
    PmuEvent {
        name: c"l3_request_g1.caching_l3_cache_accesses",
        encoding: "event=0x1,umask=0x80,l3_slice_mask=0xf,l3_thread_mask=0xff",
        desc: "L3 accesses",
        long_desc: "",
        topic: "l3cache",
        pmu: "amd_l3",
        counter: "",
        deprecated: false,
    },
    PmuEvent {
        name: c"ls_not_halted_cyc",
        encoding: "event=0x76",
        desc: "Cycles not halted",
        long_desc: "",
        topic: "core",
        pmu: "cpu",
        counter: "",
        deprecated: false,
    },
];
static AMD_MODELS: [PmuModel; 1] = [PmuModel {
    cpuid: "AuthenticAMD-23-[[:xdigit:]]+",
    version: "v1",
    name: "amdzen2",
    events: &AMD_EVENTS,
}];

#[test]
fn amd_core_and_l3_events() {
    let t = PmuTable::for_cpuid_in(&AMD_MODELS, "AuthenticAMD-23-31-0").unwrap();
    assert_eq!(t.vendor, Vendor::Amd);
    let mut a = request(PmcCaps::INTERRUPT);
    t.allocate("branches,usr,edge", &mut a).unwrap();
    assert_eq!(a.pm_class, PmcClass::K8.raw());
    assert_eq!(a.pm_ev, 0);
    assert_eq!(md_u64(&a, 0), 0xC2 | USR | EDGE | INT);
    assert_eq!(md_u32(&a, 8), 0, "core sub-class");
    let mut a = request(PmcCaps::empty());
    t.allocate("cache-references", &mut a).unwrap();
    assert_eq!(md_u64(&a, 0), 0x01 | 0x80 << 8 | 0xF << 48 | 0xFF << 56);
    assert_eq!(md_u32(&a, 8), 1, "L3 sub-class");
    // L3 counters count for everyone: no user/kernel split, no any.
    let mut a = request(PmcCaps::empty());
    assert_eq!(
        t.allocate("cache-references,usr", &mut a),
        Err(libc::EINVAL)
    );
    assert_eq!(t.allocate("cycles,any", &mut a), Err(libc::EINVAL));
}

static ARM_EVENTS: [PmuEvent; 2] = [
    PmuEvent {
        name: c"inst_retired",
        encoding: "event=0x08",
        desc: "Instructions architecturally executed",
        long_desc: "",
        topic: "instruction",
        pmu: "armv8_pmuv3",
        counter: "",
        deprecated: false,
    },
    PmuEvent {
        name: c"cpu_cycles",
        encoding: "event=0x11",
        desc: "Cycles",
        long_desc: "",
        topic: "pipeline",
        pmu: "armv8_pmuv3",
        counter: "",
        deprecated: false,
    },
];
static ARM_MODELS: [PmuModel; 1] = [PmuModel {
    cpuid: "0x00000000410fd080",
    version: "v1",
    name: "arm/cortex-a76",
    events: &ARM_EVENTS,
}];

#[test]
fn armv8_events_carry_the_raw_event_number() {
    let t = PmuTable::for_cpuid_in(&ARM_MODELS, "0x00000000410fd080").unwrap();
    let mut a = request(PmcCaps::empty());
    t.allocate("cycles,os", &mut a).unwrap();
    assert_eq!(a.pm_class, PmcClass::Armv8.raw());
    assert_eq!(a.pm_ev, 1);
    assert_eq!(
        (md_u32(&a, 0), md_u32(&a, 4)),
        (0x11, 1),
        "config, PM_MD_RAW_EVENT"
    );
    assert_ne!(a.pm_caps & PmcCaps::SYSTEM.bits(), 0);
    assert_eq!(t.allocate("inst_retired,edge", &mut a), Err(libc::EINVAL));
}

#[test]
fn listings_have_freebsds_formats() {
    let t = skylake();
    let mut out = Vec::new();
    t.print_counters(None, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        text.lines().count(),
        t.model.events.iter().filter(|e| e.is_named()).count()
    );
    assert!(
        text.lines()
            .all(|l| l.starts_with('\t') && l[1..] == l[1..].to_ascii_lowercase())
    );
    let mut out = Vec::new();
    t.print_counter_desc("BR_MISP_RETIRED.ALL", &mut out)
        .unwrap();
    let lines: Vec<_> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].starts_with("br_misp_retired.all_branches:\tAll mispredicted macro branch"));
    let mut out = Vec::new();
    t.print_counter_full("longest_lat_cache.miss", &mut out)
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("name: longest_lat_cache.miss\n"));
    assert!(text.contains("event: event=0x2e,period=100003,umask=0x41\ntopic: cache\npmu: cpu\n"));
}

#[test]
fn c_entry_points_with_an_explicit_cpu_key() {
    let key = c"GenuineIntel-6-5E-3";
    let t = skylake();
    let (index, _) = t.find("cache-misses").unwrap();
    // SAFETY: NUL-terminated strings that outlive the calls.
    unsafe {
        assert_eq!(
            pmc::pmc_pmu_idx_get_by_event(key.as_ptr(), c"cache-misses".as_ptr()),
            index as i32
        );
        assert_eq!(
            pmc::pmc_pmu_idx_get_by_event(key.as_ptr(), c"nope".as_ptr()),
            -1
        );
        let name = pmc::pmc_pmu_event_get_by_idx(key.as_ptr(), index as i32);
        assert_eq!(CStr::from_ptr(name), c"longest_lat_cache.miss");
        assert!(pmc::pmc_pmu_event_get_by_idx(key.as_ptr(), -1).is_null());
        assert!(pmc::pmc_pmu_event_get_by_idx(key.as_ptr(), 1 << 20).is_null());
        assert!(pmc::pmc_pmu_event_get_by_idx(c"GenuineIntel-6-55-4".as_ptr(), 0).is_null());
    }
}

#[test]
fn logs_name_pmu_events_from_the_logged_cpu_key() {
    use uapi::pmclog::{PmclogBody as B, PmclogRecord, Timespec};
    let t = skylake();
    let (index, _) = t.find("branches").unwrap();
    let bodies = [
        B::Initialize {
            version: uapi::pmc::PMC_VERSION,
            cpu: 0x10,
            tsc_freq: 1_000_000_000,
            ts: Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            },
            cpuid: SKYLAKE.as_bytes(),
        },
        B::Pmcallocate {
            pmcid: 1,
            event: index as u32,
            flags: PmcFlags::EV_PMU.bits(),
            rate: 0,
        },
        // The same number without the flag is a static event code.
        B::Pmcallocate {
            pmcid: 2,
            event: 0x1000,
            flags: 0,
            rate: 0,
        },
        // With the flag, an index past the table (of fewer than 4096
        // events) names nothing, not the static event of that code.
        B::Pmcallocate {
            pmcid: 3,
            event: 0x1000,
            flags: PmcFlags::EV_PMU.bits(),
            rate: 0,
        },
    ];
    let mut log = Vec::new();
    for body in bodies {
        let r = PmclogRecord { tsc: 1, body };
        let mut buf = vec![0u8; r.encoded_len()];
        r.encode(&mut buf).unwrap();
        log.extend_from_slice(&buf);
    }
    let mut p = pmc::pmclog::Parser::new(pmc::pmclog::PMCLOG_FD_NONE);
    p.feed(&log);
    let mut names = BTreeMap::new();
    let mut ev = pmc::pmclog::PmclogEv::zeroed();
    while p.read(&mut ev) == pmc::pmclog::PmclogState::Ok {
        if ev.pl_type == uapi::pmclog::PmclogType::Pmcallocate.raw() {
            // SAFETY: a PMCALLOCATE event's union member and its name.
            let (id, name) = unsafe {
                let a = ev.pl_u.pl_a;
                (
                    a.pl_pmcid,
                    CStr::from_ptr(a.pl_evname).to_str().unwrap().to_owned(),
                )
            };
            names.insert(id, name);
        }
    }
    assert_eq!(names[&1], "br_inst_retired.all_branches");
    // Named by libpmc's TSC table.
    assert_eq!(names[&2], "cycles");
    assert!(skylake().event(0x1000).is_none());
    assert_eq!(names[&3], "");
}
