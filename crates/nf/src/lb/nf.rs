//! The L4 load balancer NF (full NAT): a new flow to a virtual service gets a
//! backend from the service's Maglev table and a source address and port of the
//! balancer's own (`snat`), chosen — as the NAT does — so that the backend's reply
//! hashes to the same RSS bucket and reaches the core holding the flow. Both are
//! pinned in the flow's state: a later health change never moves an established
//! connection. Forward packets are rewritten client→VIP ⇒ snat→backend, replies
//! backend→snat ⇒ VIP→client, with incremental checksums.
//!
//! Why full NAT: with destination rewrite alone, the backend's reply tuple
//! (backend → client) hashes to an unrelated bucket, i.e. another core, and the
//! flow's state would have to be shared or handed over; rewriting the source too
//! keeps every packet of a connection in one shard, with no lock.

pub use super::conn::LbConn;
use crate::NfMeta;
use core::net::{IpAddr, Ipv4Addr};
use core::time::Duration;
use std::sync::Arc;

use state::{Dir, FlowKey};
use wire::{FiveTuple, Ipv4Packet, L4Info, TcpPacket, UdpPacket};

use super::control::LbControl;
use super::control::{Control, Scheduled};
use super::service::Service;
use crate::component::Placement;
use crate::nat::{NatTcp, NatTimeouts, PortClass, PortPlan, PortPool};
use crate::{
    Ctx, DropCause, FlowState, Nf, NflowKey, Packet, ShardInfo, ShardLocal, StateKind, Verdict,
};

counters! {
    /// Load balancer counters.
    LbCounters {
        /// Connections placed on a backend.
        placed,
        /// Connections released (expired or evicted).
        released,
        /// New connections on a closed connection's ports placed again (the
        /// old one released) because the service's table now gives their
        /// tuple another backend.
        rescheduled,
        /// Client → backend packets rewritten.
        forward,
        /// Backend → client packets rewritten back.
        replies,
        /// Packets not for a service (passed untouched).
        passed,
    }
}

pub(super) struct Shared {
    /// What a live reload to this configuration makes of the running one
    /// (made once, by the first core that reloads; the others take it).
    reloaded: std::sync::OnceLock<Result<Arc<Shared>, String>>,
    pub(super) control: LbControl,
    pub(super) snat: Vec<Ipv4Addr>,
    /// `snat`, sorted, for membership tests.
    pub(super) snat_sorted: Vec<Ipv4Addr>,
    pub(super) ports: (u16, u16),
    pub(super) timeouts: NatTimeouts,
}

impl Shared {
    /// The balancer a live reload to `new` makes of this one: every service
    /// and backend keeps its index (connections hold them), see
    /// [`Service::reloaded`]; services new to the configuration are appended;
    /// the control component goes on (placement, requests, schedule,
    /// statistics) over the new services.
    fn reloaded(&self, new: &Shared) -> Result<Arc<Shared>, String> {
        if new.ports != self.ports {
            return Err("`ports` cannot change live (each shard owns its share of them)".into());
        }
        if !new.snat.starts_with(&self.snat) {
            return Err(
                "`snat` addresses may be added at its end; removing or reordering them \
                 needs a restart (connections hold their place)"
                    .into(),
            );
        }
        let (old_ctl, new_ctl) = (&self.control.component, &new.control.component);
        if new_ctl.configured() != old_ctl.configured() {
            return Err("`placement` cannot change live".into());
        }
        if new_ctl.schedule_named(new.control.services())
            != old_ctl.schedule_named(self.control.services())
        {
            return Err("`health` (the schedule) cannot change live".into());
        }
        let same = |a: &Service, b: &Service| (a.vip, a.port, a.proto) == (b.vip, b.port, b.proto);
        let old = self.control.services();
        let mut services = Vec::new();
        for s in old {
            let n = new.control.services().iter().find(|n| same(s, n));
            services.push(s.reloaded(n)?);
        }
        for n in new.control.services() {
            if !old.iter().any(|s| same(s, n)) {
                services.push(n.copied()?);
            }
        }
        if services.len() > usize::from(u16::MAX) {
            return Err("too many services over the run's reloads".into());
        }
        let services = Arc::new(services);
        let component = Arc::new(old_ctl.carried(services.clone())?);
        let mut snat_sorted = new.snat.clone();
        snat_sorted.sort_unstable();
        Ok(Arc::new(Shared {
            reloaded: Default::default(),
            control: LbControl {
                services,
                component,
            },
            snat: new.snat.clone(),
            snat_sorted,
            ports: new.ports,
            timeouts: new.timeouts.clone(),
        }))
    }
}

