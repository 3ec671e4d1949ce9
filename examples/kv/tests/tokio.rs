//! The same key-value store under tokio on the real UDP runtime: the
//! server and the client are two tasks of one tokio runtime, with tokio's
//! timer as their [`Env`] and a tokio TCP stream as their [`Oob`]. The
//! completions that wake them (`Cq::next().await`) come from the devices'
//! progress threads, through the waker tokio gave the task. Addresses:
//! 127.181.1.0/24 (in this example's block).

mod common;

use common::device;
use std::io;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use uroce_example_kv::{serve, KvClient, KvError, Op, Options, Reply, Store};
use uroce_harness::{Env, Oob};
use uroce_verbs::Context;

/// Time from tokio: its clock and its timer.
#[derive(Clone)]
struct TokioEnv {
    start: Instant,
}

impl Env for TokioEnv {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn sleep(&self, d: Duration) -> impl std::future::Future<Output = ()> {
        tokio::time::sleep(d)
    }
}

/// Length-prefixed messages (4 bytes, big-endian) over a tokio TCP stream.
struct TokioOob {
    read: Mutex<tokio::net::tcp::OwnedReadHalf>,
    write: Mutex<tokio::net::tcp::OwnedWriteHalf>,
}

impl TokioOob {
    fn new(stream: TcpStream) -> TokioOob {
        let (read, write) = stream.into_split();
        TokioOob { read: Mutex::new(read), write: Mutex::new(write) }
    }
}

impl Oob for TokioOob {
    async fn send(&self, bytes: &[u8]) -> io::Result<()> {
        let len = u32::try_from(bytes.len()).map_err(|_| io::ErrorKind::InvalidInput)?;
        let mut write = self.write.lock().await;
        write.write_all(&len.to_be_bytes()).await?;
        write.write_all(bytes).await
    }

    async fn recv(&self) -> io::Result<Vec<u8>> {
        let mut read = self.read.lock().await;
        let len = read.read_u32().await?;
        let mut bytes = vec![0; len as usize];
        read.read_exact(&mut bytes).await?;
        Ok(bytes)
    }
}

#[test]
fn the_store_runs_as_two_tokio_tasks_on_one_thread() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // ACK timeout 14 (67 ms): loopback on a loaded machine.
    let options = Options::new(14, Duration::from_secs(5));
    let ops: Vec<Op> = (0..30)
        .map(|i| match i % 3 {
            0 => Op::Put(format!("k{}", i % 5), format!("v{i}")),
            1 => Op::Incr(format!("n{}", i % 2)),
            _ => Op::Get(format!("k{}", i % 5)),
        })
        .collect();
    let mut model = Store::default();
    let expected: Vec<Reply> = ops.iter().map(|op| model.apply(op)).collect();
    let (server_dev, client_dev) = (device(1, 1), device(1, 2));
    let (server_ctx, client_ctx) =
        (Context::open(server_dev.hca()), Context::open(client_dev.hca()));
    let env = TokioEnv { start: Instant::now() };

    let (replies, store, think) = runtime.block_on(async {
        let listener = TcpListener::bind((Ipv4Addr::new(127, 181, 1, 1), 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = async {
            let (stream, _) = listener.accept().await.unwrap();
            serve(&server_ctx, &TokioOob::new(stream), &options).await
        };
        let client = async {
            let oob = TokioOob::new(TcpStream::connect(addr).await.unwrap());
            let mut kv = KvClient::connect(&client_ctx, &oob, env.clone(), &options).await?;
            let mut replies = Vec::new();
            let mut think = Duration::ZERO;
            for op in &ops {
                replies.push(kv.apply(op).await?);
                // A think time on tokio's timer between requests.
                let before = env.now();
                env.sleep(Duration::from_millis(1)).await;
                think += env.now() - before;
            }
            kv.close(&oob).await?;
            Ok::<_, KvError>((replies, think))
        };
        let (store, client) = tokio::join!(server, client);
        let (replies, think) = client.expect("the client's calls");
        (replies, store, think)
    });
    assert_eq!(replies, expected);
    assert_eq!(store, Ok(model));
    assert!(think >= Duration::from_millis(30), "30 sleeps of 1 ms took {think:?}");
}
