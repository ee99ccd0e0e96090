//! malloc(9): fallible kernel allocation that says whether it may sleep.
//!
//! [`KBox`], [`KVec`] and [`KArc`] get their memory from the kernel
//! backend with the caller's flag: on FreeBSD `malloc(9)` with `M_WAITOK`
//! or `M_NOWAIT` (and `M_ZERO` for [`KVec::zeroed`]); in the simulator an
//! accounted allocation that the witness checks, that fault injection can
//! make fail, and that the leak count sees at unload. Growing a [`KVec`]
//! is always explicit ([`KVec::try_reserve`]), so code that must not
//! allocate (a spin lock held, interrupt context) inserts into room
//! reserved beforehand. Nothing here aborts on a failed allocation.

// This module is where `Box` and `Vec` are allowed: only as views over
// memory from raw_alloc, never allocating or freeing on their own.
#![allow(clippy::disallowed_types)]

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::alloc::Layout;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering, fence};

use crate::errno::{ENOMEM, KResult};

/// Whether an allocation may sleep for memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// `M_WAITOK`: may sleep; not with a mutex or spin lock held, in a
    /// critical section or in an interrupt.
    WaitOk,
    /// `M_NOWAIT`: fails instead of sleeping; still not with a spin lock
    /// held or in a critical section.
    NoWait,
}

/// Memory for `layout` from the kernel, or ENOMEM. A zero-sized layout
/// takes no memory and gets a dangling, well-aligned pointer.
fn raw_alloc(layout: Layout, wait: Wait, zero: bool) -> KResult<NonNull<u8>> {
    if layout.size() == 0 {
        // Aligned and non-null; never dereferenced for zero bytes.
        return NonNull::new(layout.align() as *mut u8).ok_or(ENOMEM);
    }
    crate::backend::kmalloc(layout, wait == Wait::WaitOk, zero).ok_or(ENOMEM)
}

/// Gives memory from [`raw_alloc`] back.
///
/// # Safety
/// `ptr` came from [`raw_alloc`] with this `layout` and is not used again.
unsafe fn raw_free(ptr: NonNull<u8>, layout: Layout) {
    if layout.size() != 0 {
        // SAFETY: forwarded from the caller.
        unsafe { crate::backend::kfree(ptr, layout) }
    }
}

/// `KBox<dyn Trait>` from a value: `kbox_dyn!(value, wait, dyn Trait)`.
#[macro_export]
macro_rules! kbox_dyn {
    ($value:expr, $wait:expr, $t:ty) => {
        $crate::malloc::KBox::<$t>::try_new_unsize($value, $wait, |b| {
            b as $crate::malloc::StdBox<$t>
        })
    };
}

/// The `Box` that [`KBox::try_new_unsize`] converts; kernel crates use
/// it only through [`kbox_dyn!`].
pub type StdBox<T> = Box<T>;

/// A kernel heap value.
pub struct KBox<T: ?Sized> {
    /// Memory from [`raw_alloc`], handed to `Box` only so that unsizing
    /// (`Box<U>` to `Box<dyn Trait>`) works on stable Rust; it is never
    /// dropped as a `Box`.
    value: ManuallyDrop<Box<T>>,
}

impl<T: ?Sized + core::fmt::Debug> core::fmt::Debug for KBox<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self).fmt(f)
    }
}

impl<T> KBox<T> {
    /// Allocates `value` on the kernel heap.
    pub fn try_new(value: T, wait: Wait) -> KResult<KBox<T>> {
        let layout = Layout::new::<T>();
        let ptr = raw_alloc(layout, wait, false)?.cast::<T>();
        // SAFETY: fresh memory of `T`'s layout; the Box is wrapped in
        // ManuallyDrop and freed by KBox's Drop with the same layout.
        unsafe {
            ptr.as_ptr().write(value);
            Ok(KBox {
                value: ManuallyDrop::new(Box::from_raw(ptr.as_ptr())),
            })
        }
    }

