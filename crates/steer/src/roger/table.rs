//! The steering rules a plan installs: ternary rules (value/mask over the rule
//! key) naming a core, matched like a NIC's flow rules (`rte_flow`), with the
//! NIC's RSS as the lowest-priority default for keys no rule holds.

use super::cube::Cube;

/// One ternary rule.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The keys it matches.
    pub cube: Cube,
    /// The core (queue) it sends them to.
    pub core: u16,
}

/// Where a key goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Rule `rule` matched and names `core`.
    Rule {
        /// Index of the rule.
        rule: usize,
        /// Its core.
        core: u16,
    },
    /// No rule matched: the NIC's default (RSS over the cores).
    Default,
}

/// Disjoint rules over a `bits`-bit key, and the default for the rest. The
/// default is one rule of the NIC's budget too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleTable {
    /// Width of the key, in bits.
    pub bits: u32,
    /// Number of cores the rules spread over.
    pub cores: u16,
    /// The rules; no key matches two.
    pub rules: Vec<Rule>,
    /// Whether keys no rule holds exist and take the NIC's default (RSS), which
    /// costs a rule; false when the rules tile the key space.
    pub default_rule: bool,
}

impl RuleTable {
    /// Where `key` goes. Rules are disjoint, so the first match is the only one.
    pub fn route(&self, key: u64) -> Route {
        match self.rules.iter().position(|r| r.cube.contains(key)) {
            Some(rule) => Route::Rule {
                rule,
                core: self.rules[rule].core,
            },
            None => Route::Default,
        }
    }

    /// The core of `key`, with `default` deciding keys no rule holds (e.g. the
    /// RSS indirection table's queue for the packet's hash).
    pub fn core_of(&self, key: u64, default: impl FnOnce() -> u16) -> u16 {
        match self.route(key) {
            Route::Rule { core, .. } => core,
            Route::Default => default(),
        }
    }

    /// Rules a NIC needs for this table: the ternary rules and the default.
    pub fn nic_rules(&self) -> usize {
        self.rules.len() + usize::from(self.default_rule)
    }

    /// Whether some key matches two rules (never, for a table a plan made).
    pub fn overlapping(&self) -> Option<(usize, usize)> {
        for (i, a) in self.rules.iter().enumerate() {
            for (j, b) in self.rules.iter().enumerate().skip(i + 1) {
                if a.cube.intersects(&b.cube) {
                    return Some((i, j));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_takes_its_rule_or_the_default() {
        let t = RuleTable {
            bits: 4,
            cores: 2,
            rules: vec![
                Rule {
                    cube: Cube::new(0b0000, 0b1000),
                    core: 1,
                },
                Rule {
                    cube: Cube::new(0b1100, 0b1100),
                    core: 0,
                },
            ],
            default_rule: true,
        };
        assert_eq!(t.route(0b0110), Route::Rule { rule: 0, core: 1 });
        assert_eq!(t.route(0b1101), Route::Rule { rule: 1, core: 0 });
        assert_eq!(t.route(0b1001), Route::Default);
        assert_eq!(t.core_of(0b1001, || 7), 7);
        assert_eq!(t.nic_rules(), 3);
        assert_eq!(t.overlapping(), None);
    }
}
