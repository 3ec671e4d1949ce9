use super::*;
use crate::udp::UdpDevice;

#[test]
fn progress_modes_parse() {
    assert_eq!(ProgressMode::parse("busy"), Some(ProgressMode::Busy));
    assert_eq!(ProgressMode::parse("event"), Some(ProgressMode::Event));
    assert_eq!(ProgressMode::parse("hybrid"), Some(ProgressMode::HYBRID));
    assert_eq!(ProgressMode::parse("hybrid:7"), Some(ProgressMode::Hybrid { spin_us: 7 }));
    assert_eq!(ProgressMode::parse("spin"), None);
    for mode in [ProgressMode::Busy, ProgressMode::Event, ProgressMode::Hybrid { spin_us: 9 }] {
        assert_eq!(ProgressMode::parse(&mode.to_string()), Some(mode));
    }
}

#[test]
fn config_from_variables() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    };
    let c = UdpConfig::from_vars(vars(&[])).unwrap();
    assert_eq!(c.addr, IpAddr::V4(Ipv4Addr::LOCALHOST));
    let c = UdpConfig::from_vars(vars(&[
        ("UROCE_ADDR", "127.0.0.2"),
        ("UROCE_PROGRESS", "event"),
        ("UROCE_FAULTS", "loss=0.5,seed=3"),
        ("UROCE_OFFLOAD", "1"),
    ]))
    .unwrap();
    assert_eq!(c.addr, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
    assert_eq!(c.progress, ProgressMode::Event);
    assert_eq!(c.faults.unwrap().seed, 3);
    assert!(c.offload);
    assert!(UdpConfig::from_vars(vars(&[("UROCE_ADDR", "nowhere")])).is_err());
    assert!(UdpConfig::from_vars(vars(&[("UROCE_PROGRESS", "fast")])).is_err());
    assert!(UdpConfig::from_vars(vars(&[("UROCE_FAULTS", "loss=3")])).is_err());
    assert!(UdpConfig::from_vars(vars(&[("UROCE_OFFLOAD", "maybe")])).is_err());
    assert!(UdpConfig::from_vars(vars(&[("UROCE_TRACE", "loud")])).is_err());
    let traced = UdpConfig::from_vars(vars(&[("UROCE_TRACE", "1")])).unwrap();
    assert_eq!(traced.trace, TraceMode::Print);
}

