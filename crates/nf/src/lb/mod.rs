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

pub mod config;
pub mod maglev;
mod nf;
pub mod service;

pub use maglev::{is_prime, next_prime, Maglev};
pub use nf::{Lb, LbConn, LbCounters};
pub use service::{Backend, LbControl, Service};
