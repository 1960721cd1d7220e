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
//! IPv4 (addresses, plus TCP/UDP ports with [`HashFields::IpPorts`]; the XDP
//! program also either address alone, an ICMP error by the flow it quotes,
//! and Roger's rules before the hash, or the rule key itself as the bucket
//! under live rules) exactly as [`steer::RssHasher`] does;
//! other frames (IPv6, ARP, IPv4 fragments) go to queue 0.

use std::io;

use steer::roger::{HeaderMatch, RuleSteering};
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
    contrib: Map,
    /// The indirection table: bucket → queue (`u32`).
    table: Map,
    /// Packets per bucket, per CPU.
    counts: Map,
    /// The socket filter (none when the steering runs in XDP programs:
    /// [`xdp_program`](Self::xdp_program)).
    program: Option<Program>,
    buckets: u32,
    fields: HashFields,
    /// Ternary steering rules the XDP program matches before hashing
    /// ([`set_rules`](Self::set_rules)): rule `r` is bucket `r`.
    rules: Vec<HeaderMatch>,
    /// Under live rules ([`RuleSteering::is_cells`]), where each bit of the
    /// rule key is on the stack: the bucket is the key itself.
    cells: Vec<CellBit>,
}

/// One bit of the rule key as the XDP program reads it: bit `bit` of the
/// stack word at `word` goes to bit `to` of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CellBit {
    word: i16,
    bit: i32,
    to: i32,
}

/// What the XDP program steers by before (or instead of) the hash.
#[derive(Clone, Copy)]
enum RuleCode<'a> {
    /// The hash alone.
    Hash,
    /// The first matching rule's bucket, else the hash's after the rules.
    Rules(&'a [HeaderMatch]),
    /// The rule key itself (each key value a bucket); no hash.
    Cells(&'a [CellBit]),
}

impl RuleCode<'_> {
    /// Whether the rules' fields (protocol, ports of any frame) are read.
    fn reads_fields(&self) -> bool {
        !matches!(self, RuleCode::Hash)
    }
}