#[test]
fn scenario_from_variables() {
    let vars = |pairs: Vec<(&'static str, String)>| {
        move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
    };
    let c = UdpConfig::from_vars(vars(vec![])).unwrap();
    assert!(c.scenario.is_none());
    let c = UdpConfig::from_vars(vars(vec![
        ("UROCE_SCENARIO", "partition-heals".into()),
        ("UROCE_SCENARIO_SEED", "9".into()),
        ("UROCE_SCENARIO_PARAMS", "cut_ms=800".into()),
        ("UROCE_SCENARIO_ROLE", "server".into()),
        ("UROCE_SCENARIO_REPORT", "/tmp/r.txt".into()),
        ("UROCE_FAULTS", "loss=0.01,seed=4".into()),
    ]))
    .unwrap();
    let s = c.scenario.unwrap();
    assert_eq!(s.scenario.name, "partition-heals");
    assert_eq!(s.scenario.param("cut_ms"), Some(800));
    assert_eq!((s.seed, s.role.as_deref()), (9, Some("server")));
    assert_eq!(s.report, Some(PathBuf::from("/tmp/r.txt")));
    assert_eq!(c.faults.unwrap().seed, 4, "kept: the scenario's background");
    let refused = |pairs: Vec<(&'static str, String)>| match UdpConfig::from_vars(vars(pairs)) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    let e = refused(vec![("UROCE_SCENARIO", "no-such".into())]);
    assert!(e.contains("no scenario named \"no-such\"") && e.contains("lost-ack"), "{e}");
    let e = refused(vec![("UROCE_SCENARIO", "/nonexistent/x.toml".into())]);
    assert!(e.contains("cannot read the scenario file /nonexistent/x.toml"), "{e}");
    let e = refused(vec![
        ("UROCE_SCENARIO", "lost-ack".into()),
        ("UROCE_SCENARIO_PARAMS", "cut_ms".into()),
    ]);
    assert!(e.contains("UROCE_SCENARIO_PARAMS=`cut_ms`"), "{e}");
    let e = refused(vec![
        ("UROCE_SCENARIO", "lost-ack".into()),
        ("UROCE_SCENARIO_PARAMS", "cut_ms=5".into()),
    ]);
    assert!(e.contains("cut_ms"), "an unknown param: {e}");
    let e =
        refused(vec![("UROCE_SCENARIO", "lost-ack".into()), ("UROCE_SCENARIO_SEED", "-1".into())]);
    assert!(e.contains("UROCE_SCENARIO_SEED=`-1`"), "{e}");
    let e = refused(vec![("UROCE_SCENARIO_ROLE", "server".into())]);
    assert!(e.contains("set UROCE_SCENARIO too"), "{e}");
}

#[test]
fn cm_timing_from_variables() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    };
    let c = UdpConfig::from_vars(vars(&[])).unwrap();
    assert_eq!((c.hca.cm_response_timeout, c.hca.cm_max_retries), (20, 15));
    let c = UdpConfig::from_vars(vars(&[
        ("UROCE_CM_RESPONSE_TIMEOUT", "14"),
        ("UROCE_CM_RETRIES", " 3 "),
    ]))
    .unwrap();
    assert_eq!((c.hca.cm_response_timeout, c.hca.cm_max_retries), (14, 3));
    let c =
        UdpConfig::from_vars(vars(&[("UROCE_CM_RESPONSE_TIMEOUT", "0"), ("UROCE_CM_RETRIES", "")]))
            .unwrap();
    assert_eq!((c.hca.cm_response_timeout, c.hca.cm_max_retries), (0, 15));
    for (name, value) in [
        ("UROCE_CM_RESPONSE_TIMEOUT", "32"),
        ("UROCE_CM_RESPONSE_TIMEOUT", "-1"),
        ("UROCE_CM_RESPONSE_TIMEOUT", "4s"),
        ("UROCE_CM_RETRIES", "16"),
        ("UROCE_CM_RETRIES", "many"),
    ] {
        let Err(UdpError::Config(e)) =
            UdpConfig::from_vars(move |n: &str| (n == name).then(|| value.to_string()))
        else {
            panic!("{name}={value} accepted")
        };
        assert!(e.contains(&format!("{name}=`{value}`")) && e.contains("0 to"), "{e}");
    }
}

#[test]
fn acks_on_demand_come_from_uroce_ack_probe_us() {
    let c = UdpConfig::from_vars(|_: &str| None).unwrap();
    assert_eq!(c.hca.ack_probe_ns, 1_000_000);
    for (value, ns) in [("0", 0), (" 250 ", 250_000), ("1000000", 1_000_000_000)] {
        let c = UdpConfig::from_vars(|n: &str| (n == "UROCE_ACK_PROBE_US").then(|| value.into()))
            .unwrap();
        assert_eq!(c.hca.ack_probe_ns, ns, "{value}");
    }
    for value in ["1000001", "-1", "soon"] {
        let Err(UdpError::Config(e)) = UdpConfig::from_vars(move |n: &str| {
            (n == "UROCE_ACK_PROBE_US").then(|| value.to_string())
        }) else {
            panic!("UROCE_ACK_PROBE_US={value} accepted")
        };
        assert!(e.contains(&format!("UROCE_ACK_PROBE_US=`{value}`")), "{e}");
    }
}