    /// Allocates `value` and pins it: it stays at its address until it is
    /// dropped (what a lock the kernel knows by address needs).
    pub fn try_pin(value: T, wait: Wait) -> KResult<core::pin::Pin<KBox<T>>> {
        // SAFETY: KBox gives out no `&mut T` through a Pin unless `T:
        // Unpin` (Pin's DerefMut bound), and never moves the value out.
        KBox::try_new(value, wait).map(|b| unsafe { core::pin::Pin::new_unchecked(b) })
    }

    /// Moves the value out, freeing the allocation.
    pub fn into_inner(self) -> T {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so the box is taken once; the
        // value is read out and its memory freed without dropping it.
        unsafe {
            let b = ManuallyDrop::take(&mut this.value);
            let ptr = Box::into_raw(b);
            let value = ptr.read();
            raw_free(NonNull::new_unchecked(ptr.cast()), Layout::new::<T>());
            value
        }
    }
}

impl<T: ?Sized> KBox<T> {
    /// Allocates `value` and converts the box, typically to a trait object
    /// (`|b| b as Box<dyn Trait>`). `convert` must return the box it was
    /// given (only its type may change).
    pub fn try_new_unsize<U>(
        value: U,
        wait: Wait,
        convert: impl FnOnce(Box<U>) -> Box<T>,
    ) -> KResult<KBox<T>> {
        let mut boxed = ManuallyDrop::new(KBox::try_new(value, wait)?);
        // SAFETY: taken once from a KBox that is never dropped.
        let inner = unsafe { ManuallyDrop::take(&mut boxed.value) };
        let addr = &*inner as *const U as *const u8;
        let converted = convert(inner);
        let same = core::ptr::eq(&*converted as *const T as *const u8, addr)
            && Layout::for_value(&*converted) == Layout::new::<U>();
        assert!(same, "KBox::try_new_unsize: convert changed the allocation");
        Ok(KBox {
            value: ManuallyDrop::new(converted),
        })
    }
}

impl<T: ?Sized> KBox<T> {
    /// Gives the allocation up as a raw pointer (for C code that keeps an
    /// argument); [`KBox::from_raw`] takes it back.
    pub fn into_raw(b: KBox<T>) -> *mut T {
        let mut b = ManuallyDrop::new(b);
        // SAFETY: taken once from a KBox that is never dropped.
        Box::into_raw(unsafe { ManuallyDrop::take(&mut b.value) })
    }

    /// Takes back what [`KBox::into_raw`] gave up.
    ///
    /// # Safety
    /// `raw` came from [`KBox::into_raw`] and is taken back once.
    pub unsafe fn from_raw(raw: *mut T) -> KBox<T> {
        KBox {
            // SAFETY: a pointer from Box::into_raw over raw_alloc memory.
            value: ManuallyDrop::new(unsafe { Box::from_raw(raw) }),
        }
    }
}

impl<T: ?Sized> Drop for KBox<T> {
    fn drop(&mut self) {
        let layout = Layout::for_value(&**self.value);
        // SAFETY: the box is taken once, here; its memory came from
        // raw_alloc with this layout (checked for unsized boxes above).
        unsafe {
            let ptr = Box::into_raw(ManuallyDrop::take(&mut self.value));
            core::ptr::drop_in_place(ptr);
            raw_free(NonNull::new_unchecked(ptr.cast::<u8>()), layout);
        }
    }
}

impl<T: ?Sized> Deref for KBox<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: ?Sized> DerefMut for KBox<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

/// A kernel heap array that grows only when asked to.
pub struct KVec<T> {
    /// Storage from [`raw_alloc`] (or none), viewed as a `Vec` for its
    /// slice operations; it never grows or frees on its own.
    items: ManuallyDrop<Vec<T>>,
}

impl<T: core::fmt::Debug> core::fmt::Debug for KVec<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T> Default for KVec<T> {
    fn default() -> Self {
        KVec::new()
    }
}

impl<T> KVec<T> {
    /// An empty array; allocates nothing.
    pub const fn new() -> KVec<T> {
        KVec {
            items: ManuallyDrop::new(Vec::new()),
        }
    }

