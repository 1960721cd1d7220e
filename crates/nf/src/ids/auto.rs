//! `placement = "auto"` for the IDS: the director ([`crate::director`])
//! places the pattern matching inline or on 1…`cores` matching components
//! while traffic flows, from what the runtime and the IDS measure.
//!
//! - Each worker's IDS instance counts its scans and hand-overs and times a
//!   sample of them ([`Meter`], one in [`SAMPLE`]); every timer period the
//!   runtime gives it the worker's running busy and idle time and packets
//!   ([`CoreLoad`](crate::director::CoreLoad)), and it adds the period's
//!   deltas to [`Sums`], which every instance shares.
//! - Every [`PERIOD_NS`] one worker (whoever takes the lock; none waits)
//!   takes the sums and [`Auto::look`]s: with the workers busy at least
//!   [`SATURATED`] of their time on average, or one of them that busy for
//!   most of the period (RSS gave it more than its share), it weighs time
//!   per packet ([`Director::saturated_on`]); otherwise the work a core
//!   would take off them ([`Director::better_on`]).
//! - Costs not measured in the period (a scan inline while the matching is
//!   on a core, a hand-over while it is inline) are the last measured, or
//!   estimated from the other side's until then.
//! - The workers never wait for a component, so components that fall behind
//!   lose payloads (`offload_lost`). With the workers flat out the director
//!   takes only as many cores as keep up with the workers' pace on a core
//!   (each under `max_core` busy), else inline; and any placement falls
//!   behind when the components' cores are shared with other work. When
//!   more than one payload in 1 000 of a period is
//!   lost the director brings the matching back inline at once, keeps it
//!   there 1 s, 2 s, 4 s … (at most [`MAX_BACKOFF_NS`]) after each such
//!   retreat, and from then on asks for enough cores that each takes under
//!   80 % of the rate per core at which they fell behind (inline when more
//!   than `cores`).
//!
//! [`Auto::look`] is pure: the period's sums, the components' totals and the
//! time in, a decision out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::component::Placement;
use crate::director::{CoreLoad, Decision, Director, DirectorConfig, Offload, Period};

/// The director looks this often (the runtime's time).
pub const PERIOD_NS: u64 = 100_000_000;
/// Workers busy this share of their time run flat out.
pub const SATURATED: f64 = 0.9;
/// One scan or hand-over in this many is timed.
pub const SAMPLE: u64 = 16;
/// A scan on a component's core against one inline, until both are measured
/// (the payload arrives from another core's cache).
const CORE_OVER_INLINE: f64 = 1.1;

/// One worker's counts since it last added them to [`Sums`].
#[derive(Clone, Debug, Default)]
pub struct Meter {
    scans: u64,
    scan_samples: u64,
    scan_sample_ns: u64,
    hands: u64,
    hand_samples: u64,
    hand_sample_ns: u64,
    /// Payloads the components' rings had no room for.
    lost: u64,
    /// The worker's load when it last added.
    last: Option<CoreLoad>,
}

impl Meter {
    /// Before a scan inline: the time to start it at, for a sampled one.
    #[inline]
    pub fn scan_start(&mut self) -> Option<Instant> {
        self.scans += 1;
        self.scans.is_multiple_of(SAMPLE).then(Instant::now)
    }

    /// After a scan inline, with what [`scan_start`](Self::scan_start) gave.
    #[inline]
    pub fn scan_end(&mut self, t0: Option<Instant>) {
        if let Some(t0) = t0 {
            self.scan_samples += 1;
            self.scan_sample_ns += t0.elapsed().as_nanos() as u64;
        }
    }

    /// Before a hand-over of a payload.
    #[inline]
    pub fn hand_start(&mut self) -> Option<Instant> {
        self.hands += 1;
        self.hands.is_multiple_of(SAMPLE).then(Instant::now)
    }

