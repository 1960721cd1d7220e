//! A rule table as the NIC model's steering: the indirection table's bucket of a
//! packet is the index of the rule it matches, so a rule is a bucket, each rule
//! its own shard, and moving a shard rewrites a rule's queue — the RSS machinery
//! (shard moves, per-bucket counters, balancers) works on rules unchanged.
//!
//! Under live re-planning ([`RuleSteering::cells`]) every value of the rule key
//! is a rule of its own, a cell: cell `c` is bucket and shard `c`, and a plan of
//! a few ternary rules over the key is what the cells' cores spell out. A new
//! plan changes cells' cores, never a cell's keys, so re-planning is shard moves
//! and a flow's state moves with its cell.

use wire::FiveTuple;

use super::bits::KeyBits;
use super::cube::{low_bits, Cube};
use super::table::{Route, Rule, RuleTable};

/// Rules over a rule key, placed in an indirection table of `buckets` entries:
/// rule `r` is bucket `r`; packets no rule holds (or without the key's fields,
/// such as IPv6 when an address is matched) are spread over the buckets after
/// the rules by their RSS hash, as the NIC's default RSS rule would.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSteering {
    bits: KeyBits,
    table: RuleTable,
    buckets: u32,
    /// Rule `r` is the single key `r` (live re-planning): a key is its rule.
    cells: bool,
}

/// Widest rule key [`RuleSteering::cells`] takes: 2^9 cells, as many rules
/// as the XDP program matches.
pub const MAX_CELL_BITS: u32 = 9;

impl RuleSteering {
    /// Checks that the table is over `bits`, its rules disjoint, and that the
    /// rules leave at least one bucket of `buckets` (a power of two) to the
    /// default.
    pub fn new(bits: KeyBits, table: RuleTable, buckets: usize) -> Result<RuleSteering, String> {
        if table.bits != bits.width() {
            return Err(format!(
                "the rules are over {} bits but `{bits}` has {}",
                table.bits,
                bits.width()
            ));
        }
        if !buckets.is_power_of_two() || table.rules.len() >= buckets {
            return Err(format!(
                "{} rules need more indirection-table buckets than that ({buckets})",
                table.rules.len()
            ));
        }
        if let Some((a, b)) = table.overlapping() {
            return Err(format!("rules {a} and {b} overlap"));
        }
        Ok(RuleSteering {
            bits,
            table,
            buckets: buckets as u32,
            cells: false,
        })
    }

    /// Steering by every value of the `bits` key as a rule of its own (a
    /// cell), for rules re-planned while traffic flows: 2^width cells, cell
    /// `c` bucket `c`, and `buckets` above them for frames without the key's
    /// fields. The cells' cores here are 0; the run starts them where its
    /// balancer's plan puts them.
    pub fn cells(bits: KeyBits, buckets: usize) -> Result<RuleSteering, String> {
        let w = bits.width();
        if w > MAX_CELL_BITS {
            return Err(format!(
                "`{bits}` has {w} bits: live rules take at most {MAX_CELL_BITS} \
                 (2^{MAX_CELL_BITS} cells, each a shard)"
            ));
        }
        let n = 1u64 << w;
        let table = RuleTable {
            bits: w,
            cores: 1,
            rules: (0..n)
                .map(|c| Rule {
                    cube: Cube::new(c, low_bits(w)),
                    core: 0,
                })
                .collect(),
            default_rule: false,
        };
        let mut s = RuleSteering::new(bits, table, buckets)?;
        s.cells = true;
        Ok(s)
    }

    /// Whether every key is a rule of its own ([`cells`](Self::cells)).
    pub fn is_cells(&self) -> bool {
        self.cells
    }

    /// The rule key.
    pub fn bits(&self) -> &KeyBits {
        &self.bits
    }

    /// The rules.
    pub fn table(&self) -> &RuleTable {
        &self.table
    }

