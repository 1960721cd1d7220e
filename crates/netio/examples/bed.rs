//! `bed up [PREFIX]` builds the test bed and leaves it up; `bed down [PREFIX]`
//! deletes it (`scripts/netns.sh` calls this). PREFIX defaults to `fs`.

use netio::testbed::{Bed, CLIENT, SERVER};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let prefix = args.get(1).map(String::as_str).unwrap_or("fs");
    match args.first().map(String::as_str) {
        Some("up") => match Bed::up(prefix) {
            Ok(bed) => {
                let (a, b) = bed.ifaces();
                println!(
                    "client {} ({CLIENT}) — {} [{a} flowshift {b}] — server {} ({SERVER})",
                    bed.client(),
                    bed.middle(),
                    bed.server()
                );
                println!(
                    "run: ip netns exec {} flowshift run --iface {a},{b}",
                    bed.middle()
                );
                bed.keep();
            }
            Err(e) => {
                eprintln!("bed: {e}");
                std::process::exit(1);
            }
        },
        Some("down") => Bed::down(prefix),
        _ => {
            eprintln!("usage: bed up|down [PREFIX]");
            std::process::exit(2);
        }
    }
}