    /// After it.
    #[inline]
    pub fn hand_end(&mut self, t0: Option<Instant>) {
        if let Some(t0) = t0 {
            self.hand_samples += 1;
            self.hand_sample_ns += t0.elapsed().as_nanos() as u64;
        }
    }

    /// A payload the component's ring had no room for.
    #[inline]
    pub fn lost(&mut self) {
        self.lost += 1;
    }

    /// Adds what was counted since the last call, and the worker's load
    /// since then, to `sums`; starts counting again.
    pub fn add_to(&mut self, sums: &Sums, load: CoreLoad) {
        let Some(last) = self.last.replace(load) else {
            // the first look: counting starts here
            *self = Meter {
                last: Some(load),
                ..Meter::default()
            };
            return;
        };
        let busy = load.busy_ns.saturating_sub(last.busy_ns);
        let idle = load.idle_ns.saturating_sub(last.idle_ns);
        // this worker's own load since it last added: flat out or not
        let flat = if busy as f64 >= SATURATED * (busy + idle) as f64 {
            busy + idle
        } else {
            0
        };
        let deltas = [
            busy,
            idle,
            load.packets.saturating_sub(last.packets),
            self.scans,
            self.scan_samples,
            self.scan_sample_ns,
            self.hands,
            self.hand_samples,
            self.hand_sample_ns,
            self.lost,
            flat,
        ];
        for (a, d) in sums.0.iter().zip(deltas) {
            // Relaxed: statistics; the director takes them under its lock
            // and a delta landing in the next period is fine.
            a.fetch_add(d, Ordering::Relaxed);
        }
        *self = Meter {
            last: Some(load),
            ..Meter::default()
        };
    }
}

/// Every worker's counts since the director last looked: busy, idle,
/// packets, scans, scan samples and their ns, hand-overs, their samples and
/// ns, payloads lost, time flat out.
#[derive(Debug, Default)]
pub struct Sums([AtomicU64; 11]);

/// What [`Sums`] held when the director took them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// The workers' busy time (ns).
    pub busy_ns: u64,
    /// Their idle time (ns).
    pub idle_ns: u64,
    /// Their packets.
    pub packets: u64,
    /// Payloads scanned inline.
    pub scans: u64,
    /// Of those timed, how many and their time (ns).
    pub scan_samples: (u64, u64),
    /// Payloads handed to a component.
    pub hands: u64,
    /// Of those timed, how many and their time (ns).
    pub hand_samples: (u64, u64),
    /// Payloads the components' rings had no room for.
    pub lost: u64,
    /// The workers' time (busy and idle) in the timer periods each ran at
    /// least [`SATURATED`] busy (ns): ÷ the period's length, how many
    /// workers ran flat out.
    pub flat_ns: u64,
}

impl Taken {
    /// Over a period of `len_ns`: the workers' average load, how many ran
    /// flat out (one whose RSS share is too much for it loses packets at its
    /// queue, whatever the others' load), and how many a component serves
    /// at their pace — all of them when they all run flat out; else the
    /// flat-out ones, and the others' jobs at the share of a worker they
    /// keep busy (at least one).
    pub fn workers(&self, len_ns: u64) -> (f64, f64, f64) {
        let time = self.busy_ns + self.idle_ns;
        let load = self.busy_ns as f64 / time.max(1) as f64;
        let len = len_ns.max(1) as f64;
        let flat = self.flat_ns as f64 / len;
        let served = if load >= SATURATED {
            (time as f64 / len).round().max(1.0)
        } else {
            (flat + self.busy_ns.saturating_sub(self.flat_ns) as f64 / len).max(1.0)
        };
        (load, flat, served)
    }
}

impl Sums {
    /// Takes the counts, leaving zeros.
    pub fn take(&self) -> Taken {
        // Relaxed: see `Meter::add_to`.
        let t = |i: usize| self.0[i].swap(0, Ordering::Relaxed);
        Taken {
            busy_ns: t(0),
            idle_ns: t(1),
            packets: t(2),
            scans: t(3),
            scan_samples: (t(4), t(5)),
            hands: t(6),
            hand_samples: (t(7), t(8)),
            lost: t(9),
            flat_ns: t(10),
        }
    }
}

