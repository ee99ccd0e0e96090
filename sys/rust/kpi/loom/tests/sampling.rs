//! The sample ring's protocol (kpi::spsc, as hwpmc's sampling uses it),
//! model-checked with loom. The parties:
//!
//! - the producer, the PMC interrupt (an NMI) of one CPU, taking samples
//!   of two PMCs, A and B, into a ring too small for them all, so that it
//!   finds the ring full in some interleavings (the sample is then dropped
//!   and counted), with the keys it read before A's release;
//! - the consumer at hardclock on that CPU, which drains the ring into the
//!   owners' logs;
//! - the owner's exit, which releases PMC A (bumps the generation of A's
//!   entry in the table of sampling PMCs, so that its samples resolve to
//!   nothing) and drains the ring;
//!
//! then the unload's last drain. In every interleaving, every sample the
//! producer stored is consumed exactly once, with the contents the
//! producer wrote, and every one it could not store was counted as
//! dropped; none of A's is logged once A is released, B's always are; and
//! loom checks that no access to a slot races with another.
//!
//! Every interleaving of the three, exhaustively, on a one-slot ring (two
//! samples: the second finds the ring full unless a drain came between);
//! every interleaving of the producer and the two drains run one after the
//! other, on a two-slot ring the indices wrap around (three samples); and
//! the three at once on the two-slot ring with loom's preemption bound
//! (three preemptions, which loom's documentation finds enough to catch most bugs: the exhaustive search of that model takes hours).
//! Smaller models add a consumer that walks the waiting samples in place
//! (the return to user mode completing call chains), slot reuse, and a
//! ring of three entries in its four slots (a power of two).
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release` in this crate's
//! directory (tools/test does).
#![cfg(loom)]
// Host test code: the kernel crates' allocation lints (sys/clippy.toml) do
// not apply to it.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;

use kpi_loom::spsc::{Refused, SpscRing};

/// A sample: the key of its PMC (entry index and generation) and a
/// sequence number, which the producer also writes into the row.
#[derive(Debug, Default, Clone, Copy)]
struct Sample {
    key: u64,
    seq: u64,
}

const A: u64 = 0;
const B: u64 = 1;

fn key(entry: u64, generation: u64) -> u64 {
    generation << 32 | entry
}

/// Who consumed a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Hardclock,
    Exit,
    Unload,
}

/// What a consumer did with a sample.
#[derive(Debug, Clone, Copy)]
struct Consumed {
    seq: u64,
    entry: u64,
    logged: bool,
    by: By,
}

struct Machine {
    ring: SpscRing<Sample, u64>,
    /// The table of sampling PMCs (hwpmc's `pmc-samplers`), reduced to
    /// what changes: entry A's generation, bumped when A is released
    /// (entry B's stays 0). The lock's ordering is modelled by SeqCst.
    a_generation: AtomicU64,
}

impl Machine {
    /// One drain, as `process_samples`: resolves each sample's key in the
    /// table, logs it or counts it as not logged, gives the slot back.
    fn drain(&self, by: By) -> Vec<Consumed> {
        let mut out = Vec::new();
        let mut c = self.ring.consumer();
        while let Some(done) = c.with(0, |s, row| {
            assert_eq!(row[0], s.seq, "the row is the producer's");
            let entry = s.key & 0xffff_ffff;
            let generation = if entry == A {
                self.a_generation.load(Ordering::SeqCst)
            } else {
                0
            };
            Consumed {
                seq: s.seq,
                entry,
                logged: s.key >> 32 == generation,
                by,
            }
        }) {
            assert!(c.pop());
            out.push(done);
        }
        out
    }

    /// The owner's exit: A is released, then the ring drained.
    fn exit(&self) -> Vec<Consumed> {
        self.a_generation.fetch_add(1, Ordering::SeqCst);
        self.drain(By::Exit)
    }
}

/// The producer, the hardclock drain and the exit (on a thread of its own
/// when `exit_apart`, else after the hardclock drain on the same thread),
/// `tries` samples (A, B, A, ...) into `slots` slots.
fn model(slots: usize, tries: u64, exit_apart: bool) {
    let m = Arc::new(Machine {
        ring: SpscRing::new(slots, 1),
        a_generation: AtomicU64::new(0),
    });

    let nmi = {
        let m = m.clone();
        thread::spawn(move || {
            let (mut stored, mut dropped) = (Vec::new(), 0);
            for seq in 0..tries {
                let entry = if seq % 2 == 0 { A } else { B };
                let r = m.ring.produce(|s, row| {
                    *s = Sample {
                        key: key(entry, 0),
                        seq,
                    };
                    row[0] = seq;
                });
                match r {
                    Ok(()) => stored.push((seq, entry)),
                    Err(Refused::Full) => dropped += 1,
                    Err(Refused::Busy) => panic!("one producer"),
                }
            }
            (stored, dropped)
        })
    };
    let hardclock = {
        let m = m.clone();
        thread::spawn(move || {
            let mut out = m.drain(By::Hardclock);
            if !exit_apart {
                out.extend(m.exit());
            }
            out
        })
    };
    let exit = exit_apart.then(|| {
        let m = m.clone();
        thread::spawn(move || m.exit())
    });

    let (stored, dropped) = nmi.join().unwrap();
    let mut consumed = hardclock.join().unwrap();
    if let Some(exit) = exit {
        consumed.extend(exit.join().unwrap());
    }
    consumed.extend(m.drain(By::Unload));

    // Each stored sample consumed once, with its PMC; the others dropped.
    let mut got: Vec<(u64, u64)> = consumed.iter().map(|c| (c.seq, c.entry)).collect();
    got.sort();
    assert_eq!(got, stored, "{consumed:?}");
    assert_eq!(stored.len() as u64 + dropped, tries);
    // Once A is released (before the exit's drain, and so before the
    // unload's), none of its samples is logged; B's always are.
    for c in &consumed {
        match c.entry {
            A if c.by != By::Hardclock => assert!(!c.logged, "{c:?}"),
            B => assert!(c.logged, "{c:?}"),
            _ => {}
        }
    }
    assert!(m.ring.is_empty());
}

#[test]
fn producer_hardclock_and_exit_every_interleaving_one_slot() {
    loom::model(|| model(1, 2, true));
}

#[test]
fn producer_and_the_drains_every_interleaving_two_slots() {
    loom::model(|| model(2, 3, false));
}

#[test]
fn producer_hardclock_and_exit_two_slots_three_preemptions() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| model(2, 3, true));
}

/// A consumer that walks the waiting samples in place (the return to user
/// mode completing call chains) while the producer adds more: every
/// sample it reaches is whole, and none past the end.
#[test]
fn in_place_walk_beside_the_producer() {
    const SLOTS: usize = 2;
    loom::model(|| {
        let ring = Arc::new(SpscRing::<Sample, u64>::new(SLOTS, 1));
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                (0..3)
                    .filter(|&seq| {
                        ring.produce(|s, row| {
                            s.seq = seq;
                            row[0] = seq;
                        })
                        .is_ok()
                    })
                    .count()
            })
        };
        {
            let mut c = ring.consumer();
            let n = c.len();
            assert!(n <= SLOTS);
            for k in 0..n {
                let seq = c.with(k, |s, row| {
                    assert_eq!(row[0], s.seq);
                    // Completed in place, as a user call chain is.
                    row[0] += 100;
                    s.seq += 100;
                    s.seq
                });
                assert_eq!(seq, Some(100 + k as u64));
            }
            assert!(c.with(SLOTS, |_, _| ()).is_none());
        }
        let stored = producer.join().unwrap();
        let mut c = ring.consumer();
        let mut seen = 0;
        while let Some(()) = c.with(0, |s, row| assert_eq!(row[0], s.seq)) {
            c.pop();
            seen += 1;
        }
        assert_eq!(seen, stored);
    });
}

/// A full ring refuses without touching a slot, and a slot given back is
/// the producer's again: the producer and a consumer that takes one
/// sample at a time, each step in every order.
#[test]
fn full_ring_and_slot_reuse() {
    loom::model(|| {
        let ring = Arc::new(SpscRing::<Sample, u64>::new(1, 1));
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                (0..2)
                    .filter(|&seq| {
                        ring.produce(|s, row| {
                            s.seq = seq;
                            row[0] = seq;
                        })
                        .is_ok()
                    })
                    .collect::<Vec<u64>>()
            })
        };
        let mut seen = Vec::new();
        for _ in 0..2 {
            let mut c = ring.consumer();
            if let Some(seq) = c.with(0, |s, row| {
                assert_eq!(row[0], s.seq);
                s.seq
            }) {
                assert!(c.pop());
                seen.push(seq);
            }
        }
        let stored = producer.join().unwrap();
        let mut c = ring.consumer();
        while let Some(seq) = c.with(0, |s, _| s.seq) {
            c.pop();
            seen.push(seq);
        }
        assert_eq!(seen, stored);
    });
}

/// A ring of three entries has four slots (a power of two, so that a slot
/// is chosen with a mask): it still refuses a fourth waiting entry, and
/// entries wrap around all four slots in order.
#[test]
fn three_entries_in_four_slots() {
    loom::model(|| {
        let ring = Arc::new(SpscRing::<Sample, u64>::new(3, 1));
        assert_eq!(ring.capacity(), 3);
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                (0..5)
                    .filter(|&seq| {
                        ring.produce(|s, row| {
                            s.seq = seq;
                            row[0] = seq;
                        })
                        .is_ok()
                    })
                    .collect::<Vec<u64>>()
            })
        };
        let mut seen = Vec::new();
        {
            let mut c = ring.consumer();
            if let Some(seq) = c.with(0, |s, row| {
                assert_eq!(row[0], s.seq);
                s.seq
            }) {
                assert!(c.pop());
                seen.push(seq);
            }
        }
        let stored = producer.join().unwrap();
        // At most three waited at once: one taken above, if any, before
        // the last two could be stored.
        assert!(stored.len() <= 4);
        assert!(stored.len() == 3 || (stored.len() == 4 && seen.len() == 1));
        {
            let mut c = ring.consumer();
            while let Some(seq) = c.with(0, |s, row| {
                assert_eq!(row[0], s.seq);
                s.seq
            }) {
                c.pop();
                seen.push(seq);
            }
        }
        assert_eq!(seen, stored);
        // Three more, wrapping around past the fourth slot.
        for seq in 10..13 {
            assert!(
                ring.produce(|s, row| {
                    s.seq = seq;
                    row[0] = seq;
                })
                .is_ok()
            );
        }
        assert_eq!(
            ring.produce(|_, _| ()).err(),
            Some(Refused::Full),
            "three entries fill it"
        );
        let mut c = ring.consumer();
        for seq in 10..13 {
            assert_eq!(c.with(0, |s, row| (s.seq, row[0])), Some((seq, seq)));
            assert!(c.pop());
        }
    });
}
