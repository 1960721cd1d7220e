//! The UPFs' PFCP endpoints for the length of a run: each `[[nf]] kind =
//! "upf"` with a `pfcp` address gets a UDP socket there, answered by its
//! endpoint (`nf::upf::pfcp::Endpoint`) on a thread of its own
//! (`netio::responder`).

use anyhow::Context;

/// Starts every UPF's endpoint of `chain`; they stop when the returned
/// responders are dropped.
pub fn serve(chain: &nf::Chain) -> anyhow::Result<Vec<netio::responder::Responder>> {
    let mut running = Vec::new();
    for n in chain.nfs() {
        let Some(upf) = n.as_any().downcast_ref::<nf::upf::Upf>() else {
            continue;
        };
        let Some((addr, mut endpoint)) = upf.pfcp_endpoint() else {
            continue;
        };
        let r = netio::responder::Responder::start(addr, "pfcp", move |b, from| {
            endpoint.answer(b, from)
        })
        .with_context(|| format!("the PFCP endpoint of `{}` at {addr}", n.name()))?;
        eprintln!(
            "flowshift: `{}` answers PFCP on {}",
            n.name(),
            r.local_addr()
        );
        running.push(r);
    }
    Ok(running)
}
