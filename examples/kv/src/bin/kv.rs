//! The key-value store on the real UDP runtime: the same `serve` and
//! `KvClient` as the simulator's tests, under `real::block_on` with
//! `RealEnv` and a `TcpOob` side channel.
//!
//! ```text
//! UROCE_ADDR=127.0.0.1 kv server [--port P]
//! UROCE_ADDR=127.0.0.2 kv client 127.0.0.1 [--port P] [put KEY VALUE | get KEY | incr KEY]...
//! ```
//!
//! Each side's device comes from the environment
//! (`UdpDevice::open_from_env`: `UROCE_ADDR`, `UROCE_PROGRESS`,
//! `UROCE_SCENARIO`, ...). The server serves one client, prints its store
//! and exits; the client prints each result, or the error that stopped
//! it (exit status 1).

use std::net::{Ipv4Addr, TcpListener};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use uroce_example_kv::{serve, KvClient, KvError, Op, Options, Reply};
use uroce_harness::real::{block_on, RealEnv, TcpOob};
use uroce_net::udp::UdpDevice;
use uroce_verbs::Context;

/// The side channel's default TCP port.
const PORT: u16 = 18516;
/// ACK timeout 14 (67 ms, as ibv_rc_pingpong); 2 s per call.
const ACK_TIMEOUT: u8 = 14;
const DEADLINE: Duration = Duration::from_secs(2);

const USAGE: &str = "usage: kv server [--port P]\n       \
                     kv client SERVER_ADDR [--port P] [put KEY VALUE | get KEY | incr KEY]...";

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let port = match take_port(&mut args) {
        Ok(port) => port,
        Err(why) => return fail(&why),
    };
    let result = match args.first().map(String::as_str) {
        Some("server") if args.len() == 1 => server(port),
        Some("client") if args.len() >= 2 => match parse_ops(&args[2..]) {
            Ok(ops) => client(&args[1], port, &ops),
            Err(why) => return fail(&why),
        },
        _ => return fail(USAGE),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => fail(&why),
    }
}

fn fail(why: &str) -> ExitCode {
    eprintln!("kv: {why}");
    ExitCode::FAILURE
}

/// Removes `--port P` from `args`.
fn take_port(args: &mut Vec<String>) -> Result<u16, String> {
    let Some(at) = args.iter().position(|a| a == "--port") else { return Ok(PORT) };
    let port = args.get(at + 1).and_then(|p| p.parse().ok()).ok_or("--port needs a number")?;
    args.drain(at..at + 2);
    Ok(port)
}

/// `put KEY VALUE`, `get KEY`, `incr KEY`, ...; none: a small demo.
fn parse_ops(args: &[String]) -> Result<Vec<Op>, String> {
    if args.is_empty() {
        let s = |t: &str| t.to_owned();
        return Ok(vec![
            Op::Put(s("greeting"), s("hello")),
            Op::Get(s("greeting")),
            Op::Incr(s("visits")),
            Op::Incr(s("visits")),
            Op::Get(s("visits")),
            Op::Get(s("missing")),
        ]);
    }
    let mut ops = Vec::new();
    let mut words = args.iter().cloned();
    while let Some(verb) = words.next() {
        let mut word = || words.next().ok_or(format!("`{verb}` needs more words\n{USAGE}"));
        ops.push(match verb.as_str() {
            "put" => Op::Put(word()?, word()?),
            "get" => Op::Get(word()?),
            "incr" => Op::Incr(word()?),
            _ => return Err(format!("unknown operation `{verb}`\n{USAGE}")),
        });
    }
    Ok(ops)
}

fn server(port: u16) -> Result<(), String> {
    let dev = UdpDevice::open_from_env().map_err(|e| e.to_string())?;
    let listener = TcpListener::bind((dev.addr(), port)).map_err(|e| format!("listen: {e}"))?;
    println!("kv: serving on {}:{port}", dev.addr());
    let ctx = Context::open(dev.hca());
    let oob = TcpOob::accept(&listener).map_err(|e| format!("accept: {e}"))?;
    let store = block_on(serve(&ctx, &oob, &Options::new(ACK_TIMEOUT, DEADLINE)));
    drop(ctx);
    let store = store.map_err(|e| e.to_string())?;
    for (key, value) in &store.values {
        println!("{key} = {value}");
    }
    for (key, count) in &store.counters {
        println!("{key} = {count} (counter)");
    }
    Ok(())
}

fn client(server: &str, port: u16, ops: &[Op]) -> Result<(), String> {
    let ip: Ipv4Addr = server.parse().map_err(|_| format!("`{server}`: not an IPv4 address"))?;
    let dev = UdpDevice::open_from_env().map_err(|e| e.to_string())?;
    // The server may still be starting: retry for the deadline.
    let start = Instant::now();
    let oob = loop {
        match TcpOob::connect((ip, port)) {
            Ok(oob) => break oob,
            Err(e) if start.elapsed() > DEADLINE => return Err(format!("connect: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let ctx = Context::open(dev.hca());
    let result = block_on(async {
        let options = Options::new(ACK_TIMEOUT, DEADLINE);
        let connected = KvClient::connect(&ctx, &oob, RealEnv::new(), &options).await;
        let mut kv = connected.map_err(|e| format!("connect: {e}"))?;
        for op in ops {
            let reply = kv.apply(op).await.map_err(|e: KvError| format!("{op:?}: {e}"))?;
            println!("{}", show(op, &reply));
        }
        kv.close(&oob).await.map_err(|e| format!("close: {e}"))
    });
    drop(ctx);
    result
}

/// `put k v: ok`, `get k: v`, `incr c: 3`.
fn show(op: &Op, reply: &Reply) -> String {
    match (op, reply) {
        (Op::Put(k, v), _) => format!("put {k} {v}: ok"),
        (Op::Get(k), Reply::Value(Some(v))) => format!("get {k}: {v}"),
        (Op::Get(k), _) => format!("get {k}: (none)"),
        (Op::Incr(k), Reply::Count(n)) => format!("incr {k}: {n}"),
        (Op::Incr(k), _) => format!("incr {k}: ?"),
    }
}