    /// `rss` with its bucket bits replaced by the bucket `t` steers to.
    #[inline]
    pub fn steer(&self, t: &FiveTuple, rss: u32) -> u32 {
        let k = self.table.rules.len() as u32;
        let bucket = match self.bits.key(t) {
            Some(key) if self.cells => key as u32,
            Some(key) => match self.table.route(key) {
                Route::Rule { rule, .. } => rule as u32,
                Route::Default => k + rss % (self.buckets - k),
            },
            None => k + rss % (self.buckets - k),
        };
        (rss & !(self.buckets - 1)) | bucket
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::IpAddr;

    fn tuple(src: [u8; 4]) -> FiveTuple {
        FiveTuple {
            src: IpAddr::from(src),
            dst: IpAddr::from([10, 0, 0, 1]),
            src_port: 1,
            dst_port: 2,
            proto: 17,
        }
    }

    #[test]
    fn a_rule_is_a_bucket_and_the_rest_goes_by_rss() {
        let bits = KeyBits::parse("src-ip:30-31").unwrap();
        let table = RuleTable {
            bits: 2,
            cores: 2,
            rules: vec![
                Rule {
                    cube: Cube::new(0b00, 0b11),
                    core: 1,
                },
                Rule {
                    cube: Cube::new(0b10, 0b10),
                    core: 0,
                },
            ],
            default_rule: true,
        };
        let s = RuleSteering::new(bits, table, 64).unwrap();
        assert_eq!(s.steer(&tuple([1, 2, 3, 4]), 0xabcd_ef00) & 63, 0);
        assert_eq!(
            s.steer(&tuple([1, 2, 3, 4]), 0xabcd_ef00) & !63,
            0xabcd_ef00
        );
        assert_eq!(s.steer(&tuple([1, 2, 3, 6]), 7) & 63, 1);
        assert_eq!(s.steer(&tuple([1, 2, 3, 7]), 7) & 63, 1);
        // 01 matches no rule: bucket 2 + 7 % 62
        assert_eq!(s.steer(&tuple([1, 2, 3, 5]), 7) & 63, 9);
        let v6 = FiveTuple {
            src: "fd00::1".parse().unwrap(),
            ..tuple([0; 4])
        };
        assert_eq!(s.steer(&v6, 100) & 63, 2 + 100 % 62);
    }

    #[test]
    fn a_cell_is_its_key_and_steers_as_its_rule_would() {
        let bits = KeyBits::parse("src-ip:29-31").unwrap();
        let cells = RuleSteering::cells(bits.clone(), 16).unwrap();
        assert!(cells.is_cells());
        assert_eq!(cells.table().rules.len(), 8);
        // the fast path agrees with matching the singleton rules one by one
        let mut general = cells.clone();
        general.cells = false;
        for last in 0..=255u8 {
            let t = tuple([10, 0, 0, last]);
            let rss = u32::from(last).wrapping_mul(0x9e37_79b9);
            assert_eq!(cells.steer(&t, rss), general.steer(&t, rss));
            assert_eq!(cells.steer(&t, rss) & 15, u32::from(last & 7));
        }
        // no key: the buckets after the cells
        let v6 = FiveTuple {
            src: "fd00::1".parse().unwrap(),
            ..tuple([0; 4])
        };
        assert_eq!(cells.steer(&v6, 13) & 15, 8 + 13 % 8);
        let e = RuleSteering::cells(KeyBits::parse("src-ip:0-9").unwrap(), 4096).unwrap_err();
        assert!(e.contains("at most 9"), "{e}");
        let e = RuleSteering::cells(bits, 8).unwrap_err();
        assert!(e.contains("8 rules need more"), "{e}");
    }

    #[test]
    fn tables_that_do_not_fit_are_refused() {
        let bits = KeyBits::parse("src-ip:30-31").unwrap();
        let rule = |v| Rule {
            cube: Cube::new(v, 0b10),
            core: 0,
        };
        let t = |rules| RuleTable {
            bits: 2,
            cores: 1,
            rules,
            default_rule: false,
        };
        let e = RuleSteering::new(bits.clone(), t(vec![rule(0), rule(0)]), 64).unwrap_err();
        assert!(e.contains("overlap"), "{e}");
        let wide = KeyBits::parse("src-ip:29-31").unwrap();
        let e = RuleSteering::new(wide, t(vec![rule(0)]), 64).unwrap_err();
        assert!(e.contains("over 2 bits"), "{e}");
        let many = RuleTable {
            rules: (0..64).map(|_| rule(0)).collect(),
            ..t(vec![])
        };
        let e = RuleSteering::new(bits, many, 64).unwrap_err();
        assert!(e.contains("64 rules need more"), "{e}");
    }
}