/// Where each bit of `bits` is in the stack words the program fills (the
/// frame's bytes of a field in order, byte k at bits 8k; the protocol as a
/// number), key bit by key bit, the first chosen bit most significant.
fn cell_bits(bits: &steer::roger::KeyBits) -> Vec<CellBit> {
    use steer::roger::Field;
    let n = bits.width() as i32;
    let mut out = Vec::new();
    let mut at = 0i32;
    for s in bits.slices() {
        for b in s.first..=s.last {
            let b = b as i32;
            let to = n - 1 - (at + b - s.first as i32);
            let in_bytes = |byte0: i32| 8 * (byte0 + b / 8) + 7 - b % 8;
            let (word, bit) = match s.field {
                Field::SrcIp => (-4, in_bytes(0)),
                Field::DstIp => (-8, in_bytes(0)),
                Field::SrcPort => (-12, in_bytes(0)),
                Field::DstPort => (-12, in_bytes(2)),
                Field::Proto => (PROTO, 7 - b),
            };
            out.push(CellBit { word, bit, to });
        }
        at += (s.last - s.first + 1) as i32;
    }
    out
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
                "the packet sockets' steering program hashes `ip` or `ip-ports`, not `{}` \
                 (the XDP program, --io xdp, hashes all four)",
                fields.name()
            ));
        }
        let mut k = KernelRss::maps(t, fields, buckets, queues)?;
        let insns = program(&k.contrib, &k.table, &k.counts, buckets, fields);
        k.program = Some(Program::socket_filter(
            &program_name(std::process::id()),
            &insns,
        )?);
        Ok(k)
    }

    /// The maps alone, for XDP programs ([`xdp_program`](Self::xdp_program)).
    pub fn maps(
        t: &Toeplitz,
        fields: HashFields,
        buckets: u32,
        queues: u32,
    ) -> Result<KernelRss, String> {
        // (the packet sockets' program hashes both addresses, the XDP one
        // also either alone: [`new`](Self::new) checks)
        let _ = fields;
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
        Ok(KernelRss {
            contrib,
            table,
            counts,
            program: None,
            buckets,
            fields,
            rules: Vec::new(),
            cells: Vec::new(),
        })
    }

    /// Steers by `rules` in the XDP program as the NIC model does
    /// ([`RuleSteering::steer`]): a frame a rule matches goes to bucket `r`
    /// of the rule, the rest by their hash to the buckets after the rules.
    /// The rules' cores are the indirection table's entries for their
    /// buckets, which shard moves rewrite as for hashed buckets.
    pub fn set_rules(&mut self, rules: &RuleSteering) -> Result<(), String> {
        let n = rules.table().rules.len();
        if n >= self.buckets as usize {
            return Err(format!(
                "{n} rules need more than the {} buckets",
                self.buckets
            ));
        }
        if n > MAX_XDP_RULES {
            return Err(format!(
                "{n} rules: the XDP program matches at most {MAX_XDP_RULES}"
            ));
        }
        if rules.is_cells() {
            // every key value its own rule: the key is the bucket
            self.cells = cell_bits(rules.bits());
            self.rules.clear();
            return Ok(());
        }
        self.cells.clear();
        self.rules = rules
            .table()
            .rules
            .iter()
            .map(|r| HeaderMatch::of(rules.bits(), &r.cube))
            .collect();
        Ok(())
    }

    /// The socket filter (to attach to a fanout group, or to test-run).
    ///
    /// # Panics
    ///
    /// On steering made by [`maps`](Self::maps) (XDP programs).
    pub fn program(&self) -> &Program {
        self.program.as_ref().expect("a socket filter was made")
    }

    /// The XDP program steering frames of receive queue `q` to entry
    /// `q × workers + table[bucket]` of socket map `xsks` (the socket of
    /// that working core on that queue); a frame it cannot hash (not IPv4, a
    /// fragment) goes to working core 0's. `returns_entry`: the program
    /// returns the entry instead of redirecting (for test runs).
    pub fn xdp_program(&self, xsks: &Map, workers: u32, returns_entry: bool) -> Vec<Insn> {
        xdp_program(
            (&self.contrib, &self.table, &self.counts, xsks),
            self.buckets,
            workers,
            self.fields,
            if !self.cells.is_empty() {
                RuleCode::Cells(&self.cells)
            } else if !self.rules.is_empty() {
                RuleCode::Rules(&self.rules)
            } else {
                RuleCode::Hash
            },
            returns_entry,
        )
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
    hash_bucket_lookup(
        &mut p,
        &mut out_jumps,
        (contrib, counts, table),
        (buckets, RuleCode::Hash),
        (-4, 24, -8),
    );
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

/// `bpf_redirect_map`.
const REDIRECT_MAP: i32 = 51;
/// `bpf_ktime_get_ns`.
const KTIME_GET_NS: i32 = 5;
/// `bpf_xdp_adjust_meta`.
const ADJUST_META: i32 = 54;
/// Bytes of metadata the XDP program puts before a frame: its arrival time.
pub const META: u32 = 8;
/// `XDP_PASS`.
const XDP_PASS: i32 = 2;

/// The XDP flavour of [`program`]: the arrival time in the frame's
/// metadata, the same hash, from the frame in place (direct packet access,
/// each read checked against the frame's end), then a redirect to the
/// working core's socket on the frame's queue. Registers:
/// r6 the context, r2 the frame's start, r3 its end, r7 the IPv4 header
/// length, r8 the input length, r9 the hash. Stack: the source address at
/// −4, the destination at −8, the ports at −12 (each as the frame holds
/// them: byte k of a word at bits 8k), a map key at −16, the queue at −20.
fn xdp_program(
    (contrib, table, counts, xsks): (&Map, &Map, &Map, &Map),
    buckets: u32,
    workers: u32,
    fields: HashFields,
    rules: RuleCode<'_>,
    returns_entry: bool,
) -> Vec<Insn> {
    let mut p: Vec<Insn> = Vec::new();
    let mut out_jumps: Vec<usize> = Vec::new();
    p.push(Insn::alu_reg(Alu::Mov, R6, R1));
    // the arrival time (CLOCK_MONOTONIC ns) in 8 bytes of metadata before
    // the frame, which an AF_XDP socket in copy mode receives with it
    // ([`crate::xsk::Xsk::recv`]): the order frames reached the interface,
    // whichever core reads them
    p.push(Insn::call(KTIME_GET_NS));
    p.push(Insn::alu_reg(Alu::Mov, R7, R0));
    p.push(Insn::alu_reg(Alu::Mov, R1, R6));
    p.push(Insn::alu_imm(Alu::Mov, R2, -(META as i32)));
    p.push(Insn::call(ADJUST_META));
    p.push(Insn::jmp_imm(Jmp::Ne, R0, 0, 6));
    p.push(Insn::ldx(Size::W, R1, R6, 8));
    p.push(Insn::ldx(Size::W, R2, R6, 0));
    p.push(Insn::alu_reg(Alu::Mov, R3, R1));
    p.push(Insn::alu_imm(Alu::Add, R3, META as i32));
    p.push(Insn::jmp_reg(Jmp::Gt, R3, R2, 1));
    p.push(Insn::stx(Size::Dw, R1, 0, R7));
    p.push(Insn::alu_imm(Alu::Mov, R9, 0));
    p.push(Insn::ldx(Size::W, R1, R6, 16));
    p.push(Insn::stx(Size::W, R10, -20, R1));
    p.push(Insn::ldx(Size::W, R2, R6, 0));
    p.push(Insn::ldx(Size::W, R3, R6, 4));
    // an Ethernet and a shortest IPv4 header
    p.push(Insn::alu_reg(Alu::Mov, R4, R2));
    p.push(Insn::alu_imm(Alu::Add, R4, 34));
    out_jumps.push(p.len());
    p.push(Insn::jmp_reg(Jmp::Gt, R4, R3, 0));
    // EtherType 0x0800 (its two bytes read as a little-endian u16)
    p.push(Insn::ldx(Size::H, R1, R2, 12));
    out_jumps.push(p.len());
    p.push(Insn::jmp_imm(Jmp::Ne, R1, 0x0008, 0));
    p.push(Insn::ldx(Size::B, R7, R2, 14));
    p.push(Insn::alu_imm(Alu::And, R7, 0x0f));
    p.push(Insn::alu_imm(Alu::Lsh, R7, 2));
    if rules.reads_fields() {
        // ports 0 unless the frame has some
        p.push(Insn::st(Size::W, R10, -12, 0));
    }
    // fragments have no ports: working core 0 (flags and offset 0x3fff, as
    // a little-endian read of their two bytes)
    p.push(Insn::ldx(Size::H, R1, R2, 20));
    out_jumps.push(p.len());
    p.push(Insn::jmp_imm(Jmp::Set, R1, 0xff3f, 0));
    p.push(Insn::ldx(Size::W, R1, R2, 26));
    p.push(Insn::stx(Size::W, R10, -4, R1));
    p.push(Insn::ldx(Size::W, R1, R2, 30));
    p.push(Insn::stx(Size::W, R10, -8, R1));
    // input bytes: both addresses, or one (at −4, or −8 for the destination)
    let one_address = matches!(fields, HashFields::SrcIp | HashFields::DstIp);
    p.push(Insn::alu_imm(Alu::Mov, R8, if one_address { 4 } else { 8 }));
    if fields == HashFields::IpPorts {
        p.push(Insn::ldx(Size::B, R1, R2, 23));
        // TCP (6) or UDP (17): the ports, after the header's options
        p.push(Insn::jmp_imm(Jmp::Eq, R1, 6, 1));
        let not_l4 = p.len();
        p.push(Insn::jmp_imm(Jmp::Ne, R1, 17, 0));
        // (a frame too short for its ports goes to working core 0)
        l4_in_frame(&mut p, 4, &mut out_jumps);
        p.push(Insn::ldx(Size::W, R1, R4, 0));
        p.push(Insn::stx(Size::W, R10, -12, R1));
        p.push(Insn::alu_imm(Alu::Mov, R8, 12));
        let past = p.len();
        p[not_l4] = p[not_l4].with_off((past - not_l4 - 1) as i16);
    }
    if rules.reads_fields() {
        rule_fields(&mut p, fields);
    }
    icmp_error_fields(&mut p, fields, rules.reads_fields());
    hash_bucket_lookup(
        &mut p,
        &mut out_jumps,
        (contrib, counts, table),
        (buckets, rules),
        (if fields == HashFields::DstIp { -8 } else { -4 }, 0, 8),
    );
    out_jumps.push(p.len());
    p.push(Insn::jmp_imm(Jmp::Eq, R0, 0, 0));
    p.push(Insn::ldx(Size::W, R9, R0, 0));
    let send = p.len();
    // entry = queue × workers + core (r9)
    p.push(Insn::ldx(Size::W, R2, R10, -20));
    p.push(Insn::alu_imm(Alu::Mul, R2, workers as i32));
    p.push(Insn::alu_reg(Alu::Add, R2, R9));
    if returns_entry {
        p.push(Insn::alu_reg(Alu::Mov, R0, R2));
    } else {
        p.extend(Insn::ld_map(R1, xsks));
        p.push(Insn::alu_imm(Alu::Mov, R3, XDP_PASS));
        p.push(Insn::call(REDIRECT_MAP));
    }
    p.push(Insn::exit());
    // out: working core 0
    let out = p.len();
    p.push(Insn::alu_imm(Alu::Mov, R9, 0));
    p.push(Insn::ja((send as i64 - out as i64 - 2) as i16));
    for j in out_jumps {
        p[j] = p[j].with_off((out - j - 1) as i16);
    }
    p
}

/// Rules the XDP program matches at most (each is a few instructions per
/// field it fixes, run in order for every frame).
pub const MAX_XDP_RULES: usize = 512;

/// Stack offset of the protocol (a 32-bit word) under rule steering.
const PROTO: i16 = -24;

/// Puts on the stack what the rules match beside the hashed fields, as the NIC
/// model's 5-tuple has them: the protocol at [`PROTO`]; the ports at −12 for
/// TCP and UDP (already there when they are hashed) and, for an ICMP echo,
/// its identifier as both ports; 0 otherwise. Registers as in
/// [`xdp_program`] (r2 the frame, r3 its end, r7 the IPv4 header length).
fn rule_fields(p: &mut Vec<Insn>, fields: HashFields) {
    let mut done_jumps = Vec::new();
    p.push(Insn::ldx(Size::B, R1, R2, 23));
    p.push(Insn::stx(Size::W, R10, PROTO, R1));
    let to_icmp = p.len();
    p.push(Insn::jmp_imm(Jmp::Eq, R1, 1, 0));
    if fields != HashFields::IpPorts {
        p.push(Insn::jmp_imm(Jmp::Eq, R1, 6, 1));
        done_jumps.push(p.len());
        p.push(Insn::jmp_imm(Jmp::Ne, R1, 17, 0));
        l4_in_frame(p, 4, &mut done_jumps);
        p.push(Insn::ldx(Size::W, R1, R4, 0));
        p.push(Insn::stx(Size::W, R10, -12, R1));
    }
    done_jumps.push(p.len());
    p.push(Insn::ja(0));
    let icmp = p.len();
    p[to_icmp] = p[to_icmp].with_off((icmp - to_icmp - 1) as i16);
    l4_in_frame(p, 8, &mut done_jumps);
    // an echo request (8) or reply (0): its identifier as both ports
    p.push(Insn::ldx(Size::B, R1, R4, 0));
    p.push(Insn::jmp_imm(Jmp::Eq, R1, 8, 1));
    done_jumps.push(p.len());
    p.push(Insn::jmp_imm(Jmp::Ne, R1, 0, 0));
    p.push(Insn::ldx(Size::H, R1, R4, 4));
    p.push(Insn::alu_reg(Alu::Mov, R5, R1));
    p.push(Insn::alu_imm(Alu::Lsh, R5, 16));
    p.push(Insn::alu_reg(Alu::Or, R1, R5));
    p.push(Insn::stx(Size::W, R10, -12, R1));
    let done = p.len();
    for j in done_jumps {
        p[j] = p[j].with_off((done - j - 1) as i16);
    }
}

/// An ICMPv4 error (destination unreachable, time exceeded, parameter
/// problem) quoting an IPv4 TCP or UDP packet is steered with the flow it
/// reports on, as the NIC model does: the quoted tuple, reversed, replaces
/// the addresses and ports on the stack (and the protocol, for rules). A
/// quote that is short or not TCP/UDP leaves the frame's own fields.
/// Registers as in [`xdp_program`]; `r0`, `r1`, `r4` and `r5` are scratch.
fn icmp_error_fields(p: &mut Vec<Insn>, fields: HashFields, rules: bool) {
    let mut end = Vec::new();
    p.push(Insn::ldx(Size::B, R1, R2, 23));
    end.push(p.len());
    p.push(Insn::jmp_imm(Jmp::Ne, R1, 1, 0));
    // the ICMP header and a shortest quoted IPv4 header in the frame
    l4_in_frame(p, 8 + 20, &mut end);
    p.push(Insn::ldx(Size::B, R1, R4, 0));
    p.push(Insn::jmp_imm(Jmp::Eq, R1, 3, 2));
    p.push(Insn::jmp_imm(Jmp::Eq, R1, 11, 1));
    end.push(p.len());
    p.push(Insn::jmp_imm(Jmp::Ne, R1, 12, 0));
    // the quote: IPv4, a header of 20 bytes or more, TCP or UDP
    p.push(Insn::ldx(Size::B, R1, R4, 8));
    p.push(Insn::alu_reg(Alu::Mov, R5, R1));
    p.push(Insn::alu_imm(Alu::Rsh, R5, 4));
    end.push(p.len());
    p.push(Insn::jmp_imm(Jmp::Ne, R5, 4, 0));
    p.push(Insn::alu_imm(Alu::And, R1, 0x0f));
    p.push(Insn::alu_imm(Alu::Lsh, R1, 2));
    p.push(Insn::alu_imm(Alu::Mov, R5, 20));
    end.push(p.len());
    p.push(Insn::jmp_reg(Jmp::Gt, R5, R1, 0));
    p.push(Insn::ldx(Size::B, R5, R4, 8 + 9));
    p.push(Insn::jmp_imm(Jmp::Eq, R5, 6, 1));
    end.push(p.len());
    p.push(Insn::jmp_imm(Jmp::Ne, R5, 17, 0));
    // r0: the quoted ports, checked in the frame
    p.push(Insn::alu_reg(Alu::Mov, R0, R4));
    p.push(Insn::alu_reg(Alu::Add, R0, R1));
    p.push(Insn::alu_imm(Alu::Add, R0, 8));
    p.push(Insn::alu_reg(Alu::Mov, R1, R0));
    p.push(Insn::alu_imm(Alu::Add, R1, 4));
    end.push(p.len());
    p.push(Insn::jmp_reg(Jmp::Gt, R1, R3, 0));
    if rules {
        p.push(Insn::stx(Size::W, R10, PROTO, R5));
    }
    // reversed: the quoted destination is the source
    p.push(Insn::ldx(Size::W, R1, R4, 8 + 16));
    p.push(Insn::stx(Size::W, R10, -4, R1));
    p.push(Insn::ldx(Size::W, R1, R4, 8 + 12));
    p.push(Insn::stx(Size::W, R10, -8, R1));
    // the ports' bytes as the frame would hold them: the quoted destination
    // port, then its source port
    p.push(Insn::ldx(Size::H, R1, R0, 0));
    p.push(Insn::alu_imm(Alu::Lsh, R1, 16));
    p.push(Insn::ldx(Size::H, R5, R0, 2));
    p.push(Insn::alu_reg(Alu::Or, R1, R5));
    p.push(Insn::stx(Size::W, R10, -12, R1));
    if fields == HashFields::IpPorts {
        p.push(Insn::alu_imm(Alu::Mov, R8, 12));
    }
    let done = p.len();
    for j in end {
        p[j] = p[j].with_off((done - j - 1) as i16);
    }
}

/// `r4` = the frame's layer-4 header, with a jump (recorded in `jumps`)
/// when fewer than `len` bytes of it are in the frame.
fn l4_in_frame(p: &mut Vec<Insn>, len: i32, jumps: &mut Vec<usize>) {
    p.push(Insn::alu_reg(Alu::Mov, R4, R2));
    p.push(Insn::alu_reg(Alu::Add, R4, R7));
    p.push(Insn::alu_imm(Alu::Add, R4, 14));
    p.push(Insn::alu_reg(Alu::Mov, R5, R4));
    p.push(Insn::alu_imm(Alu::Add, R5, len));
    jumps.push(p.len());
    p.push(Insn::jmp_reg(Jmp::Gt, R5, R3, 0));
}

/// A header field's value or mask as the stack word holding it reads: the
/// frame's bytes in order.
fn word(bytes: [u8; 4]) -> i32 {
    i32::from_ne_bytes(bytes)
}

/// The first rule the frame's fields match sets `r9` to its bucket; a frame
/// none matches keeps its hash's bucket among those after the rules
/// (`k + hash mod (buckets − k)`), as [`RuleSteering::steer`] does.
fn match_rules(p: &mut Vec<Insn>, rules: &[HeaderMatch], buckets: u32) {
    let mut matched = Vec::new();
    for (r, m) in rules.iter().enumerate() {
        let [sp, dp] = [m.src_port, m.dst_port];
        let fields = [
            (-4, word(m.src.0.to_be_bytes()), word(m.src.1.to_be_bytes())),
            (-8, word(m.dst.0.to_be_bytes()), word(m.dst.1.to_be_bytes())),
            (-12, word(concat(sp.0, dp.0)), word(concat(sp.1, dp.1))),
            (PROTO, i32::from(m.proto.0), i32::from(m.proto.1)),
        ];
        let mut fails = Vec::new();
        for (off, value, mask) in fields {
            if mask == 0 {
                continue;
            }
            p.push(Insn::ldx(Size::W, R1, R10, off));
            p.push(Insn::alu_imm(Alu::And, R1, mask));
            fails.push(p.len());
            p.push(Insn::jmp32_imm(Jmp::Ne, R1, value, 0));
        }
        p.push(Insn::alu_imm(Alu::Mov, R9, r as i32));
        matched.push(p.len());
        p.push(Insn::ja(0));
        let next = p.len();
        for j in fails {
            p[j] = p[j].with_off((next - j - 1) as i16);
        }
    }
    let k = rules.len() as i32;
    p.push(Insn::alu_imm(Alu::Mod, R9, buckets as i32 - k));
    p.push(Insn::alu_imm(Alu::Add, R9, k));
    let end = p.len();
    for j in matched {
        p[j] = p[j].with_off((end - j - 1) as i16);
    }
}

/// `r9` = the rule key, bit by bit from the fields on the stack.
fn cell_key(p: &mut Vec<Insn>, bits: &[CellBit]) {
    p.push(Insn::alu_imm(Alu::Mov, R9, 0));
    for c in bits {
        p.push(Insn::ldx(Size::W, R1, R10, c.word));
        if c.bit > 0 {
            p.push(Insn::alu_imm(Alu::Rsh, R1, c.bit));
        }
        p.push(Insn::alu_imm(Alu::And, R1, 1));
        if c.to > 0 {
            p.push(Insn::alu_imm(Alu::Lsh, R1, c.to));
        }
        p.push(Insn::alu_reg(Alu::Or, R9, R1));
    }
}

/// Two ports' bytes as the frame holds them.
fn concat(a: u16, b: u16) -> [u8; 4] {
    let (a, b) = (a.to_be_bytes(), b.to_be_bytes());
    [a[0], a[1], b[0], b[1]]
}

/// Emits what both steering programs share once the hashed fields are on the
/// stack (16 bytes below `r10`, as 32-bit words; `r8` = 8 without ports, 12
/// with): the table-driven Toeplitz hash into `r9` (byte `i` of the input is
/// `(word >> (first_shift + step × (i mod 4))) & 0xff`, so either byte order
/// of the stored words reads the same input), `bucket = hash & (buckets − 1)`
/// counted in the per-CPU counter map, then the indirection table looked up:
/// `r0` points at the bucket's entry, or the program jumps out (a jump
/// recorded in `out_jumps`, patched by the caller).
fn hash_bucket_lookup(
    p: &mut Vec<Insn>,
    out_jumps: &mut Vec<usize>,
    (contrib, counts, table): (&Map, &Map, &Map),
    (buckets, rules): (u32, RuleCode<'_>),
    (first_word, first_shift, step): (i16, i32, i32),
) {
    let mut skips = Vec::new();
    let hashed = if matches!(rules, RuleCode::Cells(_)) {
        0
    } else {
        INPUT as usize
    };
    for i in 0..hashed {
        if i == 4 {
            // one address only
            skips.push(p.len());
            p.push(Insn::jmp_imm(Jmp::Eq, R8, 4, 0));
        }
        if i == 8 {
            skips.push(p.len());
            p.push(Insn::jmp_imm(Jmp::Ne, R8, 12, 0));
        }
        let word = if i < 4 {
            first_word
        } else {
            -4 - 4 * (i / 4) as i16
        };
        let shift = first_shift + step * (i % 4) as i32;
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
    let bucket = p.len();
    for j in skips {
        p[j] = p[j].with_off((bucket - j - 1) as i16);
    }
    match rules {
        RuleCode::Hash => {}
        RuleCode::Rules(r) => match_rules(p, r, buckets),
        RuleCode::Cells(c) => cell_key(p, c),
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
    // its entry in the indirection table
    p.extend(Insn::ld_map(R1, table));
    p.push(Insn::alu_reg(Alu::Mov, R2, R10));
    p.push(Insn::alu_imm(Alu::Add, R2, -16));
    p.push(Insn::call(MAP_LOOKUP));
}
