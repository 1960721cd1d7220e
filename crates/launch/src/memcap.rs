//! The memory cap: a configuration whose flow tables, once full, would not fit
//! is refused before anything is allocated, naming the fields that size them
//! (`--memcap`, by default half of this machine's memory).

use anyhow::bail;

/// A size: bytes, or a number with `K`, `M`, `G`, `T` (powers of 1 024; `iB`
/// or `B` may follow).
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    nf::config::parse_size(s).map_err(anyhow::Error::msg)
}

/// The number in kB of line `field:` of a `/proc` file, in bytes.
fn proc_kb(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// A memory figure of this process from `/proc/self/status` (`VmRSS`: now,
/// `VmHWM`: the peak), bytes.
pub fn process_bytes(field: &str) -> Option<u64> {
    proc_kb("/proc/self/status", field)
}

/// This machine's memory, from `/proc/meminfo`.
fn machine_bytes() -> Option<u64> {
    proc_kb("/proc/meminfo", "MemTotal")
}

fn gib(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    }
}

/// Refuses a run of `chain` with `cfg` if its flow tables at capacity and
/// its own structures (rings, the packets they hold, per-core counters:
/// [`runtime::memory`]) exceed `memcap` (a size, or half of the machine's
/// memory), naming what takes the most and the fields that size it.
pub fn check(
    chain: &nf::Chain,
    cfg: &runtime::RunConfig,
    io: &[runtime::memory::Part],
    memcap: Option<&str>,
) -> anyhow::Result<()> {
    let (cap, what) = match memcap {
        Some(s) => (parse_size(s)?, "--memcap".to_string()),
        None => match machine_bytes() {
            Some(m) => (m / 2, format!("half of this machine's {}", gib(m))),
            None => return Ok(()),
        },
    };
    let tables = chain.table_bytes_at_capacity();
    let mut parts = runtime::memory::parts(cfg, chain);
    parts.extend(io.iter().cloned());
    let need = tables + parts.iter().map(|p| p.bytes).sum::<u64>();
    if need <= cap {
        return Ok(());
    }
    let worst = parts.iter().max_by_key(|p| p.bytes);
    match worst {
        Some(p) if p.bytes > tables => bail!(
            "the run would take up to {} ({} of it for the {}), more than {} ({}): \
             lower those, or raise --memcap",
            gib(need),
            gib(p.bytes),
            p.what,
            gib(cap),
            what
        ),
        _ => bail!(
            "the flow tables would take up to {} when full ({} shards × {} flows: \
             `steering.shards` × `table.capacity`; {} in all with the run's rings), \
             more than {} ({}): lower `table.capacity` or `steering.shards`, or raise --memcap",
            gib(tables),
            chain.shard_count(),
            chain.table_capacity(),
            gib(need),
            gib(cap),
            what
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert_eq!(parse_size("8GiB").unwrap(), 8 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5 KiB").unwrap(), 1536);
        for bad in ["", "x", "8 PB", "0", "-1G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
