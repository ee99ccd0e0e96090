//! malloc(9): fallible kernel allocation that says whether it may sleep.
//!
//! [`KBox`] and [`KVec`] account every allocation with the kernel backend
//! (the simulator counts them, can make any one fail, and reports what is
//! left at unload). Growing a [`KVec`] is always explicit
//! ([`KVec::try_reserve`]), so code that must not allocate (a spin lock
//! held, interrupt context) can insert into space reserved beforehand.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ops::{Deref, DerefMut};

use crate::errno::{ENOMEM, KResult};

/// Whether an allocation may sleep for memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// `M_WAITOK`: may sleep; not with a spin lock held or in an interrupt.
    WaitOk,
    /// `M_NOWAIT`: fails instead of sleeping.
    NoWait,
}

/// One accounted allocation.
/// `Box::new` that reports a failed allocation instead of aborting: in
/// the kernel an allocation that may not sleep can fail.
fn try_box<U>(value: U) -> KResult<Box<U>> {
    let layout = core::alloc::Layout::new::<U>();
    if layout.size() == 0 {
        return Ok(Box::new(value));
    }
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { alloc::alloc::alloc(layout) }.cast::<U>();
    if ptr.is_null() {
        return Err(ENOMEM);
    }
    // SAFETY: `ptr` is a fresh allocation of `U`'s layout from the global
    // allocator, which is what Box owns and frees.
    unsafe {
        ptr.write(value);
        Ok(Box::from_raw(ptr))
    }
}

#[derive(Debug)]
struct Account(u64);

impl Account {
    fn new(bytes: usize, wait: Wait) -> KResult<Account> {
        crate::backend::malloc(bytes, wait == Wait::WaitOk)
            .map(Account)
            .map_err(|_| ENOMEM)
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        crate::backend::free(self.0);
    }
}

/// A kernel heap value.
#[derive(Debug)]
pub struct KBox<T: ?Sized> {
    value: Box<T>,
    _account: Account,
}

impl<T: ?Sized> KBox<T> {
    /// Allocates `value` and converts the box, typically to a trait object
    /// (`|b| b as Box<dyn Trait>`).
    pub fn try_new_unsize<U>(
        value: U,
        wait: Wait,
        convert: impl FnOnce(Box<U>) -> Box<T>,
    ) -> KResult<KBox<T>> {
        let account = Account::new(core::mem::size_of::<U>().max(1), wait)?;
        Ok(KBox {
            value: convert(try_box(value)?),
            _account: account,
        })
    }
}

impl<T> KBox<T> {
    /// Allocates `value` on the kernel heap.
    pub fn try_new(value: T, wait: Wait) -> KResult<KBox<T>> {
        let account = Account::new(core::mem::size_of::<T>().max(1), wait)?;
        Ok(KBox {
            value: try_box(value)?,
            _account: account,
        })
    }

    /// Moves the value out, freeing the allocation.
    pub fn into_inner(self) -> T {
        *self.value
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
#[derive(Debug)]
pub struct KVec<T> {
    items: Vec<T>,
    account: Option<Account>,
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
            items: Vec::new(),
            account: None,
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
        let mut v = KVec::with_capacity(n, wait)?;
        for i in 0..n {
            v.items.push(f(i));
        }
        Ok(v)
    }

    /// Makes room for `additional` more items.
    pub fn try_reserve(&mut self, additional: usize, wait: Wait) -> KResult<()> {
        let needed = self.items.len().checked_add(additional).ok_or(ENOMEM)?;
        if needed <= self.items.capacity() {
            return Ok(());
        }
        let cap = needed.max(self.items.capacity() * 2).max(4);
        let account = Account::new(cap * core::mem::size_of::<T>().max(1), wait)?;
        self.items
            .try_reserve_exact(cap - self.items.len())
            .map_err(|_| ENOMEM)?;
        self.account = Some(account);
        Ok(())
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
}

impl KVec<u8> {
    /// `n` zero bytes (`malloc(n, M_ZERO)`).
    pub fn zeroed(n: usize, wait: Wait) -> KResult<KVec<u8>> {
        let account = Account::new(n.max(1), wait)?;
        let mut items = Vec::new();
        items.try_reserve_exact(n).map_err(|_| ENOMEM)?;
        items.resize(n, 0);
        Ok(KVec {
            items,
            account: Some(account),
        })
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

/// A shared, reference-counted kernel heap value; freed with the last
/// reference. Cloning never allocates, so references may be taken and
/// dropped with a spin lock held.
#[derive(Debug)]
pub struct KArc<T>(Arc<ArcInner<T>>);

#[derive(Debug)]
struct ArcInner<T> {
    value: T,
    _account: Account,
}

impl<T> KArc<T> {
    /// Allocates `value` on the kernel heap.
    pub fn try_new(value: T, wait: Wait) -> KResult<KArc<T>> {
        let account = Account::new(core::mem::size_of::<T>().max(1), wait)?;
        Ok(KArc(Arc::new(ArcInner {
            value,
            _account: account,
        })))
    }

    /// Whether two references name the same value.
    pub fn ptr_eq(a: &KArc<T>, b: &KArc<T>) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl<T> Clone for KArc<T> {
    fn clone(&self) -> Self {
        KArc(Arc::clone(&self.0))
    }
}

impl<T> Deref for KArc<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0.value
    }
}
