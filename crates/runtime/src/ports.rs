//! A run's interfaces: the sockets frames arrive on and leave by, and — with
//! kernel steering — the eBPF program and one fanout socket per working core on
//! every interface.

use std::sync::Arc;

use balance::CoreId;
use netio::steering::KernelRss;
use netio::PacketSocket;
use nf::Chain;

use crate::error::RunError;
use crate::sink::Tx;

/// Where the packets of an interface run are steered to their cores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Steering {
    /// By the NIC-model thread, which reads every frame and steers it in
    /// software (any frame flowshift parses).
    #[default]
    User,
    /// In the kernel: an eBPF program over a BPF-map indirection table spreads
    /// frames over one socket per working core (IPv4; other frames are counted
    /// `unsteered`).
    Kernel,
}

/// The opened interfaces.
pub(crate) struct Ports {
    /// User steering: one receiving socket per interface, read by the NIC model.
    pub rx: Vec<PacketSocket>,
    /// Kernel steering: per working core, its socket on each interface.
    pub per_core: Vec<Vec<(u8, PacketSocket)>>,
    /// Kernel steering: the program and its maps.
    pub kernel: Option<Arc<KernelRss>>,
    /// Where forwarded packets leave, per core (working, then offloading):
    /// one set of sockets shared by all with `sendmmsg`, a set per core with
    /// transmit rings (a ring has one writer).
    pub tx: Vec<Arc<Tx>>,
    /// A pool node's replication port, read by the NIC model.
    pub replica: Option<crate::replica::ReplicaRx>,
    /// A pool node's links to its secondary, one per working core.
    pub replica_tx: Vec<crate::worker::Replication>,
    /// Receive packet steering turned on for the run (set back when dropped).
    pub _order: netio::rps::FlowOrder,
    /// Kernel steering over AF_XDP: each interface's sockets and program.
    pub _xdp: Vec<netio::xdp::XdpSteering>,
}

