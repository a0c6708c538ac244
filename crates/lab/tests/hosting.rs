//! The lab's hosting end to end: from `ue`, a DNS query crosses the emulated link to the
//! resolver in `edge`, which asks the authoritative server in `net`; then an HTTP request to
//! the answered address reaches the replay server.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use webpep_corpus::{CorpusWriter, Manifest, Object, Page, FORMAT_VERSION};
use webpep_lab::hosting::Hosting;
use webpep_lab::topology::{Topology, TopologyConfig};
use webpep_link::testing::netns_available;
use webpep_replay::{ReplayConfig, ReplayServer};

/// A minimal DNS A query for `name` (id 0x1234, recursion desired).
fn query(name: &str) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// The first A record of an answer (the answer's name is a compression pointer here).
fn first_a(resp: &[u8], qlen: usize) -> Option<(Ipv4Addr, u32)> {
    let ancount = u16::from_be_bytes([resp[6], resp[7]]);
    if ancount == 0 {
        return None;
    }
    let a = &resp[qlen..];
    // name (2-byte pointer), type, class, ttl, rdlength, rdata
    let ttl = u32::from_be_bytes([a[6], a[7], a[8], a[9]]);
    Some((Ipv4Addr::new(a[12], a[13], a[14], a[15]), ttl))
}

#[test]
fn ue_resolves_through_edge_and_fetches_from_net() {
    if !netns_available("ue_resolves_through_edge_and_fetches_from_net") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("webpep-hosting-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut w = CorpusWriter::create(&dir.join("corpus")).unwrap();
    let v = w
        .version(b"<html>hello</html>", "Mon, 01 Jan 2024 00:00:00 GMT")
        .unwrap();
    let corpus = w
        .finish(&Manifest {
            format_version: FORMAT_VERSION,
            name: "t".into(),
            description: String::new(),
            domains: vec!["www.hello.test".into()],
            pages: vec![Page {
                id: "hello".into(),
                url: "http://www.hello.test/".into(),
                source: "test".into(),
                captured_schemes: false,
                objects: vec![Object {
                    url: "http://www.hello.test/".into(),
                    content_type: "text/html".into(),
                    status: 200,
                    headers: vec![],
                    versions: vec![v],
                }],
            }],
        })
        .unwrap();
    let replay = ReplayServer::new(&corpus, ReplayConfig::default());
    let mut cfg = TopologyConfig::new(
        webpep_link_model::resolve("cdma-1x").unwrap(),
        replay.domains().to_vec(),
    );
    cfg.time_scale = 10.0;
    let topo = Topology::build(&cfg).unwrap();
    let hosting = Hosting::start(&topo, replay, 30, cfg.time_scale, &dir.join("ca")).unwrap();
    let resolver = hosting.resolver_addr;
    let (addr, ttl, body) = topo
        .ue
        .run(move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let q = query("www.hello.test");
            s.send_to(&q, resolver).unwrap();
            let mut buf = [0u8; 512];
            let n = s.recv(&mut buf).unwrap();
            let (addr, ttl) = first_a(&buf[..n], q.len()).expect("an A record");
            let mut t =
                TcpStream::connect_timeout(&SocketAddr::from((addr, 80)), Duration::from_secs(3))
                    .unwrap();
            t.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            t.write_all(b"GET / HTTP/1.1\r\nHost: www.hello.test\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut resp = Vec::new();
            t.read_to_end(&mut resp).unwrap();
            (addr, ttl, String::from_utf8_lossy(&resp).to_string())
        })
        .unwrap();
    assert_eq!(Some(&addr), topo.domains.get("www.hello.test"));
    assert_eq!(ttl, 3, "30 s TTL at time scale 10");
    assert!(
        body.starts_with("HTTP/1.1 200") && body.ends_with("<html>hello</html>"),
        "{body}"
    );
    assert_eq!(hosting.resolver.stats().upstream_queries, 1);
    assert!(dir.join("ca").join("ca.pem").exists());
    drop(hosting);
    drop(topo);
    let _ = std::fs::remove_dir_all(&dir);
}