    /// An array with room for `n` items.
    pub fn with_capacity(n: usize, wait: Wait) -> KResult<KVec<T>> {
        let mut v = KVec::new();
        v.try_reserve(n, wait)?;
        Ok(v)
    }

    /// An array of `n` values made by `f`.
    pub fn from_fn(n: usize, wait: Wait, mut f: impl FnMut(usize) -> T) -> KResult<KVec<T>> {
        KVec::try_from_fn(n, wait, |i| Ok(f(i)))
    }

    /// An array of `n` values made by `f`, which may fail (for example
    /// by allocating); the first failure is returned.
    pub fn try_from_fn(
        n: usize,
        wait: Wait,
        mut f: impl FnMut(usize) -> KResult<T>,
    ) -> KResult<KVec<T>> {
        let mut v = KVec::with_capacity(n, wait)?;
        for i in 0..n {
            v.items.push(f(i)?);
        }
        Ok(v)
    }

    /// A copy of `items`.
    pub fn try_from_slice(items: &[T], wait: Wait) -> KResult<KVec<T>>
    where
        T: Clone,
    {
        KVec::from_fn(items.len(), wait, |i| items[i].clone())
    }

    fn layout(cap: usize) -> KResult<Layout> {
        Layout::array::<T>(cap).map_err(|_| ENOMEM)
    }

    /// Whether the storage came from raw_alloc (zero-sized items and an
    /// empty array have none).
    fn owns_storage(&self) -> bool {
        core::mem::size_of::<T>() != 0 && self.items.capacity() != 0
    }

    /// Makes room for `additional` more items.
    pub fn try_reserve(&mut self, additional: usize, wait: Wait) -> KResult<()> {
        let len = self.items.len();
        let needed = len.checked_add(additional).ok_or(ENOMEM)?;
        if needed <= self.items.capacity() {
            return Ok(());
        }
        let cap = needed.max(self.items.capacity().saturating_mul(2)).max(4);
        let layout = Self::layout(cap)?;
        let ptr = raw_alloc(layout, wait, false)?.cast::<T>();
        // SAFETY: the new storage holds `cap >= len` items; the old items
        // are moved bit for bit and the old storage freed without dropping
        // them. The Vec view gets storage of exactly `cap` items of T.
        unsafe {
            core::ptr::copy_nonoverlapping(self.items.as_ptr(), ptr.as_ptr(), len);
            let old = core::mem::replace(
                &mut *self.items,
                Vec::from_raw_parts(ptr.as_ptr(), len, cap),
            );
            let mut old = ManuallyDrop::new(old);
            old.set_len(0);
            Self::free_storage(&mut old);
        }
        Ok(())
    }

    /// Frees a Vec view's storage (its items already moved or dropped).
    ///
    /// # Safety
    /// `v` came from this type (raw_alloc storage) and is not used again.
    unsafe fn free_storage(v: &mut Vec<T>) {
        if core::mem::size_of::<T>() != 0 && v.capacity() != 0 {
            let layout = Layout::array::<T>(v.capacity()).expect("layout was valid at allocation");
            // SAFETY: storage from raw_alloc with this layout.
            unsafe { raw_free(NonNull::new_unchecked(v.as_mut_ptr().cast()), layout) }
        }
    }

    /// Appends within the reserved capacity; gives the item back when full.
    pub fn push_within_capacity(&mut self, item: T) -> Result<(), T> {
        if self.items.len() < self.items.capacity() {
            self.items.push(item);
            Ok(())
        } else {
            Err(item)
        }
    }

    /// Reserves room for one more item, then appends it.
    pub fn try_push(&mut self, item: T, wait: Wait) -> KResult<()> {
        self.try_reserve(1, wait)?;
        self.items.push(item);
        Ok(())
    }

    /// Removes and returns the item at `i`, shifting the rest down.
    pub fn remove(&mut self, i: usize) -> T {
        self.items.remove(i)
    }

    /// Removes the item at `i`, moving the last one into its place.
    pub fn swap_remove(&mut self, i: usize) -> T {
        self.items.swap_remove(i)
    }

