//! The pure core of DNS rewriting (002 §3.2, §5.3.2): no I/O, so it is unit-tested and fuzzed.
//!
//! What is rewritten, and why:
//! - only a successful (NOERROR, not truncated) answer to a single IN A or AAAA question whose
//!   name matches the policy, and only when the policy has an address of that family;
//! - only when the upstream answer holds at least one address of the asked type. A name that
//!   does not exist (NXDOMAIN) or has no address of that family (NODATA) is left alone: the
//!   proxy must not make names resolve that do not, and a client that gets a proxy-only AAAA
//!   for an IPv4-only site gains nothing over the A answer, which is rewritten anyway;
//! - everything else (other types, other names, errors) is forwarded byte for byte.
//!
//! A rewritten answer is one address RRset owned by the queried name: the proxy's addresses
//! first, with the policy's long TTL, then (with `keep_original`) the origin's addresses of the
//! asked type, which a client that cannot reach the proxy falls back to (002 §5). They carry
//! the long TTL too (unless `keep_origin_ttl`): clients cache an answer for its lowest TTL
//! (RFC 2181 §5.2), so one short TTL left in it would undo the long one.
//! When the queried name is an alias, the upstream's CNAME chain is flattened: the addresses at
//! its end are re-owned by the queried name and the CNAMEs dropped, since a name that owns a
//! CNAME may own no other data (RFC 1034 §3.6.2) and the proxy's address must be owned by the
//! queried name. With `keep_origin_ttl` a flattened address keeps the lowest TTL along its
//! chain, as the chain would have expired with it.

use std::net::IpAddr;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};

use crate::error::DnsError;
use crate::policy::RewritePolicy;

/// Rewrites one upstream answer (wire format) under `policy`.
///
/// `Ok(Some(bytes))`: the rewritten answer (same ID; the AD bit cleared, since the data is no
/// longer what was validated). `Ok(None)`: forward the original unchanged. `Err`: not a
/// well-formed DNS response.
pub fn rewrite_response(
    response: &[u8],
    policy: &RewritePolicy,
) -> Result<Option<Vec<u8>>, DnsError> {
    let msg = Message::from_vec(response).map_err(|e| DnsError::Malformed(e.to_string()))?;
    if msg.message_type() != MessageType::Response {
        return Err(DnsError::Malformed("not a response".into()));
    }
    let Some(mut out) = rewritten(msg, policy) else {
        return Ok(None);
    };
    out.set_authentic_data(false);
    let bytes = out.to_vec().map_err(|e| DnsError::Encode(e.to_string()))?;
    Ok(Some(bytes))
}

/// The rewritten message, or `None` when `msg` is not one to rewrite.
fn rewritten(mut msg: Message, policy: &RewritePolicy) -> Option<Message> {
    if msg.op_code() != OpCode::Query
        || msg.response_code() != ResponseCode::NoError
        || msg.truncated()
        || msg.queries().len() != 1
    {
        return None;
    }
    let q = msg.queries()[0].clone();
    let qtype = q.query_type();
    if q.query_class() != DNSClass::IN || !matches!(qtype, RecordType::A | RecordType::AAAA) {
        return None;
    }
    if !policy.names.matches(&q.name().to_ascii()) {
        return None;
    }
    let proxy: Vec<RData> = if qtype == RecordType::A {
        policy.v4_addrs().map(|a| RData::A(A(a))).collect()
    } else {
        policy.v6_addrs().map(|a| RData::AAAA(AAAA(a))).collect()
    };
    if proxy.is_empty() || !msg.answers().iter().any(|r| r.record_type() == qtype) {
        return None;
    }
    let originals = msg.take_answers();
    let mut answers: Vec<Record> = Vec::with_capacity(proxy.len() + originals.len());
    for rdata in &proxy {
        answers.push(Record::from_rdata(
            q.name().clone(),
            policy.ttl,
            rdata.clone(),
        ));
    }
    if policy.keep_original {
        let chain_ttl = originals
            .iter()
            .filter(|r| r.record_type() == RecordType::CNAME)
            .map(Record::ttl)
            .min()
            .unwrap_or(u32::MAX);
        // The proxy's own address, if the origin happens to have it, is listed once.
        answers.extend(
            originals
                .into_iter()
                .filter(|r| r.record_type() == qtype && !proxy.contains(r.data()))
                .map(|r| {
                    let ttl = if policy.keep_origin_ttl {
                        r.ttl().min(chain_ttl)
                    } else {
                        policy.ttl
                    };
                    Record::from_rdata(q.name().clone(), ttl, r.data().clone())
                }),
        );
    }
    msg.insert_answers(answers);
    Some(msg)
}

