//! The atomics the runtime's shared state uses: `std`'s, or `loom`'s when built with
//! `--cfg loom` (see the model-checking tests in `loom_tests`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64};
