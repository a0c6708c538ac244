//! Fuzzes the DNS rewriting core (`webpep_dns::rewrite_response`) with arbitrary bytes as the
//! upstream answer: it must never panic, and whatever it rewrites must be a well-formed
//! response to the same question with the proxy's addresses first and (with fallback) every
//! original address after them.

#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use webpep_dns::hickory_proto::op::{Message, MessageType};
use webpep_dns::hickory_proto::rr::{RData, RecordType};
use webpep_dns::{rewrite_response, NameMatch, RewritePolicy};

fn addrs(m: &Message) -> Vec<IpAddr> {
    m.answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let proxy: Vec<IpAddr> = vec![
        "10.0.0.12".parse().unwrap(),
        "10.0.0.13".parse().unwrap(),
        "fd00::12".parse().unwrap(),
    ];
    // The first byte picks the policy, so that every kind of matching is exercised.
    let (choice, packet) = match data.split_first() {
        Some((c, rest)) => (*c, rest),
        None => (0, data),
    };
    let names = match choice % 3 {
        0 => NameMatch::All,
        1 => NameMatch::WwwPrefix,
        _ => NameMatch::List(vec!["*.com".into(), "a.b".into()]),
    };
    let mut policy = RewritePolicy::new(names, proxy.clone());
    policy.keep_original = choice & 0x80 == 0;
    policy.keep_origin_ttl = choice & 0x40 != 0;
    policy.ttl = u32::from(choice);

    let Ok(Some(out)) = rewrite_response(packet, &policy) else {
        return;
    };
    let original = Message::from_vec(packet).expect("rewritten implies the input parsed");
    let rewritten = Message::from_vec(&out).expect("the rewritten answer must parse");
    assert_eq!(rewritten.message_type(), MessageType::Response);
    assert_eq!(rewritten.id(), original.id());
    assert_eq!(rewritten.queries(), original.queries());
    let got = addrs(&rewritten);
    let family: Vec<IpAddr> = proxy
        .iter()
        .copied()
        .filter(|a| got.first().is_some_and(|g| g.is_ipv4() == a.is_ipv4()))
        .collect();
    assert!(!family.is_empty());
    assert_eq!(
        &got[..family.len()],
        &family[..],
        "the proxy's addresses come first"
    );
    for r in &rewritten.answers()[..family.len()] {
        assert_eq!(r.ttl(), policy.ttl);
    }
    if !policy.keep_origin_ttl {
        // One TTL for the whole answer (RFC 2181 §5.2).
        assert!(rewritten.answers().iter().all(|r| r.ttl() == policy.ttl));
    }
    // One address RRset owned by the queried name: no CNAME beside it (RFC 1034 §3.6.2).
    let q = &original.queries()[0];
    for r in rewritten.answers() {
        assert_eq!(r.record_type(), q.query_type());
        assert!(
            r.name().eq_case(q.name()),
            "{} owned by the queried name",
            r.name()
        );
    }
    if policy.keep_original {
        for a in addrs(&original) {
            let asked = a.is_ipv4() == (q.query_type() == RecordType::A);
            assert!(!asked || got.contains(&a), "original address {a} kept");
        }
    } else {
        assert_eq!(rewritten.answers().len(), family.len());
    }
});
