//! The key-value store on the real UDP runtime over loopback: the library
//! on two threads under `real::block_on` (`RealEnv`, `TcpOob`), then the
//! `kv` binary as two processes. Addresses: 127.181.0.0/16 (this test's
//! block).

mod common;

use common::device;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Stdio};
use std::time::Duration;
use uroce_example_kv::{serve, KvClient, Op, Options, Reply, Store};
use uroce_harness::real::{block_on, RealEnv, TcpOob};
use uroce_verbs::Context;

#[test]
fn the_store_runs_on_the_udp_runtime() {
    // ACK timeout 14 (67 ms): loopback on a loaded machine.
    let options = Options::new(14, Duration::from_secs(5));
    let ops: Vec<Op> = (0..20)
        .map(|i| match i % 3 {
            0 => Op::Put(format!("k{}", i % 4), format!("v{i}")),
            1 => Op::Incr("n".into()),
            _ => Op::Get(format!("k{}", i % 4)),
        })
        .collect();
    let mut model = Store::default();
    let expected: Vec<Reply> = ops.iter().map(|op| model.apply(op)).collect();

    let listener = TcpListener::bind((Ipv4Addr::new(127, 181, 0, 1), 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let dev = device(0, 1);
        let ctx = Context::open(dev.hca());
        let oob = TcpOob::accept(&listener).unwrap();
        block_on(serve(&ctx, &oob, &options))
    });
    let client = std::thread::spawn(move || {
        let dev = device(0, 2);
        let ctx = Context::open(dev.hca());
        let oob = TcpOob::connect(addr).unwrap();
        block_on(async {
            let mut kv = KvClient::connect(&ctx, &oob, RealEnv::new(), &options).await?;
            let mut replies = Vec::new();
            for op in &ops {
                replies.push(kv.apply(op).await?);
            }
            kv.close(&oob).await?;
            Ok::<_, uroce_example_kv::KvError>(replies)
        })
    });
    assert_eq!(client.join().unwrap(), Ok(expected));
    assert_eq!(server.join().unwrap(), Ok(model));
}

#[test]
fn the_kv_binary_serves_a_client() {
    let kv = env!("CARGO_BIN_EXE_kv");
    let side = |host: &str, args: &[&str]| {
        Command::new(kv)
            .args(args)
            .env("UROCE_ADDR", host)
            .env("UROCE_PROGRESS", "event")
            .env_remove("UROCE_SCENARIO")
            .env_remove("UROCE_FAULTS")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start kv")
    };
    let mut server = side("127.181.0.3", &["server", "--port", "18581"]);
    let client = side(
        "127.181.0.4",
        &[
            "client",
            "127.181.0.3",
            "--port",
            "18581",
            "put",
            "a",
            "1",
            "incr",
            "n",
            "incr",
            "n",
            "get",
            "a",
            "get",
            "n",
            "get",
            "b",
        ],
    );
    let client = client.wait_with_output().unwrap();
    if !client.status.success() {
        let _ = server.kill(); // it may wait for a client that never came
    }
    let server = server.wait_with_output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let (out, err) = (text(&client.stdout), text(&client.stderr));
    assert!(client.status.success(), "client: {out}{err}\nserver: {}", text(&server.stderr));
    assert_eq!(out, "put a 1: ok\nincr n: 1\nincr n: 2\nget a: 1\nget n: 2\nget b: (none)\n");
    assert!(server.status.success(), "{}", text(&server.stderr));
    assert_eq!(text(&server.stdout), "kv: serving on 127.181.0.3:18581\na = 1\nn = 2 (counter)\n");
}
