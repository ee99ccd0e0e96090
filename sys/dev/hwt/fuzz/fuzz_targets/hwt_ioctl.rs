//! hwt(4)'s ioctls over arbitrary operation streams (see
//! ../ioctl_driver.rs): no panic, only documented errnos, nothing left
//! after unload.
#![no_main]

#[path = "../ioctl_driver.rs"]
mod ioctl_driver;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ioctl_driver::run(data);
});