/// The load balancer NF.
#[derive(Clone)]
pub struct Lb {
    meta: NfMeta,
    shared: Arc<Shared>,
    plan: Option<Arc<PortPlan>>,
    counters: LbCounters,
    /// Connections placed per (service, backend), on this core.
    per_backend: Vec<Vec<u64>>,
    /// Chain time of the control schedule's next entry (a local copy, so the
    /// packet path compares a number instead of loading a shared index).
    due: u64,
}

impl Lb {
    /// A balancer over `services`, sourcing balanced connections from the
    /// addresses `snat` (at least one) and ports `ports.0..=ports.1`.
    pub fn new(
        name: impl Into<String>,
        services: Vec<Service>,
        snat: Vec<Ipv4Addr>,
        ports: (u16, u16),
        timeouts: NatTimeouts,
    ) -> Result<Lb, String> {
        if snat.is_empty() {
            return Err("a load balancer needs at least one snat address".into());
        }
        if services.is_empty() {
            return Err("a load balancer needs at least one service".into());
        }
        let per_backend = services.iter().map(|s| vec![0; s.backends.len()]).collect();
        let mut snat_sorted = snat.clone();
        snat_sorted.sort_unstable();
        let services = Arc::new(services);
        let component = Control::new(services.clone(), Placement::Inline, 1024, Vec::new())?;
        Ok(Lb {
            meta: NfMeta::new(name, "lb", NflowKey::BiFiveTuple, StateKind::PerFlow)
                .with_ports()
                .with_alias(),
            shared: Arc::new(Shared {
                control: LbControl {
                    services,
                    component: Arc::new(component),
                },
                snat,
                snat_sorted,
                ports,
                timeouts,
                reloaded: Default::default(),
            }),
            plan: None,
            counters: LbCounters::default(),
            per_backend,
            due: u64::MAX,
        })
    }

    /// Places the control component (see [`super::control`]): `inline` or on a
    /// core of its own, with room for `ring` queued requests, playing `schedule`.
    /// Call before the balancer is copied to other cores.
    pub fn with_control(
        mut self,
        placement: Placement,
        ring: usize,
        schedule: Vec<Scheduled>,
    ) -> Result<Lb, String> {
        let shared = Arc::get_mut(&mut self.shared)
            .ok_or("the control component is placed before the balancer is shared")?;
        let c = Control::new(shared.control.services.clone(), placement, ring, schedule)?;
        self.due = c.next_due();
        shared.control.component = Arc::new(c);
        Ok(self)
    }

