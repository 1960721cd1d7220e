//! RSS in the kernel: an eBPF program, for a `PACKET_FANOUT_EBPF` group of packet
//! sockets (one per working core), that does what the NIC model does — the
//! Toeplitz hash of the steering fields, `bucket = hash & (B − 1)`, `queue =
//! table[bucket]` — with the indirection table in a BPF array map the controller
//! rewrites while traffic flows, and a packet counter per bucket in a per-CPU
//! array (RSS++'s per-bucket counters).
//!
//! The hash is table-driven: Toeplitz is linear over XOR, so the hash of an
//! input is the XOR of each byte's contribution at its position,
//! `T[i][v] = toeplitz(key, 0…0 v)` (i zero bytes, then v), kept in a map of
//! 12 × 256 values and computed with [`steer::Toeplitz`]. The program handles
//! IPv4 (addresses, plus TCP/UDP ports with [`HashFields::IpPorts`]) exactly as
//! [`steer::RssHasher`] does; other frames (IPv6, ARP, IPv4 fragments) go to
//! queue 0.

use std::io;

use steer::{HashFields, Toeplitz};

use crate::bpf::{reg::*, Alu, Insn, Jmp, Map, Program, Size};

/// Bytes of the IPv4 hash input with ports.
const INPUT: u32 = 12;
/// `bpf_map_lookup_elem`.
const MAP_LOOKUP: i32 = 1;

/// The kernel's steering: the program and its maps.
#[derive(Debug)]
pub struct KernelRss {
    /// Toeplitz contributions, `INPUT × 256` `u32`s.
    _contrib: Map,
    /// The indirection table: bucket → queue (`u32`).
    table: Map,
    /// Packets per bucket, per CPU.
    counts: Map,
    program: Program,
    buckets: u32,
}

impl KernelRss {
    /// The program for the Toeplitz hash `t` over `fields` (`Ip` or `IpPorts`),
    /// with `buckets` buckets (a power of two) spread over `queues` queues
    /// round-robin.
    pub fn new(
        t: &Toeplitz,
        fields: HashFields,
        buckets: u32,
        queues: u32,
    ) -> Result<KernelRss, String> {
        if !matches!(fields, HashFields::Ip | HashFields::IpPorts) {
            return Err(format!(
                "kernel steering hashes `ip` or `ip-ports`, not `{}`",
                fields.name()
            ));
        }
        if !buckets.is_power_of_two() || queues == 0 {
            return Err(format!("{buckets} buckets over {queues} queues"));
        }
        let io = |e: io::Error| format!("creating the steering maps: {e}");
        let contrib = Map::array(INPUT * 256, 4).map_err(io)?;
        for i in 0..INPUT as usize {
            for v in 0..=255u8 {
                let mut input = vec![0u8; i + 1];
                input[i] = v;
                contrib
                    .set(
                        (i * 256) as u32 + u32::from(v),
                        &t.hash(&input).to_ne_bytes(),
                    )
                    .map_err(io)?;
            }
        }
        let table = Map::array(buckets, 4).map_err(io)?;
        for b in 0..buckets {
            table.set(b, &(b % queues).to_ne_bytes()).map_err(io)?;
        }
        let counts = Map::percpu_counters(buckets).map_err(io)?;
        let insns = program(&contrib, &table, &counts, buckets, fields);
        let program = Program::socket_filter(&program_name(std::process::id()), &insns)?;
        Ok(KernelRss {
            _contrib: contrib,
            table,
            counts,
            program,
            buckets,
        })
    }

    /// The program (to attach to a fanout group, or to test-run).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Buckets.
    pub fn buckets(&self) -> u32 {
        self.buckets
    }

    /// Steers `bucket` to `queue` from the next packet on.
    pub fn set(&self, bucket: u32, queue: u32) -> io::Result<()> {
        self.table.set(bucket, &queue.to_ne_bytes())
    }

    /// The queue of `bucket`.
    pub fn get(&self, bucket: u32) -> io::Result<u32> {
        let v = self.table.get(bucket)?;
        Ok(u32::from_ne_bytes([v[0], v[1], v[2], v[3]]))
    }

    /// Packets steered through `bucket` so far (all CPUs).
    pub fn packets(&self, bucket: u32) -> io::Result<u64> {
        self.counts.sum(bucket)
    }

    /// Packets steered through each bucket so far (all CPUs), in bucket order.
    pub fn all_packets(&self) -> io::Result<Vec<u64>> {
        (0..self.buckets).map(|b| self.counts.sum(b)).collect()
    }
}

/// The name of the steering program process `pid` loads (what `bpftool prog`
/// shows; [`crate::bpf::loaded_named`] finds it).
pub fn program_name(pid: u32) -> String {
    format!("fs_rss_{pid}")
}

