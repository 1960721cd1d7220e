//! The NFs flowshift knows, in one place. Each line names an NF's `kind` in the
//! `[[nf]]` tables, its configuration section (which owns its parsing, checks and
//! build, in the NF's own module, through [`BuildNf`](crate::fields::BuildNf)),
//! and the per-flow state and shard-local state it keeps in flowshift's tables.
//! `flow_state` makes of these the [`FlowState`](crate::FlowState) and
//! [`ShardLocal`](crate::ShardLocal) enums that flow entries and shards hold
//! (inline, with no allocation per flow); `sections` the
//! [`NfSection`](crate::config::NfSection) enum the TOML is read into and its
//! build dispatcher. Adding an NF is one more line here.

/// Calls macro `$m` with the list of NF kinds.
macro_rules! with_nf_kinds {
    ($m:ident) => {
        $m! {
            /// Stateful firewall: ACL compiled to a disjoint classifier, connection
            /// tracking.
            Firewall = "firewall": crate::firewall::FirewallSection,
                flow Conn(crate::firewall::conntrack::Conn);
            /// NAPT: a mapping per flow, a share of the port pool per shard.
            Nat = "nat": crate::nat::NatSection, flow Nat(crate::nat::map::NatMap),
                local NatPool(crate::nat::pool::PortPool);
            /// Traffic monitor: mergeable per-core sketches, or exact per-source
            /// counters per shard.
            Monitor = "monitor": crate::monitor::MonitorSection,
                local MonitorExact(crate::monitor::per_source::PerSource);
            /// Sequence check (reordering counter).
            Seqcheck = "seqcheck": crate::seqcheck::SeqCheckSection,
                flow Seq(crate::seqcheck::state::SeqState);
            /// L3 forwarding (longest-prefix match over disjoint entries).
            Router = "router": crate::router::RouterSection;
            /// L4 load balancer: Maglev, connections pinned, its source ports split
            /// per shard like the NAT's.
            Lb = "lb": crate::lb::config::LbSection, flow Lb(crate::lb::conn::LbConn),
                local LbPool(crate::nat::pool::PortPool);
            /// Streaming IDS: matcher states per flow (boxed: the other NFs' states
            /// fit in 16 bytes, and a flow entry's slot is as large as the largest).
            Ids = "ids": crate::ids::IdsSection, flow Ids(Box<crate::ids::flow::IdsFlow>);
            /// NPTv6 (RFC 6296): stateless, checksum-neutral IPv6 prefix
            /// translation.
            Nptv6 = "nptv6": crate::nptv6::Nptv6Section;
            /// 5G UPF: GTP-U tunnels, PDRs, FARs, QERs and URRs installed
            /// over PFCP.
            Upf = "upf": crate::upf::UpfSection;
        }
    };
}
