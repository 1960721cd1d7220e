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

/// A worker's running totals, as the runtime gives them to the chain every
/// timer period ([`crate::Nf::core_load`]): what a director weighs the
/// workers' load by.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CoreLoad {
    /// Time spent on packets (ns).
    pub busy_ns: u64,
    /// Time waiting for them (ns).
    pub idle_ns: u64,
    /// Packets taken.
    pub packets: u64,
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
    /// Workers that hand jobs over (at least 1).
    pub workers: f64,
}

impl Offload {
    /// Time per packet inline and with the component on its core.
    pub fn per_packet(&self) -> (f64, f64) {
        (self.per_packet_on(0), self.per_packet_on(1))
    }

    /// Time per packet with the component on `k` cores (0: inline).
    pub fn per_packet_on(&self, k: usize) -> f64 {
        if k == 0 {
            return self.rest_ns + self.share * self.inline_ns;
        }
        let comp = self.workers.max(1.0) * self.share * self.core_ns / k as f64;
        (self.rest_ns + self.share * self.handover_ns).max(comp)
    }

    /// True if on `k` cores the component sets the pace.
    fn component_bound(&self, k: usize) -> bool {
        self.workers.max(1.0) * self.share * self.core_ns / k.max(1) as f64
            > self.rest_ns + self.share * self.handover_ns
    }
}

/// A change of placement and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// When (the time the director was given).
    pub at_ns: u64,
    /// The new placement.
    pub to: Placement,
    /// Component cores from now on (0: inline).
    pub cores: usize,
    /// The measurements behind it, in words.
    pub reason: String,
}

/// The director of one component.
#[derive(Clone, Debug)]
pub struct Director {
    cfg: DirectorConfig,
    /// Component cores now (0: inline).
    cores: usize,
    /// The placement wanted over the last periods, and for how many.
    want: usize,
    streak: u32,
}

impl Director {
    /// A director of a component now at `current`.
    pub fn new(cfg: DirectorConfig, current: Placement) -> Director {
        let cores = usize::from(current == Placement::Core);
        Director {
            cfg,
            cores,
            want: cores,
            streak: 0,
        }
    }

    /// Where the component runs now.
    pub fn current(&self) -> Placement {
        Placement::of_cores(self.cores)
    }

    /// Component cores now (0: inline).
    pub fn cores(&self) -> usize {
        self.cores
    }

    /// The better placement for a period's measurements, and why.
    pub fn better(&self, p: &Period) -> (Placement, String) {
        let (k, why) = self.better_on(p, 1);
        (Placement::of_cores(k), why)
    }

