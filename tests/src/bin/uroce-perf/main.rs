//! `uroce-perf`: the programs `tests/perf/vs-peers.sh` runs beside `uroce`
//! and the peers (a `[[bin]]` of the tests crate, so that the script's short
//! mode in `cargo test` finds it built):
//!
//! - `uroce-perf engine [--scale N] [CASE...]`: the engine cases of
//!   `cargo bench --bench engine` (two HCAs on the simulated fabric, one
//!   thread); scale 20 is what `cargo bench` runs, 1 the quick check; the
//!   words pick cases as `cargo bench --bench engine -- <word>` does (e.g.
//!   `send_nodigest`, for a profiler).
//! - `uroce-perf udp-pingpong [...]`: a raw UDP ping-pong in uroce's own
//!   socket style (see `pingpong.rs`).

mod pingpong;

const USAGE: &str = "usage: uroce-perf engine [--scale N] [CASE...]\n       ";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("engine") => match engine_scale(&args[1..]) {
            Ok((scale, cases)) => {
                uroce_tests::engine_bench::run(scale, &cases);
                0
            }
            Err(e) => fail(&e),
        },
        Some("udp-pingpong") => match pingpong::parse(&args[1..]) {
            Ok(options) => match pingpong::run(&options) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("uroce-perf udp-pingpong: {e}");
                    1
                }
            },
            Err(e) => fail(&e),
        },
        Some("-h" | "--help") => {
            println!("{USAGE}{}", pingpong::usage());
            0
        }
        _ => fail("which program?"),
    };
    std::process::exit(code);
}

/// `[--scale N] [CASE...]`: the scale (20 by default) and the case words.
fn engine_scale(args: &[String]) -> Result<(u64, Vec<String>), String> {
    let (scale, cases) = match args {
        [flag, n, rest @ ..] if flag == "--scale" => {
            let scale = n
                .parse()
                .ok()
                .filter(|&s| s > 0)
                .ok_or(format!("--scale {n}: a positive integer"))?;
            (scale, rest)
        }
        rest => (20, rest),
    };
    if let Some(flag) = cases.iter().find(|c| c.starts_with('-')) {
        return Err(format!("engine: unexpected {flag}"));
    }
    Ok((scale, cases.to_vec()))
}

fn fail(why: &str) -> i32 {
    eprintln!("uroce-perf: {why}\n{USAGE}{}", pingpong::usage());
    2
}
