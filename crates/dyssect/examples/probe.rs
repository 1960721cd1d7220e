//! Solves the benchmark's instances once and prints what came out.
use std::time::Duration;

use dyssect::{solve, Instance, Objective};

fn main() {
    let (shards, workers, offloaders) = (16usize, 7usize, 1usize);
    let total = 0.5 * (workers + offloaders) as f64;
    let w: Vec<f64> = (0..shards)
        .map(|i| 1.0 / ((i + 1) as f64).powf(1.1))
        .collect();
    let sum: f64 = w.iter().sum();
    let i = Instance {
        load: w.iter().map(|x| x / sum * total).collect(),
        r_max: vec![0.9; shards],
        workers,
        offloaders,
        owner: (0..shards).map(|s| s % workers).collect(),
        offload_core: (0..workers).map(|c| Some(c % offloaders)).collect(),
        u_work: 0.9,
        u_off: 0.9,
        residual: 0.25,
        offload_scale: 1.0,
        min_served: 2,
        fixed: vec![false; shards],
    };
    println!("loads {:?}", i.load);
    for obj in [
        Objective::Cores,
        Objective::Balance {
            working: 7,
            offloading: 1,
            alpha: 0.01,
        },
        Objective::Balance {
            working: 7,
            offloading: 1,
            alpha: 0.0,
        },
        Objective::Migrations {
            working: 7,
            offloading: 1,
        },
    ] {
        let t = std::time::Instant::now();
        let r = solve(&i, obj, Duration::from_secs(10));
        println!(
            "{obj:?}: {:?} in {:?}",
            r.as_ref().map(|s| (&s.u_work, &s.u_off, s.migrations)),
            t.elapsed()
        );
    }
}
