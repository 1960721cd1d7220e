//! The L4 load balancer's pieces (issue 7, in progress): the Maglev lookup table.
//! The NF itself — virtual services, per-flow pinning, destination rewrite with
//! the reply rewritten back, backend health from the control side — is not built
//! yet.

pub mod maglev;

pub use maglev::{is_prime, next_prime, Maglev};