    /// Keeps the items for which `f` is true.
    pub fn retain(&mut self, f: impl FnMut(&T) -> bool) {
        self.items.retain(f);
    }

    /// Removes the last item.
    pub fn pop(&mut self) -> Option<T> {
        self.items.pop()
    }

    /// Removes every item; the capacity stays.
    pub fn clear(&mut self) {
        self.items.clear();
    }

    /// Room before the next allocation.
    pub fn spare_capacity(&self) -> usize {
        self.items.capacity() - self.items.len()
    }

    /// Items the array can hold without allocating.
    pub fn capacity(&self) -> usize {
        self.items.capacity()
    }
}

impl KVec<u8> {
    /// `n` zero bytes (`malloc(n, M_ZERO)`).
    pub fn zeroed(n: usize, wait: Wait) -> KResult<KVec<u8>> {
        if n == 0 {
            return Ok(KVec::new());
        }
        let ptr = raw_alloc(Self::layout(n)?, wait, true)?;
        // SAFETY: `n` zeroed bytes of fresh storage of u8's layout.
        let items = unsafe { Vec::from_raw_parts(ptr.as_ptr(), n, n) };
        Ok(KVec {
            items: ManuallyDrop::new(items),
        })
    }
}

impl<T> Drop for KVec<T> {
    fn drop(&mut self) {
        if !self.owns_storage() {
            // SAFETY: no storage of ours (empty or zero-sized items): the
            // Vec view drops its items and frees nothing.
            unsafe { ManuallyDrop::drop(&mut self.items) };
            return;
        }
        self.items.clear();
        // SAFETY: the items are dropped; the storage is ours.
        unsafe { Self::free_storage(&mut self.items) }
    }
}

impl<T> Deref for KVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.items
    }
}

impl<T> DerefMut for KVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.items
    }
}

/// The shared part of a [`KArc`].
struct ArcInner<T> {
    refs: AtomicUsize,
    value: T,
}

/// A shared, reference-counted kernel heap value; freed with the last
/// reference. Cloning never allocates, but dropping the last reference
/// frees, so that must not happen with a spin lock held.
pub struct KArc<T> {
    inner: NonNull<ArcInner<T>>,
    _owns: PhantomData<ArcInner<T>>,
}

// SAFETY: as alloc::sync::Arc: the value is shared between threads (Sync)
// and dropped on whichever thread lets go last (Send).
unsafe impl<T: Send + Sync> Send for KArc<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for KArc<T> {}

impl<T: core::fmt::Debug> core::fmt::Debug for KArc<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self).fmt(f)
    }
}

/// More references than this is a leak of references, not a real count.
const MAX_REFS: usize = isize::MAX as usize;

impl<T> KArc<T> {
    /// Allocates `value` on the kernel heap.
    pub fn try_new(value: T, wait: Wait) -> KResult<KArc<T>> {
        let ptr = raw_alloc(Layout::new::<ArcInner<T>>(), wait, false)?.cast::<ArcInner<T>>();
        // SAFETY: fresh memory of ArcInner's layout.
        unsafe {
            ptr.as_ptr().write(ArcInner {
                refs: AtomicUsize::new(1),
                value,
            })
        };
        Ok(KArc {
            inner: ptr,
            _owns: PhantomData,
        })
    }

    /// Whether two references name the same value.
    pub fn ptr_eq(a: &KArc<T>, b: &KArc<T>) -> bool {
        a.inner == b.inner
    }

    /// References to the value, this one included.
    pub fn count(this: &KArc<T>) -> usize {
        this.shared().refs.load(Ordering::Acquire)
    }

    fn shared(&self) -> &ArcInner<T> {
        // SAFETY: the allocation lives while a reference (self) does.
        unsafe { self.inner.as_ref() }
    }
}

impl<T> Clone for KArc<T> {
    fn clone(&self) -> Self {
        let old = self.shared().refs.fetch_add(1, Ordering::Relaxed);
        // As alloc::sync::Arc: a count past isize::MAX is a leak of
        // references (the test is of the sign bit).
        assert!(old <= MAX_REFS, "KArc reference count overflow");
        KArc {
            inner: self.inner,
            _owns: PhantomData,
        }
    }
}

