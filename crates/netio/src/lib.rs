//! Linux interfaces for flowshift: the sockets a run receives and sends frames
//! through, and the network namespaces its tests build a test bed from. All the
//! system calls of the project live here, so that the runtime stays a driver and
//! everything else stays pure.
//!
//! - [`PacketSocket`]: an `AF_PACKET` raw socket bound to one interface —
//!   non-blocking bursts in (from a `TPACKET_V3` ring shared with the kernel,
//!   or `recvmmsg`), frames out (through a `TPACKET_V2` ring or `sendmmsg`),
//!   its own transmissions ignored.
//! - [`steering::KernelRss`]: RSS in the kernel — an eBPF program (assembled
//!   here, loaded with `bpf(2)`: no compiler, no loader) hashing like the NIC
//!   model through an indirection table in a BPF map, with per-bucket counters.
//! - [`rps::FlowOrder`]: receive packet steering on single-queue interfaces
//!   for a run, so a flow's frames reach it in the order they arrived.
//! - [`netns`]: create, enter and delete network namespaces.
//! - [`testbed::Bed`]: client namespace — veth — flowshift namespace — veth —
//!   server namespace, for integration tests and `scripts/netns.sh`.
//! - [`poolbed::PoolBed`]: client — router — N nodes — server, the router
//!   spreading flows with resilient nexthop groups whose buckets a pool
//!   controller sets, or BGP routes its nodes announce.
//! - [`bird`]: the BIRD 2 daemons of the pool's routing, and their control
//!   sockets; [`guard`]: a process that kills a node's BIRD as soon as the
//!   node starts to exit.

mod batch;
pub mod bird;
pub mod bpf;
pub mod guard;
pub mod netns;
pub mod poolbed;
pub mod responder;
mod ring;
pub mod rps;
pub mod signal;
mod socket;
mod sockopt;
pub mod steering;
pub mod stop;
pub mod testbed;
mod txring;
pub mod udp;
pub mod xdp;
pub mod xsk;

pub use socket::{
    grow_receive_buffer, no_buffer_space, set_io, set_rx_mode, set_tx_mode, socket_drops,
    socket_io, Io, PacketSocket, RxBatch, RxMode, SocketError, TxMode,
};
