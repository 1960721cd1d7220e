//! Compiles the C baseline of `flowshift bench` (a plain open-addressing flow
//! table, `csrc/flowtable.c`).

fn main() {
    println!("cargo:rerun-if-changed=csrc/flowtable.c");
    cc::Build::new()
        .file("csrc/flowtable.c")
        .opt_level(3)
        .warnings(true)
        .compile("fsbaseline");
}