    /// Waits (bounded) until the control component has applied what it was sent.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        self.shared.control.wait_idle(timeout)
    }

    /// The control side (health changes while traffic flows).
    pub fn control(&self) -> LbControl {
        self.shared.control.clone()
    }

    /// Connections placed per backend, per service (this instance; merged over
    /// cores in a run's final chain).
    pub fn placed_per_backend(&self) -> &[Vec<u64>] {
        &self.per_backend
    }

    fn service_of(&self, t: &FiveTuple) -> Option<Option<usize>> {
        let IpAddr::V4(dst) = t.dst else {
            return None;
        };
        let services = self.shared.control.services();
        if !services.iter().any(|s| s.vip == dst) {
            return None;
        }
        Some(
            services.iter().position(|s| {
                s.vip == dst && s.port == t.dst_port && s.proto == t.proto && !s.retired
            }),
        )
    }

    fn timeout(&self, c: &LbConn) -> u64 {
        let t = &self.shared.timeouts;
        let d: Duration = match c.tcp {
            _ if self.is_udp(c) => t.udp,
            NatTcp::Established => t.tcp_established,
            _ => t.tcp_transitory,
        };
        d.as_nanos() as u64
    }

    fn is_udp(&self, c: &LbConn) -> bool {
        self.shared.control.services()[usize::from(c.service)].proto == wire::proto::UDP
    }

    /// Places a new connection: backend, then a source port whose reply lands
    /// in this packet's bucket.
    fn place(
        &mut self,
        cx: &mut Ctx<'_>,
        pkt: &Packet,
        s: usize,
        client: Ipv4Addr,
    ) -> Result<LbConn, DropCause> {
        let t = pkt.info.tuple;
        let svc = &self.shared.control.services()[s];
        let b = svc
            .place(u64::from(FlowKey::of(&t).0.mix()))
            .ok_or(DropCause::LbNoBackend)?;
        let backend = svc.backends[b];
        let pool = match cx.local {
            ShardLocal::LbPool(p) => p,
            // an offloading core: `offloadable` keeps new connections on the owner
            _ => return Err(DropCause::OffloadState),
        };
        let class = if t.proto == wire::proto::TCP {
            PortClass::Tcp
        } else {
            PortClass::Udp
        };
        let toeplitz = cx.hasher.toeplitz();
        let mask = self.plan.as_ref().expect("bound").mask();
        let n = self.shared.snat.len();
        let start = (pkt.hash >> 16) as usize % n;
        for k in 0..n {
            let e = (start + k) % n;
            // the reply's input: [backend, snat, backend port, snat port]
            let partial = toeplitz.contribution(0, &backend.addr.octets())
                ^ toeplitz.contribution(4, &self.shared.snat[e].octets())
                ^ toeplitz.contribution(8, &backend.port.to_be_bytes());
            if let Some(p) = pool.alloc(e, class, (pkt.hash ^ partial) & mask) {
                self.per_backend[s][b] += 1;
                return Ok(LbConn {
                    client,
                    client_port: t.src_port,
                    service: s as u16,
                    backend: b as u16,
                    snat_idx: e as u16,
                    snat_port: p,
                    tcp: NatTcp::Opening,
                });
            }
        }
        Err(DropCause::LbPortsExhausted)
    }
    /// A packet of a placed connection: its TCP progress and timeout, both
    /// directions rewritten.
    fn forward(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet, c: LbConn) -> Verdict {
        let mut c2 = c;
        if let L4Info::Tcp { flags } = pkt.info.l4 {
            c2.tcp = c.tcp.after(flags, pkt.dir);
        }
        if c2 != c {
            cx.insert(FlowState::Lb(c2));
        }
        cx.set_timeout(self.timeout(&c2));
        let svc = &self.shared.control.services()[usize::from(c.service)];
        let backend = svc.backends[usize::from(c.backend)];
        let snat = (self.shared.snat[usize::from(c.snat_idx)], c.snat_port);
        if pkt.dir == Dir::Original {
            rewrite(pkt, snat, (backend.addr, backend.port));
            self.counters.forward += 1;
        } else {
            rewrite(pkt, (svc.vip, svc.port), (c.client, c.client_port));
            self.counters.replies += 1;
        }
        Verdict::Forward
    }

    /// A packet of no connection: a new one placed, or the packet's drop.
    fn place_new(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        let t = pkt.info.tuple;
        if let IpAddr::V4(d) = t.dst {
            if self.shared.snat_sorted.binary_search(&d).is_ok() {
                return Verdict::Drop(DropCause::LbNoConnection);
            }
        }
        let s = match self.service_of(&t) {
            None => {
                self.counters.passed += 1;
                return Verdict::Forward;
            }
            Some(None) => return Verdict::Drop(DropCause::LbNoService),
            Some(Some(s)) => s,
        };
        let IpAddr::V4(client) = t.src else {
            return Verdict::Drop(DropCause::LbNoService);
        };
        if pkt.dir == Dir::Reply || pkt.info.l4 == L4Info::Fragment {
            // a packet from the VIP side of an unknown connection, or a
            // fragment whose first fragment placed no connection
            return Verdict::Drop(DropCause::LbNoConnection);
        }
        let c = match self.place(cx, pkt, s, client) {
            Ok(c) => c,
            Err(e) => return Verdict::Drop(e),
        };
        let backend = self.shared.control.services()[s].backends[usize::from(c.backend)];
        rewrite(
            pkt,
            (self.shared.snat[usize::from(c.snat_idx)], c.snat_port),
            (backend.addr, backend.port),
        );
        // the rewritten tuple becomes a second key of this entry: the
        // backend's replies find the connection
        if !cx.alias_rewritten(pkt) {
            return Verdict::Drop(DropCause::OffloadState);
        }
        cx.insert(FlowState::Lb(c));
        cx.set_timeout(self.timeout(&c));
        self.counters.placed += 1;
        self.counters.forward += 1;
        Verdict::Forward
    }

    /// A new connection on a closed one's ports (a SYN without ACK in its
    /// closing state) is scheduled again, as IPVS does with
    /// `conn_reuse_mode`: when the service's table now gives the tuple
    /// another backend (its own drained, down or removed, or the service
    /// retired), the old connection is released here and true returned, and
    /// the packet is taken as a new connection; otherwise it reopens on its
    /// backend, as it does on an offloading core, which cannot place.
    fn rescheduled(&mut self, cx: &mut Ctx<'_>, pkt: &Packet, c: &LbConn) -> bool {
        let L4Info::Tcp { flags } = pkt.info.l4 else {
            return false;
        };
        if pkt.dir != Dir::Original || !c.tcp.reopened_by(flags) {
            return false;
        }
        let ShardLocal::LbPool(_) = cx.local else {
            return false;
        };
        let hash = u64::from(FlowKey::of(&pkt.info.tuple).0.mix());
        let same = self
            .shared
            .control
            .services()
            .get(usize::from(c.service))
            .is_some_and(|svc| !svc.retired && svc.place(hash) == Some(usize::from(c.backend)));
        if same {
            return false;
        }
        if let Some(old) = cx.delete() {
            self.release(cx.local, old);
        }
        self.counters.rescheduled += 1;
        true
    }
}

