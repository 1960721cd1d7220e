//! The director (GranularNF §4, Fig. 6): decides where a component runs —
//! inline on the workers or on a core of its own — from what its jobs cost
//! in the last period, and changes its mind only when the other side has
//! been better for a while. Pure: it takes the period's measurements and
//! the time as arguments and touches no threads or clocks; the NF whose
//! component it places applies its decisions (the load balancer's control
//! component, `placement = "auto"`).
//!
//! The model, per period, with `f` jobs a second each taking `c` ns
//! wherever they ran and `h` ns for a worker to hand one over:
//! - inline, the workers spend `f · c` of their time on the jobs (a worker
//!   applying one stalls for all of it);
//! - on a core, the workers spend `f · h`, and the component's core is busy
//!   `f · c` of its time — beyond `max_core` it falls behind.
//!
//! A core pays when what it saves the workers, `f · (c − h)`, is more than
//! `min_share` of a worker and the component's core keeps up: expensive jobs
//! at moderate rates go to a core, cheap or very frequent ones stay inline
//! (GranularNF Fig. 11c: "when the frequency is lower and the cost of
//! offloading action is higher, placement on different cores tends to
//! perform better").
//!
//! A worker that runs flat out ([`Director::saturated`]: an IDS scanning a
//! share of its packets) is weighed by its time per packet instead: `r` its
//! own work, `s` jobs per packet, `c` a job inline and `c'` on the
//! component's core (where the payload arrives from another core's cache):
//! inline `r + s·c`, on a core `max(r + s·h, s·c')` — the worker and the
//! component in parallel, the slower one setting the pace. A core must gain
//! `min_gain` to be worth one.

use crate::component::Placement;

/// The director's settings.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct DirectorConfig {
    /// A worker's cost of handing a job over (ns).
    pub handover_ns: f64,
    /// A core pays when it saves the workers more than this share of a
    /// worker's time.
    pub min_share: f64,
    /// A component's core busier than this share falls behind.
    pub max_core: f64,
    /// Periods in a row the other placement must be better before a change.
    pub hold: u32,
    /// A saturated worker's throughput must grow by this share for a core to
    /// be worth giving a component.
    pub min_gain: f64,
}

impl Default for DirectorConfig {
    fn default() -> Self {
        DirectorConfig {
            handover_ns: 1_000.0,
            min_share: 0.01,
            max_core: 0.9,
            hold: 3,
            min_gain: 0.03,
        }
    }
}

/// What a component's jobs cost in one period.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Period {
    /// The period's length (ns).
    pub len_ns: u64,
    /// Jobs done in it, wherever they ran.
    pub jobs: u64,
    /// Their time, wherever they ran (ns).
    pub job_ns: u64,
}

/// A saturated worker's costs per packet (ns), for [`Director::saturated`].
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Offload {
    /// The worker's own work per packet, without the jobs.
    pub rest_ns: f64,
    /// Jobs per packet.
    pub share: f64,
    /// A job's time inline.
    pub inline_ns: f64,
    /// A job's time on the component's core.
    pub core_ns: f64,
    /// The worker's time to hand a job over.
    pub handover_ns: f64,
}

impl Offload {
    /// Time per packet inline and with the component on its core.
    pub fn per_packet(&self) -> (f64, f64) {
        let inline = self.rest_ns + self.share * self.inline_ns;
        let core = (self.rest_ns + self.share * self.handover_ns).max(self.share * self.core_ns);
        (inline, core)
    }
}

/// A change of placement and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// When (the time the director was given).
    pub at_ns: u64,
    /// The new placement.
    pub to: Placement,
    /// The measurements behind it, in words.
    pub reason: String,
}

/// The director of one component.
#[derive(Clone, Debug)]
pub struct Director {
    cfg: DirectorConfig,
    current: Placement,
    streak: u32,
}

impl Director {
    /// A director of a component now at `current`.
    pub fn new(cfg: DirectorConfig, current: Placement) -> Director {
        Director {
            cfg,
            current,
            streak: 0,
        }
    }

    /// Where the component runs now.
    pub fn current(&self) -> Placement {
        self.current
    }

    /// The better placement for a period's measurements, and why.
    pub fn better(&self, p: &Period) -> (Placement, String) {
        if p.jobs == 0 || p.len_ns == 0 {
            return (Placement::Inline, "no jobs: no core is needed".into());
        }
        let secs = p.len_ns as f64 / 1e9;
        let f = p.jobs as f64 / secs;
        let c = p.job_ns as f64 / p.jobs as f64;
        let saved = f * (c - self.cfg.handover_ns) / 1e9;
        let core = f * c / 1e9;
        let facts = format!(
            "{f:.0} jobs/s × {:.1} µs: {:.1} % of a worker inline, a core {:.1} % busy",
            c / 1e3,
            100.0 * f * c / 1e9,
            100.0 * core
        );
        if core > self.cfg.max_core {
            (
                Placement::Inline,
                format!("{facts}: a core would fall behind"),
            )
        } else if saved > self.cfg.min_share {
            (
                Placement::Core,
                format!("{facts}: a core saves the workers {:.1} %", 100.0 * saved),
            )
        } else {
            (
                Placement::Inline,
                format!(
                    "{facts}: a core would save under {:.1} %",
                    100.0 * self.cfg.min_share
                ),
            )
        }
    }

