//! `webpep lab transport-bench` end to end in the lab's namespaces: webpep's QUIC transport
//! (enrolled client, link-aware controller) and TCP both carry every byte over the emulated
//! link, from a cold connection and on an open one, and beside a bulk transfer one way and both
//! ways, and the report holds each measurement. Short: cdma-1x at time scale 10, 100 KB.

use webpep_lab::transport_bench::{run, Transport, TransportBenchOptions};
use webpep_link::testing::netns_available;
use webpep_link_model::resolve;

#[test]
fn quic_and_tcp_carry_every_byte_over_the_emulated_link() {
    if !netns_available("quic_and_tcp_carry_every_byte_over_the_emulated_link") {
        return;
    }
    let opts = TransportBenchOptions {
        profile: resolve("cdma-1x").unwrap(),
        time_scale: 10.0,
        seed: 1,
        sizes: vec![100_000],
        bulk_bytes: 200_000,
        small_bytes: 1000,
        bulk_up_bytes: 20_000,
        warm_up_bytes: 20_000,
        transports: vec![Transport::QuicWebpep, Transport::TcpCubic],
    };
    let report = run(&opts).expect("bench");
    print!("{}", report.table());
    // Each transport: the cold transfer, and the same size on an open connection.
    assert_eq!(report.transfers.len(), 4);
    for transport in [Transport::QuicWebpep, Transport::TcpCubic] {
        let open: Vec<bool> = report
            .transfers
            .iter()
            .filter(|t| t.transport == transport)
            .map(|t| t.open)
            .collect();
        assert_eq!(open, [false, true], "{transport:?}");
    }
    for t in &report.transfers {
        // 100 KB over 78 kbit/s takes at least its serialization time (10 s unscaled).
        assert!(t.seconds >= 100_000.0 * 8.0 / 78_000.0 * 0.95, "{t:?}");
        assert!(t.goodput_share > 0.2 && t.goodput_share <= 1.05, "{t:?}");
        // What crossed the link: the payload and its headers, never more than the link's rate.
        assert!(t.air_down_bytes > t.bytes, "{t:?}");
        assert!(
            t.link_busy_share >= t.goodput_share && t.link_busy_share <= 1.05,
            "{t:?}"
        );
    }
    assert_eq!(report.small.len(), 2);
    for m in &report.small {
        assert!(m.idle_ms > 0.0 && m.beside_bulk_ms > 0.0, "{m:?}");
        // Beside the bulk transfer both ways (it also uploads 20 KB).
        assert!(m.beside_both_ms.is_some_and(|b| b > 0.0), "{m:?}");
    }
}