/// The director of an IDS's matching and what it last measured.
#[derive(Clone, Debug)]
pub struct Auto {
    director: Director,
    /// Matching components started (the most it may use).
    max: usize,
    /// When it last looked (the runtime's time).
    last_ns: Option<u64>,
    /// The components' job count and time when it last looked.
    seen: (u64, u64),
    inline_ns: Option<f64>,
    core_ns: Option<f64>,
    handover_ns: Option<f64>,
    /// Payloads a second per component at which components lost payloads.
    fell_behind: Option<f64>,
    /// Times the components fell behind, and until when (the runtime's time)
    /// the matching stays inline after the last: 1 s, doubling each time, at
    /// most [`MAX_BACKOFF_NS`]. Elastic traffic (TCP) speeds up to whatever
    /// is slowest, and a component drops scans where a worker would slow the
    /// traffic down, so each try on a core loses some.
    retreats: u32,
    inline_until_ns: u64,
}

/// The longest the matching stays inline after its cores fell behind.
pub const MAX_BACKOFF_NS: u64 = 64_000_000_000;

impl Auto {
    /// A director of matching that starts inline, with up to `max`
    /// components.
    pub fn new(max: usize) -> Auto {
        Auto {
            director: Director::new(DirectorConfig::default(), Placement::Inline),
            max,
            last_ns: None,
            seen: (0, 0),
            inline_ns: None,
            core_ns: None,
            handover_ns: None,
            fell_behind: None,
            retreats: 0,
            inline_until_ns: 0,
        }
    }

    /// The workers' own work per packet: their busy time without the scans
    /// (`c` ns each) and hand-overs (`h`).
    fn rest(&self, t: &Taken, c: f64, h: f64) -> f64 {
        let jobs_ns = t.scans as f64 * c + t.hands as f64 * h;
        ((t.busy_ns as f64 - jobs_ns) / t.packets.max(1) as f64).max(0.0)
    }

    /// With workers flat out: the cores that pay by time per packet, and at
    /// least as many as keep up with the workers' pace on a core (the
    /// workers never wait: components that do not keep up lose payloads).
    fn flat_out(&self, o: &Offload) -> (usize, String) {
        let (k, why) = self.director.saturated_on(o, self.max);
        let max_core = DirectorConfig::default().max_core;
        let need = o.workers * o.share * o.core_ns
            / (max_core * (o.rest_ns + o.share * o.handover_ns).max(1.0));
        (k.max(usize::from(k > 0) * need.ceil() as usize), why)
    }