/// Waits until every CPU that was steering a frame when called has put it in
/// its socket: an RCU grace period, through `membarrier(MEMBARRIER_CMD_GLOBAL)`,
/// which the kernel carries out with `synchronize_rcu()`. The program runs in
/// the receive softirq, a read-side section that the grace period waits for,
/// and enqueues the frame before leaving it; so after a table update and this
/// call, every frame the old table steered is in its old socket and every later
/// one uses the new table. Fails where the kernel refuses the command (e.g.
/// `nohz_full` CPUs).
pub fn wait_for_steering() -> io::Result<()> {
    /// `MEMBARRIER_CMD_GLOBAL` (formerly `MEMBARRIER_CMD_SHARED`).
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: membarrier takes two integers and touches no user memory.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The program. Registers: r6 the context (for packet loads), r7 the IPv4
/// header length, r8 the input length (8 or 12), r9 the hash. Stack: the source
/// address at −4, the destination at −8, the ports at −12, a map key at −16.
fn program(
    contrib: &Map,
    table: &Map,
    counts: &Map,
    buckets: u32,
    fields: HashFields,
) -> Vec<Insn> {
    let mut p: Vec<Insn> = Vec::new();
    let mut out_jumps: Vec<usize> = Vec::new(); // jumps to `out`, patched at the end
    p.push(Insn::alu_reg(Alu::Mov, R6, R1));
    p.push(Insn::alu_imm(Alu::Mov, R9, 0));
    // skb->protocol (network order in a u32): IPv4 only
    p.push(Insn::ldx(Size::W, R0, R6, 16));
    out_jumps.push(p.len());
    p.push(Insn::jmp_imm(Jmp::Ne, R0, i32::from(0x0800u16.to_be()), 0));
    p.push(Insn::ld_abs(Size::B, 0));
    p.push(Insn::alu_reg(Alu::Mov, R7, R0));
    p.push(Insn::alu_imm(Alu::And, R7, 0x0f));
    p.push(Insn::alu_imm(Alu::Lsh, R7, 2));
    // fragments have no ports: queue 0 (the NIC model counts them malformed)
    p.push(Insn::ld_abs(Size::H, 6));
    out_jumps.push(p.len());
    p.push(Insn::jmp_imm(Jmp::Set, R0, 0x3fff, 0));
    p.push(Insn::ld_abs(Size::W, 12));
    p.push(Insn::stx(Size::W, R10, -4, R0));
    p.push(Insn::ld_abs(Size::W, 16));
    p.push(Insn::stx(Size::W, R10, -8, R0));
    p.push(Insn::alu_imm(Alu::Mov, R8, 8));
    if fields == HashFields::IpPorts {
        p.push(Insn::ld_abs(Size::B, 9));
        // TCP (6) or UDP (17): the ports
        p.push(Insn::jmp_imm(Jmp::Eq, R0, 6, 1));
        p.push(Insn::jmp_imm(Jmp::Ne, R0, 17, 3));
        p.push(Insn::ld_ind(Size::W, R7, 0));
        p.push(Insn::stx(Size::W, R10, -12, R0));
        p.push(Insn::alu_imm(Alu::Mov, R8, 12));
    }
    let mut skip_ports = None;
    for i in 0..INPUT as usize {
        if i == 8 {
            skip_ports = Some(p.len());
            p.push(Insn::jmp_imm(Jmp::Ne, R8, 12, 0));
        }
        let word = -4 - 4 * (i / 4) as i16;
        let shift = 24 - 8 * (i % 4) as i32;
        p.push(Insn::ldx(Size::W, R1, R10, word));
        if shift > 0 {
            p.push(Insn::alu_imm(Alu::Rsh, R1, shift));
        }
        p.push(Insn::alu_imm(Alu::And, R1, 0xff));
        p.push(Insn::alu_imm(Alu::Add, R1, (i * 256) as i32));
        p.push(Insn::stx(Size::W, R10, -16, R1));
        p.extend(Insn::ld_map(R1, contrib));
        p.push(Insn::alu_reg(Alu::Mov, R2, R10));
        p.push(Insn::alu_imm(Alu::Add, R2, -16));
        p.push(Insn::call(MAP_LOOKUP));
        out_jumps.push(p.len());
        p.push(Insn::jmp_imm(Jmp::Eq, R0, 0, 0));
        p.push(Insn::ldx(Size::W, R1, R0, 0));
        p.push(Insn::alu_reg(Alu::Xor, R9, R1));
    }
    // bucket
    let bucket = p.len();
    if let Some(j) = skip_ports {
        p[j] = p[j].with_off((bucket - j - 1) as i16);
    }
    p.push(Insn::alu_imm(Alu::And, R9, (buckets - 1) as i32));
    p.push(Insn::stx(Size::W, R10, -16, R9));
    // count it
    p.extend(Insn::ld_map(R1, counts));
    p.push(Insn::alu_reg(Alu::Mov, R2, R10));
    p.push(Insn::alu_imm(Alu::Add, R2, -16));
    p.push(Insn::call(MAP_LOOKUP));
    p.push(Insn::jmp_imm(Jmp::Eq, R0, 0, 3));
    p.push(Insn::ldx(Size::Dw, R1, R0, 0));
    p.push(Insn::alu_imm(Alu::Add, R1, 1));
    p.push(Insn::stx(Size::Dw, R0, 0, R1));
    // its queue
    p.extend(Insn::ld_map(R1, table));
    p.push(Insn::alu_reg(Alu::Mov, R2, R10));
    p.push(Insn::alu_imm(Alu::Add, R2, -16));
    p.push(Insn::call(MAP_LOOKUP));
    out_jumps.push(p.len());
    p.push(Insn::jmp_imm(Jmp::Eq, R0, 0, 0));
    p.push(Insn::ldx(Size::W, R0, R0, 0));
    p.push(Insn::exit());
    // out: queue 0
    let out = p.len();
    p.push(Insn::alu_imm(Alu::Mov, R0, 0));
    p.push(Insn::exit());
    for j in out_jumps {
        p[j] = p[j].with_off((out - j - 1) as i16);
    }
    p
}