impl Ports {
    /// Opens `names` for `workers` working cores, shard s of `owner` on core
    /// `owner[s]`, and `cores` sending cores (working and offloading).
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        names: &[String],
        steering: Steering,
        chain: &Chain,
        owner: &[CoreId],
        workers: usize,
        cores: usize,
        replica: Option<runspec::Replica>,
        rps: bool,
    ) -> Result<Ports, RunError> {
        let cfg = |m: String| RunError::Config(m);
        if names.is_empty() || names.len() > 2 {
            return Err(cfg(format!(
                "iface: {} interfaces given: give one (frames leave where they came in) or two (IN,OUT)",
                names.len()
            )));
        }
        let xdp = match netio::socket_io() {
            netio::Io::Xdp(s) => Some(s),
            netio::Io::Packet => None,
        };
        if let (Some(settings), Steering::Kernel) = (xdp, steering) {
            if replica.is_some() {
                return Err(cfg(
                    "pool replication steers replica messages in the NIC model: use --steer user"
                        .into(),
                ));
            }
            return Ports::xdp_steered(names, chain, owner, workers, cores, settings);
        }
        let xdp = xdp.is_some();
        // (an XDP program takes frames in its receive queue's order: no
        // receive packet steering is involved)
        let order = if xdp {
            netio::rps::FlowOrder::default()
        } else {
            flow_order(names, rps).map_err(cfg)?
        };
        let tx = tx_sets(names, cores)?;
        if steering == Steering::User {
            let (rx, replica_tx) = match replica {
                Some(r) => replication(&r, owner.len(), workers)?,
                None => (None, Vec::new()),
            };
            let rx_sockets = names
                .iter()
                .map(|n| PacketSocket::open(n).map_err(|e| cfg(e.to_string())))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Ports {
                rx: rx_sockets,
                per_core: Vec::new(),
                kernel: None,
                tx,
                replica: rx,
                replica_tx,
                _order: order,
                _xdp: Vec::new(),
            });
        }
        if replica.is_some() {
            return Err(cfg(
                "pool replication steers replica messages in the NIC model: use --steer user"
                    .into(),
            ));
        }
        let (k, per_core) = fanout_steered(names, chain, owner, workers)?;
        Ok(Ports {
            rx: Vec::new(),
            per_core,
            kernel: Some(Arc::new(k)),
            tx,
            replica: None,
            replica_tx: Vec::new(),
            _order: order,
            _xdp: Vec::new(),
        })
    }

    /// Kernel steering over AF_XDP: on each interface an XDP program hashes
    /// every frame and redirects it to its working core's socket on the
    /// frame's queue (`netio::xdp::XdpSteering`); each core reads its own
    /// sockets and sends through its own socket on the other interface.
    fn xdp_steered(
        names: &[String],
        chain: &Chain,
        owner: &[CoreId],
        workers: usize,
        cores: usize,
        settings: netio::xdp::Settings,
    ) -> Result<Ports, RunError> {
        let cfg = |m: String| RunError::Config(m);
        let h = chain.hasher();
        let buckets = chain.buckets() as u32;
        let mut k = KernelRss::maps(h.toeplitz(), h.fields(), buckets, workers as u32)
            .map_err(|e| cfg(format!("kernel steering: {e} (or use --steer user)")))?;
        if let Some(r) = h.rules() {
            // Roger's rules in the XDP program: rule r is bucket r, whose
            // entry in the table (its core) the shard moves rewrite
            k.set_rules(r).map_err(|e| {
                cfg(format!(
                    "steering.rules in the kernel: {e} (or use --steer user)"
                ))
            })?;
        }
        place_owners(&k, owner, buckets)?;
        let mut per_core: Vec<Vec<(u8, PacketSocket)>> = (0..workers).map(|_| Vec::new()).collect();
        let mut steered = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let ifindex = netio::netns::ifindex(name).map_err(|e| cfg(e.to_string()))?;
            let queues = netio::xdp::rx_queues(name);
            if queues > 1 {
                // RSS++ rewrites the NIC's own table; a driver without one
                // (veth) leaves the queue to the sender: the XDP program
                // then picks the core by flowshift's table on every queue
                match netio::xdp::nic_indirection_size(name) {
                    Ok(n) => eprintln!(
                        "flowshift: `{name}`: {queues} receive queues, the driver's RSS table has \
                         {n} entries; flowshift steers by its own table in the XDP program \
                         (the NIC's is left as it is)"
                    ),
                    Err(e) => eprintln!(
                        "flowshift: `{name}`: {queues} receive queues and no RSS table in its \
                         driver ({e}): the XDP program steers by flowshift's table"
                    ),
                }
            }
            let st = netio::xdp::XdpSteering::attach(ifindex, queues, workers as u32, &k, settings)
                .map_err(|e| cfg(format!("interface `{name}`: {e} (or use --io packet)")))?;
            for (w, socks) in per_core.iter_mut().enumerate() {
                let s =
                    PacketSocket::over_xdp(name, st.of_core(w)).map_err(|e| cfg(e.to_string()))?;
                socks.push((i as u8, s));
            }
            steered.push(st);
        }
        let mut tx = Vec::new();
        for c in 0..cores.max(1) {
            let set = names
                .iter()
                .zip(&steered)
                .map(|(n, st)| {
                    PacketSocket::sending_over_xdp(n, st.sender(c)).map_err(|e| cfg(e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            tx.push(Arc::new(Tx(set)));
        }
        Ok(Ports {
            rx: Vec::new(),
            per_core,
            kernel: Some(Arc::new(k)),
            tx,
            replica: None,
            replica_tx: Vec::new(),
            _order: netio::rps::FlowOrder::default(),
            _xdp: steered,
        })
    }
}

/// Receive packet steering on `names` where they have one receive queue and
/// none (`rps`), said once per interface; without `rps`, a warning for each
/// such interface. Steering in user space or in the kernel, flowshift reads
/// what its sockets are handed: frames of a flow its sender sent from two
/// CPUs reach them out of order on a single-queue interface without it (seen
/// on the test bed as a few out-of-order TCP segments in one run in three,
/// none with it; `netio::rps`).
fn flow_order(names: &[String], rps: bool) -> Result<netio::rps::FlowOrder, String> {
    if !rps {
        for name in names {
            if let Some(w) = unordered_receive(name) {
                eprintln!("flowshift: warning: {w}");
            }
        }
        return Ok(netio::rps::FlowOrder::default());
    }
    let (order, done) = netio::rps::FlowOrder::keep(names)
        .map_err(|e| format!("receive packet steering (or set `[io] rps = false`): {e}"))?;
    for (name, q) in names.iter().zip(done) {
        if let netio::rps::Queues::TurnedOn(mask) = q {
            eprintln!(
                "flowshift: interface `{name}` has one receive queue: receive packet steering on \
                 for the run (CPUs {mask}), so each flow's frames arrive in order, as a NIC queue's"
            );
        }
    }
    Ok(order)
}

/// Without receive packet steering, a single-queue interface such as a veth
/// queues each frame on its *sender's* CPU, so a flow sent from two CPUs can
/// reach flowshift out of order. Says so when `iface` has one receive queue
/// and no receive packet steering.
fn unordered_receive(iface: &str) -> Option<String> {
    let dir = format!("/sys/class/net/{iface}/queues");
    let queues: Vec<String> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("rx-"))
        .collect();
    if queues.len() != 1 {
        return None;
    }
    let mask = std::fs::read_to_string(format!("{dir}/{}/rps_cpus", queues[0])).ok()?;
    netio::rps::is_empty_mask(&mask).then(|| {
        format!(
            "interface `{iface}` has one receive queue and no receive packet steering (`rps = false`): \
             frames of a flow sent from two CPUs can reach flowshift out of order; give it one \
             (echo f > {dir}/{}/rps_cpus) as a NIC queue would",
            queues[0]
        )
    })
}

/// Transmit sockets on every interface for each of `cores` sending cores:
/// a transmit ring, or an AF_XDP queue, has one writer (a set per core);
/// `sendmmsg` sockets are shared.
fn tx_sets(names: &[String], cores: usize) -> Result<Vec<Arc<Tx>>, RunError> {
    let cfg = |m: String| RunError::Config(m);
    let open_for = |core: usize| {
        names
            .iter()
            .map(|n| PacketSocket::open_tx_for(n, core).map_err(|e| cfg(e.to_string())))
            .collect::<Result<Vec<_>, _>>()
    };
    let first = Arc::new(Tx(open_for(0)?));
    let mut tx = vec![first.clone()];
    for core in 1..cores.max(1) {
        // a transmit ring, or an AF_XDP queue, has one writer: a set per
        // core; `sendmmsg` sockets are shared
        if matches!(first.0[0].tx_mode(), "ring" | "xdp") {
            tx.push(Arc::new(Tx(open_for(core)?)));
        } else {
            tx.push(first.clone());
        }
    }
    Ok(tx)
}

/// A pool node's replication: its replica port (read by the NIC model) and
/// each working core's links to its secondary, bulk syncs and spill or
/// part nodes.
fn replication(
    r: &runspec::Replica,
    shards: usize,
    workers: usize,
) -> Result<
    (
        Option<crate::replica::ReplicaRx>,
        Vec<crate::worker::Replication>,
    ),
    RunError,
> {
    let cfg = |m: String| RunError::Config(m);
    let secondary = crate::replica::Secondary::new(r.secondary);
    let bulk = crate::bulk::BulkOrder::new(shards, workers);
    let key = r.key.map(pool::auth::Key::new);
    let mut rx =
        crate::replica::ReplicaRx::bind(r.listen, secondary.clone(), bulk.clone(), key.as_ref())
            .map_err(|e| cfg(format!("pool: listening for replicas at {}: {e}", r.listen)))?;
    rx.watch_pair(r.pair_timeout_ms, r.primary, &r.primary_lost);
    let mut tx = Vec::new();
    for w in 0..workers {
        let link =
            crate::replica::ReplicaTx::open(secondary.clone(), key.as_ref()).map_err(|e| {
                cfg(format!(
                    "pool: a socket to the secondary {}: {e}",
                    r.secondary
                ))
            })?;
        let spill = crate::spill::SpillTx::open(r.spill.as_ref(), &r.splits, workers, key.as_ref())
            .map_err(|e| cfg(format!("pool: a socket to a spill or part node: {e}")))?;
        tx.push(crate::worker::Replication::new(
            link,
            crate::bulk::BulkTx::new(bulk.clone(), w, key.as_ref()),
            spill,
        ));
    }
    Ok((Some(rx), tx))
}

/// Every bucket of the kernel's indirection table on its shard's owner
/// (`owner[s]` for shard `s`; buckets map onto shards modulo their count).
fn place_owners(k: &KernelRss, owner: &[CoreId], buckets: u32) -> Result<(), RunError> {
    for b in 0..buckets {
        let q = owner[b as usize % owner.len()];
        k.set(b, u32::from(q))
            .map_err(|e| RunError::Config(format!("kernel steering: {e}")))?;
    }
    Ok(())
}

/// Kernel steering by a fanout program (`--steer kernel` over AF_PACKET):
/// the program's indirection table, shard s's buckets on `owner[s]`'s
/// socket, and each working core's socket on every interface.
#[allow(clippy::type_complexity)]
fn fanout_steered(
    names: &[String],
    chain: &Chain,
    owner: &[CoreId],
    workers: usize,
) -> Result<(KernelRss, Vec<Vec<(u8, PacketSocket)>>), RunError> {
    let cfg = |m: String| RunError::Config(m);
    let h = chain.hasher();
    let buckets = chain.buckets() as u32;
    let k = KernelRss::new(h.toeplitz(), h.fields(), buckets, workers as u32)
        .map_err(|e| cfg(format!("kernel steering: {e} (or use --steer user)")))?;
    place_owners(&k, owner, buckets)?;
    let mut per_core: Vec<Vec<(u8, PacketSocket)>> = (0..workers).map(|_| Vec::new()).collect();
    for (i, name) in names.iter().enumerate() {
        // a group per interface; ids from the process id keep runs apart
        let group = ((std::process::id() as u16) << 1) | i as u16;
        for socks in per_core.iter_mut() {
            let s = PacketSocket::open(name).map_err(|e| cfg(e.to_string()))?;
            s.enable_timestamps()
                .map_err(|e| cfg(format!("interface `{name}`: SO_TIMESTAMPNS: {e}")))?;
            s.join_fanout(group, k.program())
                .map_err(|e| cfg(format!("interface `{name}`: fanout group: {e}")))?;
            socks.push((i as u8, s));
        }
    }
    Ok((k, per_core))
}
