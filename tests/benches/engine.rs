//! Engine speed on the simulated fabric: the cases are in
//! `uroce_tests::engine_bench` (shared with `uroce-perf engine`).

fn main() {
    // `cargo test` runs benches once in test mode with `--bench` absent;
    // keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    uroce_tests::engine_bench::run(if quick { 1 } else { 20 });
}
