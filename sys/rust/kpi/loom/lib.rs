//! kpi's `spsc.rs`, the ring that NMI producers hand data through,
//! compiled with loom's atomics, cell and lock (`--cfg loom`) for the
//! model check in `tests/`. Without `--cfg loom`, nothing.
#![cfg(loom)]

#[path = "../spsc.rs"]
pub mod spsc;