impl<T> Drop for KArc<T> {
    // Most drops only count down: that part is inlined, freeing is not.
    #[inline]
    fn drop(&mut self) {
        if self.shared().refs.fetch_sub(1, Ordering::Release) == 1 {
            self.drop_last();
        }
    }
}

impl<T> KArc<T> {
    /// Drops the value and frees its memory after the last reference.
    #[cold]
    #[inline(never)]
    fn drop_last(&mut self) {
        fence(Ordering::Acquire);
        // SAFETY: this was the last reference: nobody else can reach the
        // value; it is dropped and its memory (from raw_alloc with
        // ArcInner's layout) freed once.
        unsafe {
            core::ptr::drop_in_place(self.inner.as_ptr());
            raw_free(self.inner.cast(), Layout::new::<ArcInner<T>>());
        }
    }
}

impl<T> Deref for KArc<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.shared().value
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_macros, clippy::disallowed_methods)]
mod tests {
    use super::*;
    use std::string::String;

    #[test]
    fn kvec_grows_only_when_asked_and_keeps_items() {
        let m = ksim::Machine::new(ksim::MachineConfig::default());
        let _g = m.enter();
        let mut v: KVec<String> = KVec::new();
        assert!(v.push_within_capacity(String::from("x")).is_err());
        for i in 0..20 {
            v.try_push(std::format!("{i}"), Wait::WaitOk).unwrap();
        }
        assert_eq!(v.len(), 20);
        assert_eq!(v[19], "19");
        assert_eq!(v.remove(0), "0");
        v.retain(|s| s.len() == 1);
        assert_eq!(v.len(), 9);
        assert!(m.kmem_live().0 == 1);
        drop(v);
        assert_eq!(m.kmem_live(), (0, 0));
    }

    #[test]
    fn allocation_failure_is_an_error_not_an_abort() {
        let m = ksim::Machine::new(ksim::MachineConfig::default());
        let _g = m.enter();
        m.fail_alloc_in(1);
        assert_eq!(KBox::try_new(7u64, Wait::NoWait).err(), Some(ENOMEM));
        m.fail_alloc_in(1);
        assert!(KArc::try_new(7u64, Wait::NoWait).is_err());
        m.fail_alloc_in(1);
        let mut v: KVec<u32> = KVec::new();
        assert!(v.try_reserve(3, Wait::WaitOk).is_err());
        assert_eq!(v.capacity(), 0);
        m.clear_alloc_failure();
        assert_eq!(m.kmem_live(), (0, 0));
    }

    #[test]
    fn karc_frees_with_the_last_reference() {
        let m = ksim::Machine::new(ksim::MachineConfig::default());
        let _g = m.enter();
        let a = KArc::try_new(String::from("v"), Wait::WaitOk).unwrap();
        let b = a.clone();
        assert_eq!(KArc::count(&a), 2);
        assert!(KArc::ptr_eq(&a, &b));
        drop(a);
        assert_eq!(m.kmem_live().0, 1);
        assert_eq!(*b, "v");
        drop(b);
        assert_eq!(m.kmem_live(), (0, 0));
    }

    #[test]
    fn unsized_box_and_zeroed_bytes() {
        let m = ksim::Machine::new(ksim::MachineConfig::default());
        let _g = m.enter();
        let b: KBox<dyn Fn() -> u32> =
            KBox::try_new_unsize(|| 5u32, Wait::WaitOk, |b| b as Box<dyn Fn() -> u32>).unwrap();
        assert_eq!(b(), 5);
        let z = KVec::zeroed(64, Wait::WaitOk).unwrap();
        assert!(z.iter().all(|&x| x == 0));
        assert_eq!(KBox::try_new(9u8, Wait::WaitOk).unwrap().into_inner(), 9);
        drop((b, z));
        assert_eq!(m.kmem_live(), (0, 0));
    }
}