/// Rewrites both endpoints of a TCP or UDP packet, checksums updated
/// incrementally (a zero UDP checksum stays zero).
fn rewrite(pkt: &mut Packet, src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16)) {
    let old = pkt.info.tuple;
    {
        let mut ip = Ipv4Packet::new_unchecked(pkt.l3_mut());
        ip.rewrite_src_addr(src.0);
        ip.rewrite_dst_addr(dst.0);
    }
    let (s, d) = (IpAddr::V4(src.0), IpAddr::V4(dst.0));
    match pkt.info.l4 {
        L4Info::Tcp { .. } => {
            let mut tcp = TcpPacket::new_unchecked(pkt.l4_mut());
            tcp.update_checksum_for_addr(old.src, s);
            tcp.update_checksum_for_addr(old.dst, d);
            tcp.rewrite_src_port(src.1);
            tcp.rewrite_dst_port(dst.1);
        }
        L4Info::Udp => {
            let mut udp = UdpPacket::new_unchecked(pkt.l4_mut());
            udp.update_checksum_for_addr(old.src, s);
            udp.update_checksum_for_addr(old.dst, d);
            udp.rewrite_src_port(src.1);
            udp.rewrite_dst_port(dst.1);
        }
        _ => {}
    }
    let t = &mut pkt.info.tuple;
    (t.src, t.src_port, t.dst, t.dst_port) = (s, src.1, d, dst.1);
}