#[test]
fn the_devices_transmit_budget_comes_from_uroce_tx_budget() {
    let c = UdpConfig::from_vars(|_: &str| None).unwrap();
    assert_eq!(c.hca.max_device_unacked_psns, 1024);
    let c = UdpConfig::from_vars(|n: &str| (n == "UROCE_TX_BUDGET").then(|| " 256 ".to_string()))
        .unwrap();
    assert_eq!(c.hca.max_device_unacked_psns, 256);
    for value in ["0", "16777216", "-1", "lots"] {
        let Err(UdpError::Config(e)) = UdpConfig::from_vars(move |n: &str| {
            (n == "UROCE_TX_BUDGET").then(|| value.to_string())
        }) else {
            panic!("UROCE_TX_BUDGET={value} accepted")
        };
        assert!(e.contains(&format!("UROCE_TX_BUDGET=`{value}`")) && e.contains("1 to"), "{e}");
    }
}

#[test]
fn addresses_that_cannot_be_a_devices_are_refused_by_name() {
    let refused = |pairs: &[(&str, &str)]| {
        let var = |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
        match UdpConfig::from_vars(var) {
            Ok(c) => panic!("{pairs:?} accepted as {}", c.addr),
            Err(e) => e.to_string(),
        }
    };
    let accepted = |pairs: &[(&str, &str)]| {
        let var = |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
        UdpConfig::from_vars(var).unwrap_or_else(|e| panic!("{pairs:?} refused: {e}")).addr
    };
    for (value, why) in [
        ("255.255.255.255", "limited broadcast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
    ] {
        let e = refused(&[("UROCE_ADDR", value)]);
        assert!(e.contains(&format!("UROCE_ADDR=`{value}`")) && e.contains(why), "{e}");
    }
    // A subnet's network and broadcast addresses, given by the prefix
    // or by the L2 transport's default /24.
    let link = ("UROCE_LINK", "127.0.0.1:47100,127.0.0.1:47101");
    let e = refused(&[("UROCE_ADDR", "169.254.255.255/16"), link]);
    assert!(
        e.contains(
            "UROCE_ADDR=`169.254.255.255/16` cannot be a device address: it is the broadcast \
             address of 169.254.0.0/16"
        ),
        "{e}"
    );
    let e = refused(&[("UROCE_ADDR", "10.1.2.0/24"), link]);
    assert!(e.contains("the network address of 10.1.2.0/24"), "{e}");
    let e = refused(&[("UROCE_ADDR", "10.1.2.255"), link]);
    assert!(e.contains("the broadcast address of 10.1.2.0/24"), "{e}");
    let e = refused(&[("UROCE_ADDR", "10.1.2.127/25")]);
    assert!(e.contains("10.1.2.0/25"), "the prefix alone says the subnet: {e}");
    for (value, ip) in [
        ("127.0.0.1", "127.0.0.1"),
        ("127.255.255.254", "127.255.255.254"),
        ("::1", "::1"),
        ("fe80::1", "fe80::1"),
        ("169.254.7.1/16", "169.254.7.1"),
        ("10.0.0.255/16", "10.0.0.255"),
        ("192.168.1.0/23", "192.168.1.0"),
        ("10.0.0.0/31", "10.0.0.0"),
        ("10.0.0.1/31", "10.0.0.1"),
        ("10.0.0.7/32", "10.0.0.7"),
        ("8.8.8.8", "8.8.8.8"),
        ("240.0.0.1", "240.0.0.1"),
        ("2001:db8::/64", "2001:db8::"),
    ] {
        assert_eq!(accepted(&[("UROCE_ADDR", value)]).to_string(), ip, "{value}");
    }
    assert_eq!(
        accepted(&[("UROCE_ADDR", "10.1.2.255")]).to_string(),
        "10.1.2.255",
        "no link, no subnet"
    );
    // Opening checks the address too (a flag may set it).
    let mut config = UdpConfig::new(IpAddr::V4(Ipv4Addr::BROADCAST));
    config.background = false;
    let e = UdpDevice::open(config).expect_err("a broadcast device");
    assert!(e.to_string().contains("255.255.255.255 cannot be a device address"), "{e}");
}
