//! libpmc: the user-level side of hwpmc(4), with FreeBSD's C API and
//! symbols.
//!
//! This first part is pmclog(3): the reader of hwpmc log files
//! ([`pmclog`]), exported as `pmclog_open`, `pmclog_feed`, `pmclog_read`
//! and `pmclog_close` with the `struct pmclog_ev` layout of FreeBSD's
//! `<pmclog.h>` (shipped here as `pmclog.h`). The pmc(3) operations and the
//! transports to the driver come next.

pub mod pmclog;