impl Nf for Lb {
    fn meta(&self) -> &NfMeta {
        &self.meta
    }

    /// A placed connection needs only its slot; placing one needs the pool.
    fn offloadable(&self, slot: Option<&FlowState>) -> bool {
        slot.is_some()
    }

    fn bind(&mut self, hasher: &steer::RssHasher, bucket_mask: u32) {
        self.plan = Some(PortPlan::bound(hasher, bucket_mask, self.shared.ports));
    }

    fn shard_local(&self, shard: &ShardInfo) -> ShardLocal {
        ShardLocal::LbPool(PortPool::new(
            self.plan
                .clone()
                .expect("the chain binds the balancer first"),
            shard.index,
            shard.count,
            self.shared.snat.len(),
        ))
    }

    fn process(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        let ctl = &self.shared.control;
        self.due = ctl.component.poll(&ctl.services, cx.now_ns, self.due);
        if let L4Info::IcmpError { .. } = pkt.info.l4 {
            // the balancer does not translate ICMP errors' quotes: counted, not
            // passed half-translated
            return Verdict::Drop(DropCause::LbNoConnection);
        }
        if let Some(FlowState::Lb(c)) = cx.get() {
            let c = *c;
            if !self.rescheduled(cx, pkt, &c) {
                return self.forward(cx, pkt, c);
            }
        }
        self.place_new(cx, pkt)
    }

    /// Services and backends change live (see [`Shared::reloaded`]): a
    /// connection keeps its backend, a backend or service gone from the
    /// configuration takes no new connection and its connections drain;
    /// `snat` may grow at its end; timeouts change.
    fn reload(&mut self, new: &dyn Nf) -> Result<(), String> {
        let n = new
            .as_any()
            .downcast_ref::<Lb>()
            .ok_or("not a load balancer")?;
        let merged = n
            .shared
            .reloaded
            .get_or_init(|| self.shared.reloaded(&n.shared))
            .clone()?;
        self.due = merged.control.component.next_due();
        self.shared = merged;
        let services = self.shared.control.services();
        self.per_backend.resize(services.len(), Vec::new());
        for (v, s) in self.per_backend.iter_mut().zip(services) {
            v.resize(s.backends.len(), 0);
        }
        Ok(())
    }

    fn release(&mut self, local: &mut ShardLocal, state: FlowState) {
        if let (ShardLocal::LbPool(pool), FlowState::Lb(c)) = (local, state) {
            let class = if self.is_udp(&c) {
                PortClass::Udp
            } else {
                PortClass::Tcp
            };
            pool.free(usize::from(c.snat_idx), class, c.snat_port);
            self.counters.released += 1;
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = self.counters.list();
        v.extend(self.shared_counters());
        v
    }

    /// The control component's, shared by every core's instance.
    fn shared_counters(&self) -> Vec<(&'static str, u64)> {
        self.shared.control.component.counters().to_vec()
    }

    fn placements(&self) -> Vec<crate::director::Decision> {
        self.shared.control.decisions()
    }

    fn placement(&self) -> Option<String> {
        Some(match self.shared.control.component.configured() {
            Placement::Inline => "control inline".into(),
            Placement::Core => "control on a core".into(),
            Placement::Auto => "control placed by the director: inline or a core".into(),
        })
    }

    fn instance(&self) -> Box<dyn Nf> {
        let mut n = self.clone();
        n.counters = LbCounters::default();
        n.per_backend.iter_mut().flatten().for_each(|x| *x = 0);
        Box::new(n)
    }

    fn settle(&self) {
        self.wait_idle(Duration::from_secs(10));
    }

    fn merge_from(&mut self, other: &dyn Nf) {
        if let Some(o) = other.as_any().downcast_ref::<Lb>() {
            self.counters.add(&o.counters);
            for (a, b) in self.per_backend.iter_mut().zip(&o.per_backend) {
                for (x, y) in a.iter_mut().zip(b) {
                    *x += y;
                }
            }
        }
    }
}
