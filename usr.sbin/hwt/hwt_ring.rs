//! What hwt(8) reads from the kernel, as plain data: the records of
//! RECORD_GET (`struct hwt_record_user_entry`) and the positions of a
//! trace unit in its ring, turned into the trace written since the last
//! look. No system calls: fuzzed (usr.sbin/hwt/fuzz).

/// `sizeof(struct hwt_record_user_entry)`.
pub const ENTRY: usize = 1056;
/// The page size of the positions.
pub const PAGE_SIZE: u64 = 4096;

/// A record as userland reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// MMAP (0) or EXECUTABLE (2): an image and where it went.
    Object {
        executable: bool,
        path: String,
        addr: u64,
        baseaddr: u64,
    },
    /// MUNMAP (1), at an address.
    Munmap { addr: u64 },
    /// KERNEL (3): a kernel object.
    Kernel { path: String, addr: u64 },
    /// THREAD_CREATE (4).
    ThreadCreate { thread_id: i32 },
    /// THREAD_SET_NAME (5).
    ThreadSetName { thread_id: i32 },
    /// BUFFER (6): where a unit is in buffer `buf_id`.
    Buffer { buf_id: i32, position: u64 },
    /// A type this reader does not know.
    Unknown(u32),
}

/// Reads one entry; None when `e` is shorter than an entry.
pub fn parse_record(e: &[u8]) -> Option<Record> {
    let e = e.get(..ENTRY)?;
    let u32_at = |o: usize| u32::from_ne_bytes([e[o], e[o + 1], e[o + 2], e[o + 3]]);
    let u64_at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&e[o..o + 8]);
        u64::from_ne_bytes(b)
    };
    let path = || {
        let p = &e[8..1032];
        let end = p.iter().position(|&b| b == 0).unwrap_or(p.len());
        String::from_utf8_lossy(&p[..end]).into_owned()
    };
    Some(match u32_at(0) {
        t @ (0 | 2) => Record::Object {
            executable: t == 2,
            path: path(),
            addr: u64_at(1032),
            baseaddr: u64_at(1040),
        },
        1 => Record::Munmap { addr: u64_at(1032) },
        3 => Record::Kernel {
            path: path(),
            addr: u64_at(1032),
        },
        4 => Record::ThreadCreate {
            thread_id: u32_at(8) as i32,
        },
        5 => Record::ThreadSetName {
            thread_id: u32_at(8) as i32,
        },
        6 => Record::Buffer {
            buf_id: u32_at(8) as i32,
            position: u64::from(u32_at(12))
                .wrapping_mul(PAGE_SIZE)
                .wrapping_add(u64_at(16)),
        },
        t => Record::Unknown(t),
    })
}

/// A ring buffer followed from the positions its unit reports.
#[derive(Debug, Clone)]
pub struct Ring {
    size: u64,
    /// Where the trace taken so far ends.
    taken: u64,
    /// Where the unit was last seen, and how far it went from `taken`.
    seen: u64,
    ahead: u64,
}

/// What [`Ring::take`] gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// Bytes the unit wrote that were overwritten before they were taken.
    pub lost: u64,
    /// The bytes taken, oldest first.
    pub bytes: Vec<u8>,
}

impl Ring {
    /// A ring of `size` bytes (at least one), the unit at its start.
    pub fn new(size: u64) -> Ring {
        Ring {
            size: size.max(1),
            taken: 0,
            seen: 0,
            ahead: 0,
        }
    }

    /// The unit is at `position` (taken modulo the ring's size): it went
    /// on from where it was last seen, by less than a ring (the kernel
    /// tells every page it fills).
    pub fn saw(&mut self, position: u64) {
        let at = position % self.size;
        self.ahead = self
            .ahead
            .saturating_add((at + self.size - self.seen) % self.size);
        self.seen = at;
    }

    /// Takes what was written since the last take out of `ring` (the
    /// mapped buffer): all of it, or, when the unit went round more than
    /// once, the ring's contents from the unit's position and what was
    /// lost. None when nothing was written.
    pub fn take(&mut self, ring: &[u8]) -> Option<Taken> {
        if self.ahead == 0 {
            return None;
        }
        let size = self.size.min(ring.len() as u64);
        let (from, len, lost) = if self.ahead > self.size {
            (self.seen, size, self.ahead - self.size)
        } else {
            (self.taken, self.ahead.min(size), 0)
        };
        let from = (from % size.max(1)) as usize;
        let len = len as usize;
        let first = len.min(size as usize - from);
        let mut bytes = Vec::with_capacity(len);
        bytes.extend_from_slice(&ring[from..from + first]);
        bytes.extend_from_slice(&ring[..len - first]);
        self.taken = self.seen;
        self.ahead = 0;
        Some(Taken { lost, bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_gives_what_was_written_in_order_across_the_end() {
        let ring: Vec<u8> = (0..16).collect();
        let mut r = Ring::new(16);
        r.saw(10);
        assert_eq!(r.take(&ring).unwrap().bytes, (0..10).collect::<Vec<u8>>());
        r.saw(14);
        r.saw(3);
        let t = r.take(&ring).unwrap();
        assert_eq!(t.lost, 0);
        assert_eq!(t.bytes, vec![10, 11, 12, 13, 14, 15, 0, 1, 2]);
        assert_eq!(r.take(&ring), None);
    }

    #[test]
    fn going_round_more_than_once_loses_the_oldest() {
        let ring: Vec<u8> = (0..16).collect();
        let mut r = Ring::new(16);
        for p in [12, 8, 4, 6] {
            r.saw(p);
        }
        // 12 + 12 + 12 + 2 = 38 bytes written into 16: 22 lost; the ring
        // from the unit's position is the newest 16.
        let t = r.take(&ring).unwrap();
        assert_eq!(t.lost, 22);
        assert_eq!(
            t.bytes,
            vec![6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5]
        );
    }

    #[test]
    fn records_read_as_the_kernel_lays_them_out() {
        let mut e = vec![0u8; ENTRY];
        e[0..4].copy_from_slice(&6u32.to_ne_bytes());
        e[8..12].copy_from_slice(&3i32.to_ne_bytes());
        e[12..16].copy_from_slice(&2i32.to_ne_bytes());
        e[16..24].copy_from_slice(&0x10u64.to_ne_bytes());
        assert_eq!(
            parse_record(&e),
            Some(Record::Buffer {
                buf_id: 3,
                position: 2 * 4096 + 0x10
            })
        );
        let mut e = vec![0u8; ENTRY];
        e[0..4].copy_from_slice(&2u32.to_ne_bytes());
        e[8..12].copy_from_slice(b"/bin");
        e[1032..1040].copy_from_slice(&0x1000u64.to_ne_bytes());
        assert!(
            matches!(parse_record(&e), Some(Record::Object { executable: true, ref path, addr: 0x1000, .. }) if path == "/bin")
        );
        assert_eq!(parse_record(&e[..100]), None);
    }
}
