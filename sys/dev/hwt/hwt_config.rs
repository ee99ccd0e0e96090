//! SET_CONFIG's blob (hwt_config.c): copied in and kept for the backend,
//! which reads it when it programs the unit.

use kpi::KResult;
use kpi::errno::EFBIG;
use kpi::malloc::Wait;
use kpi::uio::{UserPtr, copyin_bytes};
use uapi::hwt::HwtSetConfig;

use crate::hwt_context::HwtContext;

/// `HWT_MAXCONFIGSIZE`: a page.
const HWT_MAXCONFIGSIZE: usize = kpi::cdev::PAGE_SIZE;

/// `hwt_config_set`: a size of 0 keeps the configuration; more than a
/// page is EFBIG. The old blob is freed once the new one is in place.
pub(crate) fn config_set(ctx: &HwtContext, arg: &HwtSetConfig) -> KResult<()> {
    if arg.config_size == 0 {
        return Ok(());
    }
    if arg.config_size > HWT_MAXCONFIGSIZE {
        return Err(EFBIG);
    }
    let config = copyin_bytes(UserPtr(arg.config as u64), arg.config_size, Wait::WaitOk)?;
    let old = {
        let mut l = ctx.locked.lock();
        l.config_version = arg.config_version;
        l.config.replace(config)
    };
    drop(old);
    Ok(())
}