    /// The faster placement for a worker that runs flat out, and why.
    pub fn saturated(&self, o: &Offload) -> (Placement, String) {
        let (inline, core) = o.per_packet();
        let gain = inline / core.max(1e-9);
        let facts = format!(
            "{:.0} ns a packet inline, {:.0} on a core ({} bound): ×{gain:.3}",
            inline,
            core,
            if o.share * o.core_ns > o.rest_ns + o.share * o.handover_ns {
                "the component"
            } else {
                "the worker"
            }
        );
        if gain > 1.0 + self.cfg.min_gain {
            (Placement::Core, facts)
        } else {
            (
                Placement::Inline,
                format!("{facts}, under ×{:.2}", 1.0 + self.cfg.min_gain),
            )
        }
    }

    /// Takes a period's measurements at `now_ns`; a change when the other
    /// placement has been better for `hold` periods in a row.
    pub fn observe(&mut self, now_ns: u64, p: &Period) -> Option<Decision> {
        let (want, reason) = self.better(p);
        if want == self.current {
            self.streak = 0;
            return None;
        }
        self.streak += 1;
        if self.streak < self.cfg.hold.max(1) {
            return None;
        }
        self.streak = 0;
        self.current = want;
        Some(Decision {
            at_ns: now_ns,
            to: want,
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn period(jobs_per_s: u64, cost_ns: u64) -> Period {
        // a 100 ms period
        let jobs = jobs_per_s / 10;
        Period {
            len_ns: 100_000_000,
            jobs,
            job_ns: jobs * cost_ns,
        }
    }

    #[test]
    fn expensive_jobs_at_moderate_rates_go_to_a_core_cheap_or_floods_stay_inline() {
        let d = Director::new(DirectorConfig::default(), Placement::Inline);
        // 100 rebuilds a second of 500 µs: 5 % of a worker
        assert_eq!(d.better(&period(100, 500_000)).0, Placement::Core);
        // 100 a second of 2 µs: 0.02 %
        assert_eq!(d.better(&period(100, 2_000)).0, Placement::Inline);
        // cheaper than the hand-over itself, however many
        assert_eq!(d.better(&period(1_000_000, 800)).0, Placement::Inline);
        // 5 000 a second of 500 µs: 2.5 cores — one core would fall behind
        let (p, why) = d.better(&period(5_000, 500_000));
        assert_eq!(p, Placement::Inline);
        assert!(why.contains("fall behind"), "{why}");
        assert_eq!(d.better(&Period::default()).0, Placement::Inline);
    }

    #[test]
    fn a_saturated_worker_offloads_what_the_component_does_faster_in_parallel() {
        let d = Director::new(DirectorConfig::default(), Placement::Inline);
        let o = |share: f64, c: f64, c2: f64, h: f64| Offload {
            rest_ns: 60.0,
            share,
            inline_ns: c,
            core_ns: c2,
            handover_ns: h,
        };
        // rare expensive scans: the worker's own work runs beside them
        assert_eq!(
            d.saturated(&o(0.05, 9_000.0, 9_500.0, 900.0)).0,
            Placement::Core
        );
        // a hand-over costs more than the scan it saves
        assert_eq!(
            d.saturated(&o(0.05, 140.0, 150.0, 1_100.0)).0,
            Placement::Inline
        );
        // every packet scanned, slower on the other core than inline
        let (p, why) = d.saturated(&o(1.0, 3_400.0, 3_900.0, 400.0));
        assert_eq!(p, Placement::Inline);
        assert!(why.contains("the component bound"), "{why}");
    }

    #[test]
    fn a_change_waits_for_hold_periods_in_a_row() {
        let mut d = Director::new(DirectorConfig::default(), Placement::Inline);
        let busy = period(100, 500_000);
        let quiet = Period {
            len_ns: 100_000_000,
            ..Period::default()
        };
        assert_eq!(d.observe(1, &busy), None);
        assert_eq!(d.observe(2, &quiet), None, "the streak starts again");
        assert_eq!(d.observe(3, &busy), None);
        assert_eq!(d.observe(4, &busy), None);
        let c = d.observe(5, &busy).expect("third busy period in a row");
        assert_eq!((c.at_ns, c.to), (5, Placement::Core));
        assert!(c.reason.contains("saves the workers"), "{}", c.reason);
        assert_eq!(d.current(), Placement::Core);
        for t in 6..8 {
            assert_eq!(d.observe(t, &quiet), None);
        }
        assert_eq!(d.observe(8, &quiet).map(|c| c.to), Some(Placement::Inline));
    }
}
