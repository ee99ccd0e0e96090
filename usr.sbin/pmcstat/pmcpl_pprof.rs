//! pprof profiles (`-j file`, an extension): the samples as a
//! `perftools.profiles.Profile` protocol buffer (profile.proto), the
//! format `go tool pprof` and other profile viewers read, uncompressed.
//!
//! A sample type per PMC event (`event`, unit `count`); a sample per
//! distinct stack of each event, its locations the functions from the
//! sampled one outwards, its value the number of samples in the event's
//! column; a location and a function per (image, function), with the
//! function's source file and line from the image's DWARF line table; a
//! mapping per image (its text's link-time range and path).
//!
//! The encoding is written here: a message is its fields in order, each
//! a key (field number << 3 | wire type) and a varint, or a length and
//! bytes; repeated integers packed.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use libpmcstat::libpmcstat_logging::{Analysis, ImageId, Plugin, Sample};
use libpmcstat::libpmcstat_string::IStr;

use crate::pmcpl_folded::{Frame, resolve};

/// A protocol buffer message being written.
#[derive(Debug, Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    /// A varint field; zero is left out, as proto3 does.
    fn uint(&mut self, field: u32, v: u64) -> &mut Self {
        if v != 0 {
            self.varint(u64::from(field) << 3);
            self.varint(v);
        }
        self
    }

    fn int(&mut self, field: u32, v: i64) -> &mut Self {
        self.uint(field, v as u64)
    }

    fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
        self.varint(u64::from(field) << 3 | 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }

    fn msg(&mut self, field: u32, m: &Msg) -> &mut Self {
        self.bytes(field, &m.0)
    }

    fn packed(&mut self, field: u32, vs: impl IntoIterator<Item = u64>) -> &mut Self {
        let mut inner = Msg::default();
        for v in vs {
            inner.varint(v);
        }
        if !inner.0.is_empty() {
            self.bytes(field, &inner.0);
        }
        self
    }
}

/// The string table: index 0 is the empty string.
#[derive(Debug)]
struct Strings {
    index: HashMap<String, i64>,
    list: Vec<String>,
}

