//! The x86 machine for the PMC classes: `rdmsr`/`wrmsr`, `cpuid`, the
//! local APIC's performance-counter interrupt entry (`lapic_*_pcint`),
//! the NMI handler registry (`nmi_register_handler`) and CR4.PCE, which
//! lets user mode execute `rdpmc`.
//!
//! A #GP of `rdmsr` or `wrmsr` in the kernel is a panic on FreeBSD; the
//! simulator panics the same way, naming the MSR, the value and the
//! reserved bits.

/// `rdmsr(msr)` on the current CPU.
#[inline]
pub fn rdmsr(msr: u32) -> u64 {
    crate::backend::rdmsr(msr)
}

/// `wrmsr(msr, value)` on the current CPU.
#[inline]
pub fn wrmsr(msr: u32, value: u64) {
    crate::backend::wrmsr(msr, value)
}

/// `cpuid_count(leaf, subleaf)`: EAX, EBX, ECX, EDX.
pub fn cpuid(leaf: u32, subleaf: u32) -> [u32; 4] {
    crate::backend::cpuid(leaf, subleaf)
}

/// `lapic_enable_pcint`: the performance-counter LVT entry of every CPU
/// delivers an NMI; false when the local APIC has no such entry.
pub fn lapic_enable_pcint() -> bool {
    crate::backend::lapic_enable_pcint()
}

/// `lapic_disable_pcint`: masks the entry again.
pub fn lapic_disable_pcint() {
    crate::backend::lapic_disable_pcint()
}

/// `lapic_reenable_pcint`: unmasks the current CPU's entry, which the
/// hardware masked when it delivered a PMI.
pub fn lapic_reenable_pcint() {
    crate::backend::lapic_reenable_pcint()
}

/// A PMC interrupt handler: runs in NMI context on the interrupted CPU,
/// with [`crate::stack::interrupted`] describing the trap frame; returns
/// whether the NMI was the PMU's.
pub type PmcIntrFn = crate::malloc::KBox<dyn Fn() -> bool + Send + Sync>;

/// `nmi_register_handler` (`Some`) or `nmi_remove_handler` (`None`) of
/// the one PMC interrupt handler. The previous handler is dropped once no
/// NMI can run it.
pub fn set_pmc_intr(handler: Option<PmcIntrFn>) -> crate::KResult<()> {
    crate::backend::set_pmc_intr(handler)
}

/// Whether the kernel runs as a virtual machine's guest (`vm_guest !=
/// VM_GUEST_NO`), where some MSR bits are best left alone.
#[inline]
pub fn vm_guest() -> bool {
    crate::backend::vm_guest()
}

/// `rdmsr_safe(msr)`: the value, or None when the read faults (an MSR this
/// processor does not have).
#[inline]
pub fn rdmsr_safe(msr: u32) -> Option<u64> {
    crate::backend::rdmsr_safe(msr)
}

/// `wrmsr_safe(msr, value)`: false when the write faults (bits this
/// processor reserves, or no such MSR), which then writes nothing.
#[inline]
pub fn wrmsr_safe(msr: u32, value: u64) -> bool {
    crate::backend::wrmsr_safe(msr, value)
}

/// `DELAY(usec)`: busy-waits `usec` microseconds, in any context (spin
/// locks held, interrupts off, an NMI's handler excepted).
#[inline]
pub fn delay(usec: u32) {
    crate::backend::delay(usec)
}

/// Sets or clears CR4.PCE on the current CPU (`load_cr4`): whether user
/// mode may execute `rdpmc`.
#[inline]
pub fn set_user_rdpmc(enabled: bool) {
    crate::backend::set_user_rdpmc(enabled)
}

/// A further NMI handler (`nmi_register_handler`), beside the PMC one:
/// Intel PT's ToPA interrupt. Removed (`nmi_remove_handler`) when
/// dropped.
#[derive(Debug)]
pub struct NmiHandler(u64);

impl NmiHandler {
    /// Registers `handler`, which runs in NMI context on the interrupted
    /// CPU after the PMC handler and says whether it claimed the NMI.
    pub fn register(handler: PmcIntrFn) -> crate::KResult<NmiHandler> {
        crate::backend::nmi_register_handler(handler).map(NmiHandler)
    }
}

impl Drop for NmiHandler {
    fn drop(&mut self) {
        crate::backend::nmi_remove_handler(self.0);
    }
}

/// The Intel PT state component as XSAVES stores it: RTIT_CTL,
/// OUTPUT_BASE, OUTPUT_MASK_PTRS, STATUS, CR3_MATCH, ADDR0_A, ADDR0_B,
/// ADDR1_A, ADDR1_B.
pub type PtState = [u64; 9];

/// XSAVES of the PT component on the current CPU (IA32_XSS.PT set for
/// the instruction, XCR0 and CR0.TS as it needs): a unit that was tracing
/// stops, and its state is returned.
pub fn xsaves_pt() -> PtState {
    crate::backend::xsaves_pt()
}

/// XRSTORS of the PT component on the current CPU: the unit takes the
/// state (and traces, if TraceEn is set in it).
pub fn xrstors_pt(state: &PtState) {
    crate::backend::xrstors_pt(state)
}