/// The addresses of an answer's A and AAAA records, in order (for tests and the stub resolver).
pub(crate) fn addresses(msg: &Message) -> Vec<IpAddr> {
    msg.answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::NameMatch;
    use hickory_proto::op::Query;
    use hickory_proto::rr::rdata::{CNAME, MX, SOA};
    use hickory_proto::rr::Name;

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn response(qname: &str, qtype: RecordType, answers: Vec<Record>) -> Message {
        let mut m = Message::new();
        m.set_id(0x1234)
            .set_message_type(MessageType::Response)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .set_recursion_available(true);
        m.add_query(Query::query(name(qname), qtype));
        m.add_answers(answers);
        m
    }

    fn a(owner: &str, ttl: u32, ip: &str) -> Record {
        Record::from_rdata(name(owner), ttl, RData::A(A(ip.parse().unwrap())))
    }

    fn aaaa(owner: &str, ttl: u32, ip: &str) -> Record {
        Record::from_rdata(name(owner), ttl, RData::AAAA(AAAA(ip.parse().unwrap())))
    }

    fn policy(names: NameMatch) -> RewritePolicy {
        RewritePolicy::new(
            names,
            vec!["10.0.0.12".parse().unwrap(), "fd00::12".parse().unwrap()],
        )
    }

    /// (owner, ttl, address) of each address answer, and the CNAMEs as (owner, ttl, target).
    fn summary(bytes: &[u8]) -> Vec<(String, u32, String)> {
        let m = Message::from_vec(bytes).unwrap();
        m.answers()
            .iter()
            .map(|r| {
                let v = match r.data() {
                    RData::A(a) => a.0.to_string(),
                    RData::AAAA(a) => a.0.to_string(),
                    RData::CNAME(c) => format!("CNAME {}", c.0),
                    other => format!("{other:?}"),
                };
                (r.name().to_ascii(), r.ttl(), v)
            })
            .collect()
    }

    /// www.foo.com is a CNAME (TTL 300) for foo.cdn.net, whose address has TTL 20.
    fn cname_response() -> Message {
        response(
            "www.foo.com.",
            RecordType::A,
            vec![
                Record::from_rdata(
                    name("www.foo.com."),
                    300,
                    RData::CNAME(CNAME(name("foo.cdn.net."))),
                ),
                a("foo.cdn.net.", 20, "198.51.100.7"),
            ],
        )
    }

    fn row(owner: &str, ttl: u32, v: &str) -> (String, u32, String) {
        (owner.into(), ttl, v.into())
    }

    #[test]
    fn a_answer_gets_the_proxy_first_then_the_originals() {
        let resp = response(
            "www.foo.com.",
            RecordType::A,
            vec![
                a("www.foo.com.", 10, "193.123.25.10"),
                a("www.foo.com.", 10, "193.123.25.11"),
            ],
        );
        let out = rewrite_response(&resp.to_vec().unwrap(), &policy(NameMatch::WwwPrefix))
            .unwrap()
            .expect("rewritten");
        assert_eq!(
            summary(&out),
            vec![
                row("www.foo.com.", 86_400, "10.0.0.12"),
                row("www.foo.com.", 86_400, "193.123.25.10"),
                row("www.foo.com.", 86_400, "193.123.25.11"),
            ]
        );
        let m = Message::from_vec(&out).unwrap();
        assert_eq!(m.id(), 0x1234);
        assert_eq!(m.queries(), resp.queries());
    }

    #[test]
    fn aaaa_answer_gets_the_proxy_v6_address_with_the_policy_ttl() {
        let resp = response(
            "www.foo.com.",
            RecordType::AAAA,
            vec![aaaa("www.foo.com.", 30, "2001:db8::1")],
        );
        let mut p = policy(NameMatch::All);
        p.ttl = 3600;
        let out = rewrite_response(&resp.to_vec().unwrap(), &p)
            .unwrap()
            .unwrap();
        assert_eq!(
            summary(&out),
            vec![
                row("www.foo.com.", 3600, "fd00::12"),
                row("www.foo.com.", 3600, "2001:db8::1")
            ]
        );
    }

    #[test]
    fn without_fallback_only_the_proxy_is_left() {
        let resp = response(
            "www.foo.com.",
            RecordType::A,
            vec![a("www.foo.com.", 10, "193.123.25.10")],
        );
        let mut p = policy(NameMatch::All);
        p.keep_original = false;
        let out = rewrite_response(&resp.to_vec().unwrap(), &p)
            .unwrap()
            .unwrap();
        assert_eq!(
            summary(&out),
            vec![row("www.foo.com.", 86_400, "10.0.0.12")]
        );
    }

    #[test]
    fn a_cname_chain_is_flattened_onto_the_queried_name() {
        let resp = cname_response().to_vec().unwrap();
        // The whole answer gets the long TTL, unless the origins' own are asked for (002
        // Fig. 3 as drawn: a client caching for the lowest TTL then asks again after 20 s).
        // Either way the alias owns no CNAME beside the proxy's address (RFC 1034 §3.6.2).
        let mut p = policy(NameMatch::All);
        for (keep, addr_ttl) in [(false, 86_400), (true, 20)] {
            p.keep_origin_ttl = keep;
            let out = rewrite_response(&resp, &p).unwrap().unwrap();
            assert_eq!(
                summary(&out),
                vec![
                    row("www.foo.com.", 86_400, "10.0.0.12"),
                    row("www.foo.com.", addr_ttl, "198.51.100.7"),
                ]
            );
        }
        // A chain link that expires first bounds the flattened address's own TTL.
        let short_link = response(
            "www.foo.com.",
            RecordType::A,
            vec![
                Record::from_rdata(
                    name("www.foo.com."),
                    5,
                    RData::CNAME(CNAME(name("foo.cdn.net."))),
                ),
                a("foo.cdn.net.", 20, "198.51.100.7"),
            ],
        );
        let out = rewrite_response(&short_link.to_vec().unwrap(), &p)
            .unwrap()
            .unwrap();
        assert_eq!(summary(&out)[1], row("www.foo.com.", 5, "198.51.100.7"));
    }

    #[test]
    fn proxy_address_already_in_the_answer_is_listed_once() {
        let resp = response(
            "www.foo.com.",
            RecordType::A,
            vec![
                a("www.foo.com.", 10, "10.0.0.12"),
                a("www.foo.com.", 10, "192.0.2.1"),
            ],
        );
        let out = rewrite_response(&resp.to_vec().unwrap(), &policy(NameMatch::All))
            .unwrap()
            .unwrap();
        assert_eq!(
            summary(&out),
            vec![
                row("www.foo.com.", 86_400, "10.0.0.12"),
                row("www.foo.com.", 86_400, "192.0.2.1")
            ]
        );
    }

    #[test]
    fn left_alone_non_matching_name_other_type_errors_nodata() {
        let p = policy(NameMatch::WwwPrefix);
        let other = response(
            "img.foo.com.",
            RecordType::A,
            vec![a("img.foo.com.", 10, "192.0.2.1")],
        );
        assert_eq!(
            rewrite_response(&other.to_vec().unwrap(), &p).unwrap(),
            None
        );

        let mx = response(
            "www.foo.com.",
            RecordType::MX,
            vec![Record::from_rdata(
                name("www.foo.com."),
                10,
                RData::MX(MX::new(10, name("mx.foo.com."))),
            )],
        );
        assert_eq!(rewrite_response(&mx.to_vec().unwrap(), &p).unwrap(), None);

        let mut nx = response("www.nowhere.com.", RecordType::A, vec![]);
        nx.set_response_code(ResponseCode::NXDomain);
        let soa = SOA::new(
            name("ns.nowhere.com."),
            name("h.nowhere.com."),
            1,
            1,
            1,
            1,
            60,
        );
        nx.add_name_server(Record::from_rdata(
            name("nowhere.com."),
            60,
            RData::SOA(soa),
        ));
        assert_eq!(rewrite_response(&nx.to_vec().unwrap(), &p).unwrap(), None);

        let mut servfail = response("www.foo.com.", RecordType::A, vec![]);
        servfail.set_response_code(ResponseCode::ServFail);
        assert_eq!(
            rewrite_response(&servfail.to_vec().unwrap(), &p).unwrap(),
            None
        );

        // NODATA: the name exists but has no A record.
        let nodata = response("www.foo.com.", RecordType::A, vec![]);
        assert_eq!(
            rewrite_response(&nodata.to_vec().unwrap(), &p).unwrap(),
            None
        );

        // An AAAA answer with only an IPv4 proxy address: unchanged.
        let v4only = RewritePolicy::new(NameMatch::All, vec!["10.0.0.12".parse().unwrap()]);
        let six = response(
            "www.foo.com.",
            RecordType::AAAA,
            vec![aaaa("www.foo.com.", 30, "2001:db8::1")],
        );
        assert_eq!(
            rewrite_response(&six.to_vec().unwrap(), &v4only).unwrap(),
            None
        );

        // Truncated: the client retries over TCP and gets the rewritten full answer there.
        let mut tc = response(
            "www.foo.com.",
            RecordType::A,
            vec![a("www.foo.com.", 10, "192.0.2.1")],
        );
        tc.set_truncated(true);
        assert_eq!(rewrite_response(&tc.to_vec().unwrap(), &p).unwrap(), None);
    }

    #[test]
    fn malformed_and_queries_are_errors() {
        assert!(rewrite_response(&[], &policy(NameMatch::All)).is_err());
        assert!(rewrite_response(&[0xff; 7], &policy(NameMatch::All)).is_err());
        let mut q = response("www.foo.com.", RecordType::A, vec![]);
        q.set_message_type(MessageType::Query);
        assert!(rewrite_response(&q.to_vec().unwrap(), &policy(NameMatch::All)).is_err());
    }

    #[test]
    fn authentic_data_bit_is_cleared() {
        let mut resp = response(
            "www.foo.com.",
            RecordType::A,
            vec![a("www.foo.com.", 10, "192.0.2.1")],
        );
        resp.set_authentic_data(true);
        let out = rewrite_response(&resp.to_vec().unwrap(), &policy(NameMatch::All))
            .unwrap()
            .unwrap();
        assert!(!Message::from_vec(&out).unwrap().authentic_data());
        assert_eq!(addresses(&Message::from_vec(&out).unwrap()).len(), 2);
    }
}
