//! A flow's frames in order on a single-queue interface: Linux queues a
//! frame that arrives on an interface with one receive queue and no receive
//! packet steering (a veth) on its *sender's* CPU, so frames of one flow that
//! its sender sent from two CPUs (a TCP stack sends from the application's
//! CPU and from the one that took the last ACK) are handed to packet sockets
//! by two CPUs at once, and can reach flowshift out of order. A NIC queue is
//! taken by one CPU; receive packet steering does the same per flow: every
//! frame of a flow is queued on the CPU its hash picks, in arrival order.
//!
//! [`FlowOrder::keep`] turns receive packet steering on (over every CPU) for
//! the interfaces that have one receive queue and none, and puts the old
//! setting back when dropped.

use std::io;
use std::path::{Path, PathBuf};

/// Interfaces whose receive packet steering a run turned on, set back when
/// dropped.
#[derive(Debug, Default)]
pub struct FlowOrder {
    /// (`rps_cpus` file, its value before).
    restore: Vec<(PathBuf, String)>,
}

/// What [`FlowOrder::keep`] did to an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Queues {
    /// Several receive queues (a multi-queue NIC or veth): each is taken by
    /// one CPU already (0: no such interface, left to the socket to say).
    Several(usize),
    /// One queue with receive packet steering already.
    Steered,
    /// One queue without: steering turned on over these CPUs (the mask
    /// written).
    TurnedOn(String),
}

impl FlowOrder {
    /// Makes each of `ifaces` hand a flow's frames over in arrival order
    /// (see the module documentation); says what it did to each.
    pub fn keep(ifaces: &[String]) -> io::Result<(FlowOrder, Vec<Queues>)> {
        let mut order = FlowOrder::default();
        let mut done = Vec::with_capacity(ifaces.len());
        for iface in ifaces {
            let dir = PathBuf::from(format!("/sys/class/net/{iface}/queues"));
            if !dir.exists() {
                // no such interface: opening its socket says so
                done.push(Queues::Several(0));
                continue;
            }
            let queues = receive_queues(&dir)?;
            if queues.len() != 1 {
                done.push(Queues::Several(queues.len()));
                continue;
            }
            let file = dir.join(&queues[0]).join("rps_cpus");
            let before = std::fs::read_to_string(&file)?.trim().to_string();
            if !is_empty_mask(&before) {
                done.push(Queues::Steered);
                continue;
            }
            let mask = cpu_mask(online_cpus());
            std::fs::write(&file, &mask)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", file.display())))?;
            order.restore.push((file, before));
            done.push(Queues::TurnedOn(mask));
        }
        Ok((order, done))
    }
}

impl Drop for FlowOrder {
    fn drop(&mut self) {
        for (file, before) in &self.restore {
            // (an interface gone meanwhile has nothing to restore)
            let _ = std::fs::write(file, before);
        }
    }
}

/// The `rx-N` queue directories under `dir`, sorted.
fn receive_queues(dir: &Path) -> io::Result<Vec<String>> {
    let mut q: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("rx-"))
        .collect();
    q.sort();
    Ok(q)
}

/// True for a CPU mask that names no CPU (`0`, `00000000,00000000`).
pub fn is_empty_mask(mask: &str) -> bool {
    mask.trim().chars().all(|c| c == '0' || c == ',')
}

/// The CPUs the kernel has online.
fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A mask of CPUs `0..n` as the kernel writes one: hexadecimal, in groups of
/// 32 bits separated by commas, the highest first.
pub fn cpu_mask(n: usize) -> String {
    let n = n.max(1);
    let groups = n.div_ceil(32);
    (0..groups)
        .rev()
        .map(|g| {
            let bits = (n - g * 32).min(32);
            let v: u32 = if bits == 32 {
                u32::MAX
            } else {
                (1u32 << bits) - 1
            };
            if g == groups - 1 {
                format!("{v:x}")
            } else {
                format!("{v:08x}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_written_as_the_kernel_writes_them() {
        assert_eq!(cpu_mask(1), "1");
        assert_eq!(cpu_mask(2), "3");
        assert_eq!(cpu_mask(32), "ffffffff");
        assert_eq!(cpu_mask(33), "1,ffffffff");
        assert_eq!(cpu_mask(72), "ff,ffffffff,ffffffff");
        assert!(is_empty_mask("00000000,00000000"));
        assert!(is_empty_mask("0"));
        assert!(!is_empty_mask("00000001"));
    }
}
