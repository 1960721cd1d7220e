//! The memory cap: a configuration whose flow tables, once full, would not fit
//! is refused before anything is allocated, naming the fields that size them
//! (`--memcap`, by default half of this machine's memory).

use anyhow::bail;

/// A size: bytes, or a number with `K`, `M`, `G`, `T` (powers of 1 024; `iB`
/// or `B` may follow).
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("`{s}`: expected a size like 8GiB, 512MiB or 1000000"))?;
    let shift = match unit.trim().trim_end_matches("iB").trim_end_matches('B') {
        "" => 0,
        "K" | "k" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => bail!("`{s}`: unknown unit (expected K, M, G or T, with iB or B)"),
    };
    let bytes = n * (1u64 << shift) as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        bail!("`{s}`: expected a size of at least one byte");
    }
    Ok(bytes as u64)
}

/// This machine's memory, from `/proc/meminfo`.
fn machine_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn gib(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    }
}

/// Refuses `chain` if its flow tables at capacity exceed `memcap` (a size,
/// or half of the machine's memory).
pub fn check(chain: &nf::Chain, memcap: Option<&str>) -> anyhow::Result<()> {
    let (cap, what) = match memcap {
        Some(s) => (parse_size(s)?, "--memcap".to_string()),
        None => match machine_bytes() {
            Some(m) => (m / 2, format!("half of this machine's {}", gib(m))),
            None => return Ok(()),
        },
    };
    let need = chain.table_bytes_at_capacity();
    if need > cap {
        bail!(
            "the flow tables would take up to {} when full ({} shards × {} flows: \
             `steering.shards` × `table.capacity`), more than {} ({}): lower \
             `table.capacity` or `steering.shards`, or raise --memcap",
            gib(need),
            chain.shard_count(),
            chain.table_capacity(),
            gib(cap),
            what
        );
    }
    Ok(())
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
