//! The atomics the indirection table uses: `std`'s, or `loom`'s when built with
//! `--cfg loom` so that model-checking tests explore every interleaving of the same
//! code (the facade crossbeam uses).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU16;

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::AtomicU16;
