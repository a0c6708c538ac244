//! Loopback throughput of the rewriting DNS proxy and the cost of the pure rewriter.
//!
//! `cargo run --release -p webpep-dns --example dns_bench -- [SECONDS] [CLIENTS]`
//!
//! A minimal upstream (answers every A query with one record) runs in-process; CLIENTS tasks
//! each send one query at a time to the proxy (policy `all`) for SECONDS and the answers per
//! second and median latency are printed, then the same through a plain forwarder.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tokio::net::UdpSocket;
use webpep_dns::{
    rewrite_response, CancellationToken, DnsProxy, DnsProxyConfig, NameMatch, RewritePolicy,
};

fn answer_for(query: &Message) -> Option<Vec<u8>> {
    let q = query.queries().first()?.clone();
    let mut r = Message::new();
    r.set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_recursion_available(true);
    r.add_answer(Record::from_rdata(
        q.name().clone(),
        30,
        RData::A(A::new(192, 0, 2, 1)),
    ));
    r.add_query(q);
    r.to_vec().ok()
}

async fn upstream(cancel: CancellationToken) -> std::io::Result<SocketAddr> {
    let s = Arc::new(UdpSocket::bind("127.0.0.1:0").await?);
    let addr = s.local_addr()?;
    tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        loop {
            let (n, peer) = tokio::select! {
                _ = cancel.cancelled() => return,
                r = s.recv_from(&mut buf) => match r { Ok(x) => x, Err(_) => continue },
            };
            if let Some(bytes) = Message::from_vec(&buf[..n])
                .ok()
                .as_ref()
                .and_then(answer_for)
            {
                let _ = s.send_to(&bytes, peer).await;
            }
        }
    });
    Ok(addr)
}

fn query_bytes(id: u16, name: &Name) -> Vec<u8> {
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_recursion_desired(true);
    m.add_query(Query::query(name.clone(), RecordType::A));
    m.to_vec().unwrap_or_default()
}

async fn run(
    up: SocketAddr,
    policy: Option<RewritePolicy>,
    secs: u64,
    clients: usize,
) -> std::io::Result<()> {
    let label = if policy.is_some() {
        "rewrite all"
    } else {
        "forward"
    };
    let udp = std::net::UdpSocket::bind("127.0.0.1:0")?;
    let addr = udp.local_addr()?;
    let mut cfg = DnsProxyConfig::new(up);
    cfg.policy = policy;
    let proxy = Arc::new(DnsProxy::new(cfg));
    let cancel = CancellationToken::new();
    let server = tokio::spawn(proxy.clone().serve(Some(udp), None, cancel.clone()));
    let until = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for c in 0..clients {
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let Ok(s) = UdpSocket::bind("127.0.0.1:0").await else {
                return lat;
            };
            let mut buf = vec![0u8; 2048];
            let mut i = 0u16;
            while Instant::now() < until {
                i = i.wrapping_add(1);
                let name = Name::from_ascii(format!(
                    "www.site{}.example.",
                    (c * 1000) + usize::from(i % 1000)
                ))
                .unwrap_or_default();
                let t0 = Instant::now();
                if s.send_to(&query_bytes(i, &name), addr).await.is_err() {
                    continue;
                }
                if let Ok(Ok(_)) =
                    tokio::time::timeout(Duration::from_secs(1), s.recv_from(&mut buf)).await
                {
                    lat.push(t0.elapsed());
                }
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap_or_default());
    }
    cancel.cancel();
    let _ = server.await;
    lat.sort();
    let p50 = lat.get(lat.len() / 2).copied().unwrap_or_default();
    let p99 = lat.get(lat.len() * 99 / 100).copied().unwrap_or_default();
    println!(
        "{label:12} {clients} clients: {:.0} answers/s, p50 {:?}, p99 {:?} (stats {:?})",
        lat.len() as f64 / secs as f64,
        p50,
        p99,
        proxy.stats()
    );
    Ok(())
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let secs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let clients: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);

    // The pure rewriter on a typical answer.
    let policy = RewritePolicy::new(
        NameMatch::WwwPrefix,
        vec!["10.0.0.12".parse().unwrap_or([0, 0, 0, 0].into())],
    );
    let name = Name::from_ascii("www.foo.com.").unwrap_or_default();
    let q = Message::from_vec(&query_bytes(1, &name)).map_err(std::io::Error::other)?;
    let resp = answer_for(&q).unwrap_or_default();
    let n = 200_000;
    let t0 = Instant::now();
    let mut rewritten = 0;
    for _ in 0..n {
        if let Ok(Some(_)) = rewrite_response(std::hint::black_box(&resp), &policy) {
            rewritten += 1;
        }
    }
    println!(
        "rewrite_response: {:?} per answer ({rewritten} of {n} rewritten)",
        t0.elapsed() / n
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let cancel = CancellationToken::new();
        let up = upstream(cancel.clone()).await?;
        run(
            up,
            Some(RewritePolicy::new(
                NameMatch::All,
                vec!["10.0.0.12".parse().unwrap_or([0, 0, 0, 0].into())],
            )),
            secs,
            clients,
        )
        .await?;
        run(up, None, secs, clients).await?;
        cancel.cancel();
        Ok(())
    })
}
