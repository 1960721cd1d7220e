//! The L4 load balancer: virtual services (VIP:port) spread over backends by
//! Maglev consistent hashing, each connection pinned to its backend in flow state;
//! backend health changed from the control side while traffic flows.
//!
//! ```toml
//! [[nf]]
//! kind = "lb"
//! snat = ["192.0.2.10"]          # the balancer's own source addresses
//! ports = "1024-65535"           # its source ports (default)
//! table_size = 65537             # Maglev M: a prime > 100 × backends (default)
//! [[nf.service]]
//! vip = "10.0.0.100:80"
//! proto = "tcp"                  # or "udp"
//! backends = ["10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080"]
//! down = ["10.1.0.3:8080"]       # backends starting unhealthy (optional)
//! ```
//!
//! Its control component (backend health → the services' tables, see
//! [`control`]) runs inline or on a core of its own:
//!
//! ```toml
//! placement = "core"             # or "inline" (default)
//! ring = 1024                    # queued policy requests (default)
//! [[nf.health]]                  # policy requests played at chain time `at`
//! at = "2s"
//! service = "10.0.0.100:80"
//! backend = "10.1.0.3:8080"
//! up = false
//! ```

pub mod config;
pub mod conn;
pub mod control;
pub mod maglev;
mod nf;
pub mod service;

pub use control::{LbControl, PolicyRequest, Scheduled};
pub use maglev::{is_prime, next_prime, Maglev};
pub use nf::{Lb, LbConn, LbCounters};
pub use service::{Backend, Service};
