//! Faults a test can inject into the runtime, to see that its checks see
//! them (compiled for tests only).

// (std's atomic, not the loom facade's: a static, which loom's atomics
// cannot be, and a switch no model checks)
use std::sync::atomic::AtomicBool;

/// Held packets run in reverse order (a broken hold queue). Read with
/// `Relaxed`: a test sets it before its run starts, and the run's thread
/// spawns order that store before the workers' loads.
pub static REVERSE_HELD: AtomicBool = AtomicBool::new(false);
