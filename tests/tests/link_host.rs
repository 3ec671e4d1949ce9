//! The L2 transport's host (`uroce_net::link::LinkHost`) against
//! hostile frames: the templates the fuzz body changes are what they
//! claim to be, and no script of frames, sends and time makes the host
//! panic, hand the HCA bytes from outside the frame, send a malformed
//! frame, or stop answering ARP ([`uroce_tests::fuzz::link_frames`], also
//! the `link_frames` fuzz target).

use proptest::collection::vec;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr};
use uroce_hca::time::Instant;
use uroce_net::link::{Ingress, LinkHost};
use uroce_tests::fuzz::{
    link_frames, link_template, LINK_IP, LINK_IP_MTU, LINK_MAC, LINK_TCP_PORT,
};

/// The host as `link_frames` builds it, and what it sends after `frame`
/// (when `after_arp`, once the peer's ARP request taught it the peer's MAC,
/// as happens on a real link before TCP).
fn answer_to(frame: &[u8], after_arp: bool) -> (Ingress<'_>, Vec<Vec<u8>>) {
    let mut host = LinkHost::new(
        LINK_MAC,
        IpAddr::V4(Ipv4Addr::from(LINK_IP)),
        16,
        LINK_IP_MTU as u32,
        7,
        Instant::from_nanos(0),
    );
    let _listener = host.tcp_listen(LINK_TCP_PORT).expect("a listener");
    if after_arp {
        assert_eq!(host.ingress(&link_template(0)), Ingress::Host);
        host.poll(Instant::from_nanos(500_000));
        while host.take_frame().is_some() {}
    }
    let verdict = host.ingress(frame);
    host.poll(Instant::from_nanos(1_000_000));
    let mut sent = Vec::new();
    while let Some(f) = host.take_frame() {
        sent.push(f);
    }
    (verdict, sent)
}

#[test]
fn the_templates_reach_what_they_aim_at() {
    // ARP request: answered with an ARP reply.
    let arp = link_template(0);
    let (verdict, sent) = answer_to(&arp, false);
    assert_eq!(verdict, Ingress::Host);
    assert!(sent.iter().any(|f| f[12..14] == [0x08, 0x06] && f[21] == 2), "{sent:02x?}");
    // TCP SYN to the listener: SYN-ACK.
    let syn = link_template(1);
    let (verdict, sent) = answer_to(&syn, true);
    assert_eq!(verdict, Ingress::Host);
    let syn_ack = sent.iter().find(|f| f[12..14] == [0x08, 0x00] && f[23] == 6).expect("a reply");
    assert_eq!(syn_ack[47] & 0x12, 0x12, "SYN and ACK set");
    // RoCE (UDP 4791): to the HCA, the whole IP packet.
    let roce = link_template(2);
    let (verdict, _) = answer_to(&roce, false);
    assert_eq!(verdict, Ingress::Roce(&roce[14..]));
    // Neighbour solicitation for the link-local address: an advertisement.
    let ns = link_template(3);
    let (verdict, sent) = answer_to(&ns, false);
    assert_eq!(verdict, Ingress::Host);
    assert!(sent.iter().any(|f| f[12..14] == [0x86, 0xdd] && f[54] == 136), "{sent:02x?}");
    // ICMP echo: a reply.
    let echo = link_template(4);
    let (verdict, sent) = answer_to(&echo, true);
    assert_eq!(verdict, Ingress::Host);
    assert!(sent.iter().any(|f| f[12..14] == [0x08, 0x00] && f[23] == 1 && f[34] == 0));
}

#[test]
fn an_empty_script_still_answers_arp() {
    link_frames(&[]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_as_a_link_script(data in vec(any::<u8>(), 0..4096)) {
        link_frames(&data);
    }

    /// Scripts of changed templates only: deeper into ARP, TCP, NDP and
    /// RoCE than random bytes get.
    #[test]
    fn changed_templates(ops in vec((any::<u8>(), any::<u16>(), any::<u8>(), any::<u8>()), 0..64)) {
        let mut data = Vec::new();
        for (which, at, value, time) in ops {
            data.push(1);
            data.push(which);
            data.extend_from_slice(&at.to_be_bytes());
            data.push(value);
            data.extend_from_slice(&[3, time]);
        }
        link_frames(&data);
    }
}
