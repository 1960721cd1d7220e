//! What an fNIC asks for and what a node offers: a vector over four resources.

use serde::{Deserialize, Serialize};

/// The resources, in vector order.
pub const DIMS: [&str; 4] = ["cps", "pps", "flows", "gbps"];

/// An amount of each resource: new connections per second, packets per
/// second, concurrent flows, Gbit/s.
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Demand {
    /// New connections per second.
    pub cps: f64,
    /// Packets per second.
    pub pps: f64,
    /// Concurrent flows.
    pub flows: f64,
    /// Throughput, Gbit/s.
    pub gbps: f64,
}

impl Demand {
    /// The four amounts, in [`DIMS`] order.
    pub fn vec(&self) -> [f64; 4] {
        [self.cps, self.pps, self.flows, self.gbps]
    }

    /// From four amounts in [`DIMS`] order.
    pub fn from_vec(v: [f64; 4]) -> Demand {
        Demand {
            cps: v[0],
            pps: v[1],
            flows: v[2],
            gbps: v[3],
        }
    }

    /// Each amount over `cap`'s (0 where `cap` offers none and none is asked).
    pub fn share_of(&self, cap: &Demand) -> [f64; 4] {
        let (d, c) = (self.vec(), cap.vec());
        std::array::from_fn(|i| {
            if c[i] > 0.0 {
                d[i] / c[i]
            } else if d[i] > 0.0 {
                f64::INFINITY
            } else {
                0.0
            }
        })
    }

    /// Every amount divided by `k`.
    pub fn split(&self, k: usize) -> Demand {
        let v = self.vec();
        Demand::from_vec(std::array::from_fn(|i| v[i] / k as f64))
    }

    /// Whether every amount is finite and ≥ 0.
    pub fn valid(&self) -> bool {
        self.vec().iter().all(|x| x.is_finite() && *x >= 0.0)
    }
}

/// The fNIC sizes Sirius offers, and its card (Table 7). Packets per second
/// are not in the table; they are taken as the throughput in 1 000-byte
/// packets, so they bind exactly where bandwidth does.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FnicSize {
    /// 0.05 M new flows/s, 1 M flows, 5 Gbit/s.
    FniXxs,
    /// 0.1 M/s, 1 M, 10 Gbit/s.
    FniXs,
    /// 0.25 M/s, 2 M, 12.5 Gbit/s.
    FniS,
    /// 1 M/s, 2 M, 12.5 Gbit/s.
    FniM,
    /// 2 M/s, 4 M, 12.5 Gbit/s.
    FniL,
    /// 3 M/s, 16 M, 50 Gbit/s.
    FniXl,
}

impl FnicSize {
    /// Every size, smallest first.
    pub const ALL: [FnicSize; 6] = [
        FnicSize::FniXxs,
        FnicSize::FniXs,
        FnicSize::FniS,
        FnicSize::FniM,
        FnicSize::FniL,
        FnicSize::FniXl,
    ];

    /// Its name in Table 7.
    pub const fn name(self) -> &'static str {
        match self {
            FnicSize::FniXxs => "FNI_XXS",
            FnicSize::FniXs => "FNI_XS",
            FnicSize::FniS => "FNI_S",
            FnicSize::FniM => "FNI_M",
            FnicSize::FniL => "FNI_L",
            FnicSize::FniXl => "FNI_XL",
        }
    }

    /// What it asks for.
    pub fn demand(self) -> Demand {
        let (cps, flows, gbps) = match self {
            FnicSize::FniXxs => (0.05e6, 1e6, 5.0),
            FnicSize::FniXs => (0.10e6, 1e6, 10.0),
            FnicSize::FniS => (0.25e6, 2e6, 12.5),
            FnicSize::FniM => (1.0e6, 2e6, 12.5),
            FnicSize::FniL => (2.0e6, 4e6, 12.5),
            FnicSize::FniXl => (3.0e6, 16e6, 50.0),
        };
        Demand {
            cps,
            pps: gbps * 1e9 / 8000.0,
            flows,
            gbps,
        }
    }

    /// A Sirius card: 3 M new flows/s, 16 M flows, 200 Gbit/s.
    pub fn card() -> Demand {
        Demand {
            cps: 3.0e6,
            pps: 200.0 * 1e9 / 8000.0,
            flows: 16e6,
            gbps: 200.0,
        }
    }
}

/// How often each size arrives.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mix {
    /// Every size equally likely (Fig. 14b).
    Equal,
    /// Small fNICs dominate, each size half as likely as the one below it (the
    /// paper's production distribution is not published; this is ours).
    Small,
}

impl Mix {
    /// The probability of each size of [`FnicSize::ALL`].
    pub fn weights(self) -> [f64; 6] {
        match self {
            Mix::Equal => [1.0; 6],
            Mix::Small => [32.0, 16.0, 8.0, 4.0, 2.0, 1.0],
        }
    }

    /// `n` sizes drawn with seed `seed`.
    pub fn draw(self, n: usize, seed: u64) -> Vec<FnicSize> {
        use rand::distributions::{Distribution, WeightedIndex};
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let d = WeightedIndex::new(self.weights()).expect("positive weights");
        (0..n).map(|_| FnicSize::ALL[d.sample(&mut rng)]).collect()
    }
}