impl Strings {
    fn new() -> Strings {
        Strings {
            index: HashMap::from_iter([(String::new(), 0)]),
            list: vec![String::new()],
        }
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as i64;
        self.list.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// The `-j` output.
pub struct PprofPlugin {
    /// Samples by (event, stack of frames, the sampled one first).
    stacks: HashMap<(IStr, Vec<Frame>), u64>,
    scratch: Vec<Frame>,
    out: Box<dyn Write>,
}

impl PprofPlugin {
    /// A plugin writing into `out`.
    pub fn new(out: Box<dyn Write>) -> PprofPlugin {
        PprofPlugin {
            stacks: HashMap::default(),
            scratch: Vec::new(),
            out,
        }
    }
}

impl Plugin for PprofPlugin {
    fn process(&mut self, a: &mut Analysis, s: &Sample<'_>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        resolve(a, s, &mut scratch);
        let key = (a.pmcs[s.pmc].name, scratch.clone());
        *self.stacks.entry(key).or_insert(0) += 1;
        self.scratch = scratch;
    }

    fn shutdown(&mut self, a: &mut Analysis, _mapfile: Option<&mut dyn Write>) -> io::Result<()> {
        let bytes = encode(a, &self.stacks);
        self.out.write_all(&bytes)?;
        self.out.flush()
    }
}

fn encode(a: &mut Analysis, stacks: &HashMap<(IStr, Vec<Frame>), u64>) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut profile = Msg::default();
    // The events, in the order the log named them.
    let events = a.event_names();
    let count = strings.id("count");
    for &e in &events {
        let mut vt = Msg::default();
        vt.int(1, strings.id(a.strings.get(e))).int(2, count);
        profile.msg(1, &vt);
    }
    // Stacks in a stable order: by event, then by frames.
    let mut sorted: Vec<(&(IStr, Vec<Frame>), &u64)> = stacks.iter().collect();
    sorted.sort_by(|x, y| x.0.cmp(y.0));
    let mut locations: HashMap<Frame, u64> = HashMap::default();
    let mut location_order: Vec<Frame> = Vec::new();
    let mut mappings: HashMap<ImageId, u64> = HashMap::default();
    for ((event, frames), &n) in sorted {
        let ids: Vec<u64> = frames
            .iter()
            .map(|f| {
                let next = locations.len() as u64 + 1;
                *locations.entry(*f).or_insert_with(|| {
                    location_order.push(*f);
                    next
                })
            })
            .collect();
        let column = events.iter().position(|e| e == event).unwrap_or(0);
        let values = (0..events.len()).map(|i| if i == column { n } else { 0 });
        let mut sample = Msg::default();
        sample.packed(1, ids).packed(2, values);
        profile.msg(2, &sample);
    }
    let mut functions = Msg::default();
    let mut locs = Msg::default();
    for (i, f) in location_order.iter().enumerate() {
        let id = i as u64 + 1;
        let mut loc = Msg::default();
        loc.uint(1, id);
        let (name, file, line) = match *f {
            Frame::Function(image, func) => {
                let next = mappings.len() as u64 + 1;
                let mapping = *mappings.entry(image).or_insert(next);
                let img = &a.images[image as usize];
                loc.uint(2, mapping).uint(3, img.vaddr.wrapping_add(func));
                let name = crate::pmcpl_folded::frame_name(a, *f);
                let src = a.images[image as usize].source_line(&a.strings, func);
                let (file, line) = src.map_or((String::new(), 0), |l| (l.file, l.line));
                (name, file, line)
            }
            Frame::Unknown => ("[unknown]".to_owned(), String::new(), 0),
        };
        let mut function = Msg::default();
        let name_id = strings.id(&name);
        function
            .uint(1, id)
            .int(2, name_id)
            .int(3, name_id)
            .int(4, strings.id(&file))
            .int(5, i64::from(line));
        functions.msg(5, &function);
        let mut l = Msg::default();
        l.uint(1, id).int(2, i64::from(line));
        loc.msg(4, &l);
        locs.msg(4, &loc);
    }
    let mut images: Vec<(&ImageId, &u64)> = mappings.iter().collect();
    images.sort_by_key(|(_, id)| **id);
    for (&image, &id) in images {
        let img = &a.images[image as usize];
        let path = img.fullpath.map_or("", |p| a.strings.get(p)).to_owned();
        let mut m = Msg::default();
        m.uint(1, id)
            .uint(2, img.start)
            .uint(3, img.end)
            .int(5, strings.id(&path))
            .uint(7, 1)
            .uint(8, 1)
            .uint(9, 1);
        profile.msg(3, &m);
    }
    profile.0.extend_from_slice(&locs.0);
    profile.0.extend_from_slice(&functions.0);
    for s in &strings.list {
        profile.bytes(6, s.as_bytes());
    }
    profile.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fields_as_protocol_buffers_encode_them() {
        let mut m = Msg::default();
        m.uint(1, 150);
        assert_eq!(m.0, [0x08, 0x96, 0x01]);
        let mut m = Msg::default();
        m.uint(3, 0);
        assert!(m.0.is_empty(), "zero is left out");
        let mut m = Msg::default();
        m.bytes(2, b"testing");
        assert_eq!(m.0, [0x12, 7, b't', b'e', b's', b't', b'i', b'n', b'g']);
        let mut m = Msg::default();
        m.packed(4, [3, 270, 86942]);
        assert_eq!(m.0, [0x22, 0x06, 0x03, 0x8E, 0x02, 0x9E, 0xA7, 0x05]);
        let mut m = Msg::default();
        m.int(1, -1);
        assert_eq!(m.0.len(), 11, "a negative int64 takes ten bytes");
    }
}