    /// The period ending at `now_ns`: the workers' sums `t` and the
    /// components' running job count and time; a change of the number of
    /// matching components (0: inline) with its reason, when the director
    /// makes one.
    pub fn look(&mut self, now_ns: u64, t: &Taken, component: (u64, u64)) -> Option<Decision> {
        let last = self.last_ns.replace(now_ns);
        let (jobs, job_ns) = (
            component.0.saturating_sub(self.seen.0),
            component.1.saturating_sub(self.seen.1),
        );
        self.seen = component;
        let len_ns = now_ns.saturating_sub(last?);
        if len_ns == 0 {
            return None;
        }
        let avg = |(n, ns): (u64, u64)| (n > 0).then(|| ns as f64 / n as f64);
        let (scan, core) = (avg(t.scan_samples), avg((jobs, job_ns)));
        self.handover_ns = avg(t.hand_samples).or(self.handover_ns);
        // a side not measured in the period is estimated from the one that
        // was, by their last measured ratio: the payloads change with the
        // traffic wherever they are scanned
        let ratio = match (self.inline_ns, self.core_ns) {
            (Some(i), Some(c)) if i > 0.0 => (c / i).clamp(0.5, 4.0),
            _ => CORE_OVER_INLINE,
        };
        let (c, c2) = match (scan, core) {
            (Some(i), Some(c)) => (i, c),
            (Some(i), None) => (i, i * ratio),
            (None, Some(c)) => (c / ratio, c),
            (None, None) => match (self.inline_ns, self.core_ns) {
                (Some(i), Some(c)) => (i, c),
                (Some(i), None) => (i, i * ratio),
                (None, Some(c)) => (c / ratio, c),
                (None, None) => (f64::NAN, f64::NAN),
            },
        };
        self.inline_ns = scan.or(self.inline_ns);
        self.core_ns = core.or(self.core_ns);
        let payloads = t.scans + t.hands;
        if t.packets == 0 || payloads == 0 {
            let why = "no payloads to scan: no core is needed".to_string();
            return self.director.decide(now_ns, 0, why);
        }
        if c.is_nan() {
            // nothing timed yet: nothing to weigh
            return None;
        }
        let h = self
            .handover_ns
            .unwrap_or(DirectorConfig::default().handover_ns);
        let secs = len_ns as f64 / 1e9;
        let on = self.director.cores();
        if on > 0 && t.lost * 1_000 > payloads {
            // the components fell behind: the rate per component they had
            // is too much for them here, whatever the model says
            let rate = t.hands as f64 / secs / on as f64;
            self.fell_behind = Some(self.fell_behind.map_or(rate, |r| r.min(rate)));
            let backoff = (1_000_000_000u64 << self.retreats.min(6)).min(MAX_BACKOFF_NS);
            self.retreats += 1;
            self.inline_until_ns = now_ns.saturating_add(backoff);
            let why = format!(
                "the matching cores fell behind: {} of {payloads} payloads lost at {rate:.0} a second per core; inline for {} s at least",
                t.lost,
                backoff / 1_000_000_000
            );
            return self.director.decide_now(now_ns, 0, why);
        }
        if now_ns < self.inline_until_ns {
            return None;
        }
        let (load, flat, workers) = t.workers(len_ns);
        let (k, why) = if load >= SATURATED || flat >= 0.5 {
            let o = Offload {
                rest_ns: self.rest(t, c, h),
                share: payloads as f64 / t.packets as f64,
                inline_ns: c,
                core_ns: c2,
                handover_ns: h,
                workers,
            };
            self.flat_out(&o)
        } else {
            let p = Period {
                len_ns,
                jobs: payloads,
                job_ns: (payloads as f64 * c) as u64,
            };
            self.director.better_on(&p, self.max)
        };
        // no more per component than the rate at which they fell behind
        let k = match self.fell_behind {
            Some(r) if k > 0 => k.max((payloads as f64 / secs / (0.8 * r)).ceil() as usize),
            _ => k,
        };
        let (k, why) = if k > self.max {
            (
                0,
                format!(
                    "{why}; but {k} matching cores would be needed to keep up, {} started",
                    self.max
                ),
            )
        } else {
            (k, why)
        };
        let why = if load < SATURATED && flat >= 0.5 {
            format!(
                "workers {:.0} % busy, {flat:.1} of {:.0} flat out; {why}",
                100.0 * load,
                (t.busy_ns + t.idle_ns) as f64 / len_ns as f64
            )
        } else {
            format!("workers {:.0} % busy; {why}", 100.0 * load)
        };
        self.director.decide(now_ns, k, why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A period's sums: `load` of one worker's 100 ms busy, `pkts` packets,
    /// every payload scanned inline at `scan_ns` or handed over at `hand_ns`.
    fn taken(load: f64, pkts: u64, payloads: u64, inline: bool, ns: u64) -> Taken {
        let busy = (load * PERIOD_NS as f64) as u64;
        let samples = (payloads / SAMPLE, payloads / SAMPLE * ns);
        let (scans, hands) = if inline { (payloads, 0) } else { (0, payloads) };
        Taken {
            busy_ns: busy,
            idle_ns: PERIOD_NS - busy,
            packets: pkts,
            scans,
            scan_samples: if inline { samples } else { (0, 0) },
            hands,
            hand_samples: if inline { (0, 0) } else { samples },
            lost: 0,
            flat_ns: if load >= SATURATED { PERIOD_NS } else { 0 },
        }
    }

    #[test]
    fn one_worker_flat_out_beside_an_idle_one_is_weighed_by_time_per_packet() {
        // two workers: one RSS gave an elephant (flat out, every packet a
        // 2 µs payload), the other nearly idle — 55 % busy on average
        let mut two = taken(1.0, 43_000, 43_000, true, 2_000);
        two.busy_ns += PERIOD_NS / 10;
        two.idle_ns += PERIOD_NS - PERIOD_NS / 10;
        let mut a = Auto::new(2);
        a.look(0, &Taken::default(), (0, 0));
        let d = (1..=3)
            .find_map(|i| a.look(i * PERIOD_NS, &two, (0, 0)))
            .expect("a change");
        assert!(d.cores > 0, "{}", d.reason);
        assert!(
            d.reason
                .starts_with("workers 55 % busy, 1.0 of 2 flat out;"),
            "{}",
            d.reason
        );
        assert!(d.reason.contains("ns a packet inline"), "{}", d.reason);
        // the same average load with neither worker flat out is weighed by
        // the work a core would take off them
        let mut even = two;
        even.flat_ns = 0;
        let mut b = Auto::new(2);
        b.look(0, &Taken::default(), (0, 0));
        let d = (1..=3)
            .find_map(|i| b.look(i * PERIOD_NS, &even, (0, 0)))
            .expect("a change");
        assert!(d.reason.starts_with("workers 55 % busy;"), "{}", d.reason);
        assert!(!d.reason.contains("ns a packet inline"), "{}", d.reason);
    }

    #[test]
    fn the_matching_goes_to_as_many_cores_as_pay_and_comes_back() {
        let mut a = Auto::new(2);
        assert_eq!(a.look(0, &Taken::default(), (0, 0)), None, "the first look");
        // a flat-out worker scanning every packet at 2 µs, 300 ns of its own
        // work: 40 000 packets in 100 ms
        let heavy = taken(1.0, 43_000, 43_000, true, 2_000);
        let mut d = None;
        for i in 1..=3 {
            d = a.look(i * PERIOD_NS, &heavy, (0, 0));
        }
        let d = d.expect("three periods in a row");
        assert_eq!((d.to, d.cores), (Placement::Core, 2), "{}", d.reason);
        assert!(d.reason.starts_with("workers 100 % busy;"), "{}", d.reason);
        assert!(d.reason.contains("on 2 cores"), "{}", d.reason);
        // on the cores: hand-overs of 300 ns, 1 µs of the worker's own work,
        // the components' scans at 2.1 µs: one core would set the pace, two
        // keep up
        let on = taken(1.0, 76_900, 76_900, false, 300);
        let mut comp = (0, 0);
        for i in 4..=9 {
            comp = (comp.0 + 76_900, comp.1 + 76_900 * 2_100);
            assert_eq!(a.look(i * PERIOD_NS, &on, comp), None, "it stays");
        }
        // the traffic turns to bare ACKs with a few tiny payloads, the
        // workers idle: back inline
        let light = taken(0.2, 100_000, 100, false, 300);
        let mut back = None;
        for i in 10..=12 {
            comp = (comp.0 + 100, comp.1 + 100 * 150);
            back = back.or(a.look(i * PERIOD_NS, &light, comp));
        }
        let back = back.expect("back inline");
        assert_eq!((back.to, back.cores), (Placement::Inline, 0));
        assert!(back.reason.contains("would save under"), "{}", back.reason);
    }

    #[test]
    fn components_that_fall_behind_bring_the_matching_back_at_once() {
        let mut a = Auto::new(2);
        a.look(0, &Taken::default(), (0, 0));
        // 20 000 payloads of 9 µs a second, the worker 20 % busy: a core
        let busy = taken(0.2, 2_000, 2_000, true, 9_000);
        let d = (1..=3).find_map(|i| a.look(i * PERIOD_NS, &busy, (0, 0)));
        assert_eq!(d.map(|d| d.cores), Some(1));
        // the core is shared with other work here: its ring overflows
        let mut lossy = taken(0.05, 2_000, 2_000, false, 400);
        lossy.lost = 300;
        let d = a
            .look(4 * PERIOD_NS, &lossy, (1_700, 1_700 * 9_500))
            .expect("at once");
        assert_eq!(d.cores, 0);
        assert!(
            d.reason.contains("fell behind: 300 of 2000 payloads lost"),
            "{}",
            d.reason
        );
        // the same rate again, inline: one core would not keep up at it, two
        // might
        assert!(d.reason.contains("inline for 1 s at least"), "{}", d.reason);
        let comp = (1_700, 1_700 * 9_500);
        for i in 5..=14 {
            assert_eq!(a.look(i * PERIOD_NS, &busy, comp), None, "backing off");
        }
        let d = (15..=17).find_map(|i| a.look(i * PERIOD_NS, &busy, comp));
        assert_eq!(d.map(|d| d.cores), Some(2));
        // falling behind again doubles the time inline
        let d = a.look(18 * PERIOD_NS, &lossy, comp).expect("at once");
        assert!(d.reason.contains("inline for 2 s at least"), "{}", d.reason);
        // with a single component started it stays inline, and says why
        let mut one = Auto::new(1);
        one.fell_behind = Some(17_000.0);
        one.look(0, &Taken::default(), (0, 0));
        for i in 1..=5 {
            assert_eq!(one.look(i * PERIOD_NS, &busy, (0, 0)), None);
        }
    }

    #[test]
    fn cheap_scans_stay_inline_and_nothing_is_decided_on_no_measurement() {
        let mut a = Auto::new(4);
        a.look(0, &Taken::default(), (0, 0));
        // payloads but no scan timed yet: nothing to weigh
        let mut t = taken(1.0, 1_000_000, 1_000_000, true, 80);
        t.scan_samples = (0, 0);
        for i in 1..=5 {
            assert_eq!(a.look(i * PERIOD_NS, &t, (0, 0)), None);
        }
        let t = taken(1.0, 1_000_000, 1_000_000, true, 80);
        for i in 6..=10 {
            assert_eq!(a.look(i * PERIOD_NS, &t, (0, 0)), None, "80 ns scans");
        }
    }

    #[test]
    fn the_meter_adds_deltas_of_the_workers_load() {
        let sums = Sums::default();
        let mut m = Meter::default();
        let load = |b, i, p| CoreLoad {
            busy_ns: b,
            idle_ns: i,
            packets: p,
        };
        m.add_to(&sums, load(500, 500, 10));
        for _ in 0..40 {
            let t0 = m.scan_start();
            m.scan_end(t0);
        }
        m.add_to(&sums, load(1_500, 800, 110));
        let t = sums.take();
        assert_eq!((t.busy_ns, t.idle_ns, t.packets), (1_000, 300, 100));
        assert_eq!((t.scans, t.scan_samples.0, t.hands), (40, 2, 0));
        assert_eq!(t.flat_ns, 0, "77 % busy is not flat out");
        assert_eq!(sums.take(), Taken::default(), "taken once");
        // 950 of 1 000 ns busy: flat out for those 1 000 ns
        m.add_to(&sums, load(2_450, 850, 120));
        assert_eq!(sums.take().flat_ns, 1_000);
    }
}
