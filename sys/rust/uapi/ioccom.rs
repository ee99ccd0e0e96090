//! `sys/sys/ioccom.h`: how FreeBSD encodes ioctl(2) commands.

/// Mask of the parameter length field (13 bits).
pub const IOCPARM_MASK: u32 = 0x1fff;
/// No parameters.
pub const IOC_VOID: u32 = 0x2000_0000;
/// Copy parameters out.
pub const IOC_OUT: u32 = 0x4000_0000;
/// Copy parameters in.
pub const IOC_IN: u32 = 0x8000_0000;

/// `_IOC(inout, group, num, len)`.
pub const fn ioc(inout: u32, group: u8, num: u8, len: usize) -> u32 {
    inout | (((len as u32) & IOCPARM_MASK) << 16) | ((group as u32) << 8) | num as u32
}
/// `_IOW(g, n, t)`: the argument is copied in.
pub const fn iow(group: u8, num: u8, len: usize) -> u32 {
    ioc(IOC_IN, group, num, len)
}
/// `_IOR(g, n, t)`: the argument is copied out.
pub const fn ior(group: u8, num: u8, len: usize) -> u32 {
    ioc(IOC_OUT, group, num, len)
}
/// `_IOWR(g, n, t)`: the argument is copied in and out.
pub const fn iowr(group: u8, num: u8, len: usize) -> u32 {
    ioc(IOC_IN | IOC_OUT, group, num, len)
}
/// `IOCPARM_LEN(x)`: the argument size of a command.
pub const fn iocparm_len(cmd: u32) -> usize {
    ((cmd >> 16) & IOCPARM_MASK) as usize
}
/// `IOCGROUP(x)`.
pub const fn iocgroup(cmd: u32) -> u8 {
    ((cmd >> 8) & 0xff) as u8
}
