//! The L2 transport on a TAP interface (`UROCE_TAP`). As root, in a
//! network namespace of the test's own (nothing leaves the machine), a
//! Linux bridge joins two TAP interfaces and the kernel's own stack
//! (169.254.7.254): two uroce processes, one on each TAP, ping-pong RC
//! with data checked, and the kernel reaches a uroce device by ARP and
//! gets a TCP reset from it for a closed port. Without root, `unshare`,
//! `ip` or `/dev/net/tun` that test says why it is skipped.

use std::process::Command;
use std::time::{Duration, Instant};
use uroce_tests::child::{self, SEP};

const CHILD_ENV: &str = "UROCE_TAP_TEST_CHILD";

/// The child: runs `uroce` with the arguments in [`CHILD_ENV`].
#[test]
fn tap_child() {
    child::run_if_child(CHILD_ENV);
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status.lines().any(|line| {
            line.strip_prefix("Uid:").and_then(|ids| ids.split_whitespace().nth(1)) == Some("0")
        })
    })
}

/// Why this host cannot build the namespace, if it cannot.
fn cannot_build_namespace() -> Option<String> {
    if !is_root() {
        return Some("not root (a namespace with a bridge and TAPs needs it)".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    let works = |program: &str, args: &[&str]| {
        Command::new(program).args(args).output().is_ok_and(|out| out.status.success())
    };
    if !works("unshare", &["-n", "true"]) {
        return Some("`unshare -n` does not work here".into());
    }
    if !works("ip", &["-V"]) {
        return Some("no `ip` (iproute2)".into());
    }
    None
}

#[test]
fn pingpong_over_two_taps_and_the_kernel_reaches_uroce() {
    if let Some(why) = cannot_build_namespace() {
        eprintln!("TAP test SKIPPED: {why}");
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let dir = tempfile::tempdir().expect("a temp dir");
    let args = |list: &[&str]| list.join(&SEP.to_string());
    let server = args(&["pingpong", "-g", "1", "-n", "200", "-s", "5000", "-c"]);
    let server = format!("{server}{SEP}--accept-timeout{SEP}20");
    let client = args(&["pingpong", "-g", "1", "-n", "200", "-s", "5000", "-c", "169.254.7.1"]);
    let script = format!(
        r#"set -u
ip link set lo up
ip link add br0 type bridge && ip link set br0 up || exit 10
for t in ut1 ut2; do
  ip tuntap add dev $t mode tap && ip link set $t master br0 && ip link set $t up || exit 11
done
ip addr add 169.254.7.254/16 dev br0
run() {{ env -u UROCE_LINK -u UROCE_FAULTS -u UROCE_CAPTURE -u UROCE_MTU \
  {CHILD_ENV}="$1" UROCE_TAP=$2 UROCE_ADDR=$3 timeout 40 '{exe}' --exact tap_child --nocapture \
  --test-threads=1 --quiet; }}
run '{server}' ut1 169.254.7.1/16 > '{dir}/server.log' 2>&1 &
server=$!
for i in $(seq 50); do grep -q 'local address' '{dir}/server.log' && break; sleep 0.1; done
timeout 5 bash -c 'exec 3<>/dev/tcp/169.254.7.1/9' 2> '{dir}/tcp.log'
echo "TCP9 $?"; cat '{dir}/tcp.log'
echo "NEIGH $(ip neigh show 169.254.7.1 dev br0)"
run '{client}' ut2 169.254.7.2/16 > '{dir}/client.log' 2>&1
echo "CLIENT $?"
wait $server
echo "SERVER $?"
echo "--- server"; cat '{dir}/server.log'; echo "--- client"; cat '{dir}/client.log'
"#,
        exe = exe.display(),
        dir = dir.path().display(),
    );
    let path = dir.path().join("tap.sh");
    std::fs::write(&path, script).expect("write the script");
    let started = Instant::now();
    let output = Command::new("timeout")
        .args(["-k", "5", "90", "unshare", "-n", "bash"])
        .arg(&path)
        .output()
        .expect("run the namespace script");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("{text}");
    assert!(started.elapsed() < Duration::from_secs(90), "{text}");
    assert!(output.status.success(), "the script failed ({}):\n{text}", output.status);
    let line = |marker: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(marker))
            .unwrap_or_else(|| panic!("no `{marker}` line:\n{text}"))
            .trim()
            .to_string()
    };
    assert_eq!(line("CLIENT "), "0", "{text}");
    assert_eq!(line("SERVER "), "0", "{text}");
    // The kernel resolved uroce's MAC and got a reset: uroce is a host.
    assert!(line("NEIGH ").contains("lladdr 02:00:a9:fe:07:01"), "{text}");
    assert_eq!(line("TCP9 "), "1", "{text}");
    assert!(text.contains("Connection refused"), "{text}");
    assert_eq!(text.matches("200 iters in").count(), 2, "{text}");
    assert!(!text.contains("invalid data"), "{text}");
}

#[test]
fn tap_configuration_errors_are_clear() {
    let deadline = Instant::now() + Duration::from_secs(20);
    let run = |env: &[(&str, String)]| child::spawn("tap_child", CHILD_ENV, &["devinfo"], env);
    let end = run(&[("UROCE_TAP", "no/slash".into())]).finish(deadline);
    assert_eq!(end.code, Some(2), "{end:#?}");
    assert!(end.stderr.contains("UROCE_TAP=`no/slash`"), "{end:#?}");
    let both = [("UROCE_TAP", "ut9".into()), ("UROCE_LINK", "127.0.0.1:1,127.0.0.1:2".into())];
    let end = run(&both).finish(deadline);
    assert_eq!(end.code, Some(2), "{end:#?}");
    assert!(end.stderr.contains("set one"), "{end:#?}");
}
