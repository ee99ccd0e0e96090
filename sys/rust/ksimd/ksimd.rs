//! ksimd: one simulated FreeBSD machine, with the hwpmc driver loaded,
//! that host programs use as their kernel over a Unix socket.
//!
//! - [`proto`]: the versioned messages of the protocol;
//! - [`sock`]: the stream socket under it (descriptors and credentials
//!   beside the packets);
//! - [`server`]: the machine's thread, the mirroring of host processes,
//!   the connections and the clock;
//! - [`daemon`]: starting and stopping a ksimd program (tools and tests).
//!
//! libpmc's simulator transport is its client: with `LIBPMC_SIM_SOCKET`
//! it connects to a running daemon, and without it it starts a machine
//! private to the process ([`server::start_private`]) and connects to
//! that, through the same protocol. The `ksimd` program (ksimd.8) is the
//! daemon.

// Host code, part of the simulator: the kernel allocation lints of
// sys/clippy.toml do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

pub mod daemon;
pub mod proto;
pub mod server;
pub mod sock;
