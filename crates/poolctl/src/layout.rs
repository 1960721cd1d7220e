//! Where a BGP pool's tenants are and what each node announces: the
//! virtual IPs each node serves (one per node, or `--plan`'s tenants packed
//! and split), its announcements as primary, backup or part, what it may
//! adopt once the pool re-pairs, its split tenants.

use crate::nodes::sync;
use anyhow::bail;
use launch::file::SplitSection;
use netio::poolbed::PoolBed;
use pool::bgp::{Announce, Role, Side};
use serde::Serialize;

/// Where the tenants are.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// Which virtual IPs each node announces as their primary: `vips[i]`
    /// node `i`'s (tenants' indices; without a plan, node i serves virtual
    /// IP i). A split tenant's is its first part's node.
    pub vips: Vec<Vec<usize>>,
    /// Split tenants: the node of each part, in part order.
    pub parts: std::collections::BTreeMap<usize, Vec<usize>>,
}

/// A tenant placed, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct Placed {
    pub tenant: String,
    pub vip: String,
    /// Its primary, and its secondary (the next node).
    pub node: usize,
    pub backup: usize,
    /// A split tenant's nodes, in part order (the first is `node`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<usize>,
}

/// What node `i` announces: the virtual IPs it serves and its NAT pool as
/// their primary, those of the node it backs up (node i − 1: it is that
/// node's secondary) as their backup, and the virtual IP of each split
/// tenant it serves another part of as that (the longest path: used once
/// neither the tenant's primary nor its backup announces it).
pub fn announcements(i: usize, layout: &Layout) -> Vec<Announce> {
    let n = layout.vips.len();
    let prev = (i + n - 1) % n;
    let prefix = |s: String| s.parse().expect("the bed's prefixes parse");
    let mut out = own(i, layout, Role::Primary);
    out.extend(own(prev, layout, Role::Backup));
    for (&t, nodes) in &layout.parts {
        let a = Announce {
            prefix: prefix(format!("{}/32", PoolBed::vip(t))),
            side: Side::Front,
            role: Role::Part,
        };
        if nodes[1..].contains(&i) && !out.iter().any(|o| o.prefix == a.prefix) {
            out.push(a);
        }
    }
    out
}

/// Node `j`'s own prefixes (its virtual IPs, its NAT pool) in `role`.
pub fn own(j: usize, layout: &Layout, role: Role) -> Vec<Announce> {
    let prefix = |s: String| s.parse().expect("the bed's prefixes parse");
    layout.vips[j]
        .iter()
        .map(|&t| Announce {
            prefix: prefix(format!("{}/32", PoolBed::vip(t))),
            side: Side::Front,
            role,
        })
        .chain([Announce {
            prefix: prefix(PoolBed::nat_pool(j)),
            side: Side::Back,
            role,
        }])
        .collect()
}

/// What node `i` may be asked to back up once the pool re-pairs after a
/// failure (`crate::repair`): every node's own prefixes but its own and
/// its primary's (which it backs up from the start), less any it announces
/// already.
pub fn adoptable(i: usize, layout: &Layout) -> Vec<pool::bgp::Adopt> {
    let n = layout.vips.len();
    let mine = announcements(i, layout);
    (0..n)
        .filter(|&j| j != i && j != (i + n - 1) % n)
        .map(|j| pool::bgp::Adopt {
            from: sync(j),
            announce: own(j, layout, Role::Backup)
                .into_iter()
                .filter(|a| !mine.iter().any(|m| m.prefix == a.prefix))
                .collect(),
        })
        .collect()
}

/// Node `i`'s split tenants (`[[pool.split]]`): those whose primary it is,
/// and those whose primary it backs up (it serves their first part once
/// promoted) — unless it also serves one of their parts (it then holds the
/// state of both and serves every connection itself).
pub fn splits(i: usize, layout: &Layout) -> Vec<SplitSection> {
    let n = layout.vips.len();
    layout
        .parts
        .iter()
        .filter(|(_, nodes)| nodes[0] == i || ((nodes[0] + 1) % n == i && !nodes.contains(&i)))
        .map(|(&t, nodes)| SplitSection {
            vip: PoolBed::vip(t).parse().expect("an address"),
            local: 0,
            parts: nodes.iter().map(|&k| sync(k)).collect(),
        })
        .collect()
}

/// Places `--plan`'s tenants on `nodes` nodes (`pool::pack`, first fit by
/// the largest share; a tenant larger than a node split by symmetric hash
/// into as few parts as fit): where they are, and their names.
pub fn place(plan: &str, nodes: usize) -> anyhow::Result<(Layout, Vec<String>)> {
    if plan == "0" {
        bail!("--plan 0: place at least one tenant (a number of fNICs, or a tenants file)");
    }
    let args = crate::tenants::PlanArgs {
        tenants: plan.parse::<usize>().is_err().then(|| plan.into()),
        mix: crate::tenants::MixArg::Equal,
        count: plan.parse().unwrap_or(0),
        seed: 1,
        split: "oversize".into(),
        show: false,
        json: false,
    };
    let (names, demands, node) = crate::tenants::load(&args)?;
    if names.len() > netio::poolbed::MAX_VIPS {
        bail!(
            "--plan: {} tenants; the bed has virtual IPs for {}",
            names.len(),
            netio::poolbed::MAX_VIPS
        );
    }
    let p = pool::pack(
        &demands,
        &node,
        pool::Heuristic::FfdMax,
        pool::Split::Oversize,
    )
    .map_err(|e| anyhow::anyhow!("--plan: {e}"))?;
    if p.nodes.len() > nodes {
        bail!(
            "--plan: the tenants need {} nodes (first fit); the pool has {nodes} (--nodes)",
            p.nodes.len()
        );
    }
    let mut layout = Layout {
        vips: vec![Vec::new(); nodes],
        parts: Default::default(),
    };
    for (i, parts) in p.nodes.iter().enumerate() {
        for part in parts {
            if part.of > 1 {
                let of = usize::from(part.of);
                let at = layout
                    .parts
                    .entry(part.tenant)
                    .or_insert_with(|| vec![usize::MAX; of]);
                at[usize::from(part.part)] = i;
            }
            if part.part == 0 {
                layout.vips[i].push(part.tenant);
            }
        }
    }
    if let Some((t, nodes)) = layout
        .parts
        .iter()
        .find(|(_, n)| n.contains(&usize::MAX) || (1..n.len()).any(|k| n[..k].contains(&n[k])))
    {
        bail!(
            "--plan: tenant {} split over nodes {nodes:?}: each part on a node of its own",
            names[*t]
        );
    }
    Ok((layout, names))
}
