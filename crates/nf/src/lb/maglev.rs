//! Maglev consistent hashing (Eisenbud et al., NSDI'16 §3.4): a lookup table of M
//! entries (M prime) filled by letting every backend claim entries in the order of
//! its own permutation (offset and skip from two hashes of its name), round-robin
//! until the table is full. Each backend gets ⌊M/N⌋ or ⌈M/N⌉ entries, and taking
//! one backend out reassigns its entries while most of the others keep theirs.
//!
//! Pure: the L4 load balancer places a *new* flow with [`Maglev::lookup`] and pins
//! the choice in the flow's state, so a later table change never moves an
//! established connection.

/// A Maglev lookup table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Maglev {
    /// Backend index per entry (`u32::MAX`: no backend is healthy).
    table: Vec<u32>,
}

/// FNV-1a with a seed: two independent hashes of a backend's name.
fn hash(name: &str, seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // final avalanche (splitmix64)
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// True if `m` is prime.
pub fn is_prime(m: usize) -> bool {
    m >= 2
        && (2..)
            .take_while(|d| d * d <= m)
            .all(|d| !m.is_multiple_of(d))
}

/// The smallest prime ≥ `n`.
pub fn next_prime(n: usize) -> usize {
    (n.max(2)..)
        .find(|&m| is_prime(m))
        .expect("primes are unbounded")
}

impl Maglev {
    /// A table of `m` entries (prime) over the backends named `names`, of which
    /// those with `healthy[i]` false get no entry.
    pub fn new(names: &[String], healthy: &[bool], m: usize) -> Result<Maglev, String> {
        if !is_prime(m) {
            return Err(format!(
                "table size {m} is not prime (try {})",
                next_prime(m)
            ));
        }
        if names.len() != healthy.len() {
            return Err("one health flag per backend".into());
        }
        let live: Vec<usize> = (0..names.len()).filter(|&i| healthy[i]).collect();
        let mut table = vec![u32::MAX; m];
        if live.is_empty() {
            return Ok(Maglev { table });
        }
        let perm: Vec<(usize, usize)> = live
            .iter()
            .map(|&i| {
                let offset = (hash(&names[i], 1) % m as u64) as usize;
                let skip = (hash(&names[i], 2) % (m as u64 - 1)) as usize + 1;
                (offset, skip)
            })
            .collect();
        let mut next = vec![0usize; live.len()];
        let mut filled = 0;
        'fill: loop {
            for (k, &i) in live.iter().enumerate() {
                let (offset, skip) = perm[k];
                let mut c = (offset + next[k] * skip) % m;
                while table[c] != u32::MAX {
                    next[k] += 1;
                    c = (offset + next[k] * skip) % m;
                }
                table[c] = i as u32;
                next[k] += 1;
                filled += 1;
                if filled == m {
                    break 'fill;
                }
            }
        }
        Ok(Maglev { table })
    }

    /// The backend for a flow hash (`None`: no healthy backend).
    pub fn lookup(&self, flow_hash: u64) -> Option<usize> {
        let e = self.table[(flow_hash % self.table.len() as u64) as usize];
        (e != u32::MAX).then_some(e as usize)
    }

    /// Entries per backend (index = backend).
    pub fn shares(&self, backends: usize) -> Vec<usize> {
        let mut v = vec![0; backends];
        for &e in &self.table {
            if let Some(x) = v.get_mut(e as usize) {
                *x += 1;
            }
        }
        v
    }

    /// The table size M.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Never true (a table has M ≥ 2 entries); for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Entries whose backend differs between two tables of the same size.
    pub fn changed(&self, other: &Maglev) -> usize {
        self.table
            .iter()
            .zip(&other.table)
            .filter(|(a, b)| a != b)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.1.0.{i}:80")).collect()
    }

    #[test]
    fn every_backend_gets_its_share_within_one_percent() {
        for n in [3usize, 7, 10, 50] {
            let m = next_prime(100 * n + 1);
            let t = Maglev::new(&names(n), &vec![true; n], m).unwrap();
            let ideal = m as f64 / n as f64;
            for (i, s) in t.shares(n).iter().enumerate() {
                let err = (*s as f64 - ideal).abs() / ideal;
                assert!(
                    err < 0.01,
                    "n {n} m {m}: backend {i} has {s} entries, ideal {ideal:.1}"
                );
            }
        }
    }

    #[test]
    fn removing_a_backend_reassigns_its_entries_and_few_others() {
        let n = 10;
        let m = next_prime(100 * n + 1);
        let all = Maglev::new(&names(n), &vec![true; n], m).unwrap();
        let mut healthy = vec![true; n];
        healthy[3] = false;
        let less = Maglev::new(&names(n), &healthy, m).unwrap();
        let mine = all.shares(n)[3];
        assert_eq!(less.shares(n)[3], 0, "a down backend gets nothing");
        // every entry of backend 3 changes; of the others', only a few (Maglev's
        // minimal disruption is approximate; the LB pins established flows anyway)
        let others_changed = all.changed(&less) - mine;
        assert!(
            others_changed * 100 < m * 5,
            "{others_changed} of {m} entries of live backends moved"
        );
        for (e, (a, b)) in all.table.iter().zip(&less.table).enumerate() {
            if *a == 3 {
                assert_ne!(*b, 3, "entry {e}");
            }
        }
    }

    #[test]
    fn bad_sizes_and_no_backends() {
        let e = Maglev::new(&names(2), &[true, true], 100).unwrap_err();
        assert!(e.contains("not prime") && e.contains("101"), "{e}");
        let t = Maglev::new(&names(2), &[false, false], 101).unwrap();
        assert_eq!(t.lookup(12345), None);
    }
}
