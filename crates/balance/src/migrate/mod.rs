//! Migration protocols (RSS++ §3.3, Dyssect Algorithms 1–3).
//!
//! The protocol pieces ([`shard_move`], [`offload`], [`heavy`]) are combined into
//! one machine per side: [`WorkingCore`] for a working core and [`PlanApplier`]
//! for the controller. The runtime, the simulator, the loom models and the
//! random-interleaving tests drive these two, so every ordering rule has one copy.
//!
//! A shard moves from working core 0 to working core 1 while packets flow:
//!
//! ```
//! use balance::migrate::{Action, Order, PlanApplier, Received, WorkingCore, WorkingStart};
//! use balance::Plan;
//!
//! let start = |core, owned| WorkingStart {
//!     core, shards: 2, owned, offloader: None, ratio: 0,
//!     heaviest: false, now_ns: 0, window_ns: 100_000_000,
//! };
//! let mut a: WorkingCore<&str> = WorkingCore::new(start(0, vec![0, 1]));
//! let mut b: WorkingCore<&str> = WorkingCore::new(start(1, vec![]));
//! let mut ctl = PlanApplier::new(vec![0, 0], 0, vec![None, None], 0);
//!
//! // the balancer's plan: shard 1 to core 1 → rewrite the table
//! let plan = Plan { moves: vec![(1, 1)], ..Plan::default() };
//! assert_eq!(ctl.apply(&plan, 0), vec![Order::Rewrite { shard: 1, to: 1, version: 1 }]);
//! // core 1 gets the shard's packets now and holds them
//! assert_eq!(b.on_packet(1, "p2"), Received::Held);
//! // the NIC steers with version 1: core 0 releases, with one packet still queued
//! assert_eq!(ctl.on_nic_seen(1), vec![Order::Release { from: 0, shard: 1, to: 1 }]);
//! a.handle_release(1, 1, 1);
//! assert_eq!(a.poll_action(), None);
//! assert_eq!(a.on_packet(1, "p1"), Received::Process("p1"));
//! a.handle_dequeued(1);
//! assert_eq!(a.poll_action(), Some(Action::SendShard { shard: 1, to: 1 }));
//! // core 1 receives the shard: the held packet runs first, then it reports
//! b.handle_shard(1);
//! assert_eq!(b.poll_action(), Some(Action::RunHere(vec!["p2"])));
//! assert_eq!(b.poll_action(), Some(Action::Arrived { shard: 1, held: 1 }));
//! assert!(ctl.on_arrived(1, 0, 1, 10));
//! assert_eq!(ctl.owner(), &[0, 1]);
//! ```

pub mod actions;
pub mod apply;
pub mod checks;
pub mod heavy;
pub mod offload;
pub mod shard_move;
pub mod steps;
pub mod working;

pub use apply::{ApplyStats, Order, PlanApplier};
pub use checks::{check_drivers, replay, Exercised};
pub use offload::{slice_of, OffloadStats, Recall, Route, WorkingOffload, RATIO_ONE};
pub use shard_move::{Command, MoveError, Mover, Received, WorkerMoves};
pub use steps::{Did, Step};
pub use working::{Action, Due, WorkingCore, WorkingStart, IDLE_RECALL_NS, TIMER_NS};