    /// [`better`](Self::better) for a component that can run on up to `max`
    /// cores: the fewest that keep up (each under `max_core` busy), 0 for
    /// inline.
    pub fn better_on(&self, p: &Period, max: usize) -> (usize, String) {
        if p.jobs == 0 || p.len_ns == 0 {
            return (0, "no jobs: no core is needed".into());
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
        let k = (core / self.cfg.max_core).ceil().max(1.0) as usize;
        if k > max.max(1) {
            let on = if max > 1 {
                format!("{max} cores")
            } else {
                "a core".into()
            };
            (0, format!("{facts}: {on} would fall behind"))
        } else if saved > self.cfg.min_share {
            let on = if k > 1 {
                format!("{k} cores save")
            } else {
                "a core saves".into()
            };
            (
                k,
                format!("{facts}: {on} the workers {:.1} %", 100.0 * saved),
            )
        } else {
            (
                0,
                format!(
                    "{facts}: a core would save under {:.1} %",
                    100.0 * self.cfg.min_share
                ),
            )
        }
    }

    /// The faster placement for a worker that runs flat out, and why.
    pub fn saturated(&self, o: &Offload) -> (Placement, String) {
        let (k, why) = self.saturated_on(o, 1);
        (Placement::of_cores(k), why)
    }

    /// [`saturated`](Self::saturated) for a component that can run on up to
    /// `max` cores: the fewest within `min_gain` of the fastest (0: inline).
    pub fn saturated_on(&self, o: &Offload, max: usize) -> (usize, String) {
        let inline = o.per_packet_on(0);
        let margin = 1.0 + self.cfg.min_gain;
        // each core added must gain `min_gain` over one fewer
        let mut k = 0;
        for j in 1..=max.max(1) {
            if o.per_packet_on(k) / o.per_packet_on(j).max(1e-9) > margin {
                k = j;
            } else if k > 0 {
                break;
            }
        }
        let shown = k.max(1);
        let core = o.per_packet_on(shown);
        let gain = inline / core.max(1e-9);
        let on = if shown > 1 {
            format!("on {shown} cores")
        } else {
            "on a core".into()
        };
        let facts = format!(
            "{inline:.0} ns a packet inline, {core:.0} {on} ({} bound): ×{gain:.3}",
            if o.component_bound(shown) {
                "the component"
            } else {
                "the worker"
            }
        );
        if k > 0 {
            (k, facts)
        } else {
            (0, format!("{facts}, under ×{margin:.2}"))
        }
    }

    /// Takes a period's measurements at `now_ns`; a change when the other
    /// placement has been better for `hold` periods in a row.
    pub fn observe(&mut self, now_ns: u64, p: &Period) -> Option<Decision> {
        let (want, reason) = self.better_on(p, 1);
        self.decide(now_ns, want, reason)
    }

    /// A change to `want` component cores now, without waiting (the current
    /// placement is failing: its component lost jobs); none when it is the
    /// current one.
    pub fn decide_now(&mut self, now_ns: u64, want: usize, reason: String) -> Option<Decision> {
        self.streak = 0;
        self.want = want;
        (want != self.cores).then(|| self.change(now_ns, want, reason))
    }

    /// Moves to `want` cores now.
    fn change(&mut self, now_ns: u64, want: usize, reason: String) -> Decision {
        self.streak = 0;
        self.cores = want;
        Decision {
            at_ns: now_ns,
            to: self.current(),
            cores: want,
            reason,
        }
    }

    /// Takes a placement wanted now (`want` component cores, 0: inline, from
    /// [`better_on`](Self::better_on) or [`saturated_on`](Self::saturated_on))
    /// at `now_ns`; a change when the same one has been wanted for `hold`
    /// periods in a row.
    pub fn decide(&mut self, now_ns: u64, want: usize, reason: String) -> Option<Decision> {
        if want == self.cores {
            self.streak = 0;
            return None;
        }
        if want != self.want {
            self.want = want;
            self.streak = 0;
        }
        self.streak += 1;
        if self.streak < self.cfg.hold.max(1) {
            return None;
        }
        Some(self.change(now_ns, want, reason))
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
            workers: 1.0,
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

    #[test]
    fn a_component_on_several_cores_takes_the_fewest_that_keep_up_or_pay() {
        let d = Director::new(DirectorConfig::default(), Placement::Inline);
        // 200 000 jobs a second of 5 µs: a whole core's work
        let p = period(200_000, 5_000);
        let (k, why) = d.better_on(&p, 4);
        assert_eq!(k, 2, "{why}");
        assert!(why.contains("2 cores save"), "{why}");
        let (k, why) = d.better_on(&p, 1);
        assert_eq!(k, 0);
        assert!(why.contains("a core would fall behind"), "{why}");
        assert_eq!(d.better_on(&period(100, 500_000), 4).0, 1);
        // a saturated worker scanning every packet: each core added halves
        // the component's pace until the worker's own work sets it
        let o = |rest_ns: f64, c: f64, workers: f64| Offload {
            rest_ns,
            share: 1.0,
            inline_ns: c,
            core_ns: c * 1.05,
            handover_ns: 300.0,
            workers,
        };
        let heavy = o(300.0, 2_000.0, 1.0);
        assert_eq!(heavy.per_packet_on(0), 2_300.0);
        assert_eq!(heavy.per_packet_on(2), 1_050.0);
        assert_eq!(heavy.per_packet_on(4), 600.0, "the worker's pace");
        let (k, why) = d.saturated_on(&heavy, 8);
        // 3 → 4 cores gains 700 / 600 = ×1.17, 4 → 5 nothing
        assert_eq!(k, 4, "{why}");
        assert!(why.contains("on 4 cores (the worker bound)"), "{why}");
        assert_eq!(d.saturated_on(&heavy, 2).0, 2);
        // two workers feed the cores twice the jobs
        assert_eq!(d.saturated_on(&o(300.0, 2_000.0, 2.0), 8).0, 7);
        // cheap scans stay inline however many cores there are
        let (k, why) = d.saturated_on(&o(300.0, 100.0, 1.0), 8);
        assert_eq!(k, 0);
        assert!(why.contains("under ×1.03"), "{why}");
    }

    #[test]
    fn a_change_of_core_count_waits_for_the_same_count_hold_times() {
        let mut d = Director::new(DirectorConfig::default(), Placement::Inline);
        let r = || String::from("r");
        assert_eq!(d.decide(1, 2, r()), None);
        assert_eq!(d.decide(2, 2, r()), None);
        assert_eq!(d.decide(3, 1, r()), None, "another count starts again");
        assert_eq!(d.decide(4, 1, r()), None);
        let c = d.decide(5, 1, r()).expect("three in a row");
        assert_eq!((c.to, c.cores), (Placement::Core, 1));
        assert_eq!(d.decide(6, 1, r()), None, "already there");
        for t in 7..9 {
            assert_eq!(d.decide(t, 3, r()), None);
        }
        assert_eq!(d.decide(9, 3, r()).map(|c| c.cores), Some(3));
        assert_eq!(d.cores(), 3);
    }
}
