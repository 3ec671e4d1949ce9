//! Engine speed on the simulated fabric: the cases are in
//! `uroce_tests::engine_bench` (shared with `uroce-perf engine`).

fn main() {
    // `cargo test` runs benches once in test mode with `--bench` absent;
    // keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    // `cargo bench --bench engine -- send_nodigest`: only the cases named.
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    uroce_tests::engine_bench::run(if quick { 1 } else { 20 }, &filter);
}
