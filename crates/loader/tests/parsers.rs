//! Arbitrary input never panics the parsers (HTML, CSS, srcset, HTTP heads and bodies, DNS).

use bytes::BytesMut;
use proptest::prelude::*;
use url::Url;
use webpep_loader::discover::{scan_css, HtmlScanner};
use webpep_loader::dns::parse_reply;
use webpep_loader::h1::{framing, parse_head, BodyDecoder, Framing};

fn base() -> Url {
    Url::parse("http://www.test/a/b.html").expect("static URL")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn css(s in "\\PC{0,200}", t in "[ url()@import'\"\\\\/*;,{}a-z0-9.é#&x]{0,120}") {
        // srcset and character references: webpep-discover's own property tests.
        let _ = scan_css(&s, &base());
        let _ = scan_css(&t, &base());
    }

    #[test]
    fn html_in_pieces(doc in proptest::collection::vec(any::<u8>(), 0..600), cut in 0usize..600,
                      tags in "(<img src=[a-z.é]{0,8}>|<link rel=stylesheet href=x>|<style>[a-z(){}:]{0,20}|<base href=[/a-z]{0,6}>|[<>=\"' a-z]){0,30}") {
        let mut s = HtmlScanner::new(base());
        let cut = cut.min(doc.len());
        let _ = s.feed(&doc[..cut]);
        let _ = s.feed(tags.as_bytes());
        let _ = s.feed(&doc[cut..]);
        let _ = s.finish();
    }

    #[test]
    fn http_heads_and_bodies(raw in proptest::collection::vec(any::<u8>(), 0..400),
                             head in "HTTP/1\\.[01] [0-9]{3} [A-Za-z ]{0,5}\r\n((Content-Length|Transfer-Encoding|Connection): [a-z0-9, ]{0,10}\r\n){0,3}\r\n",
                             body in "([0-9a-fA-F]{1,3}(;[a-z=]{0,4})?\r\n[a-z]{0,20}\r\n){0,4}(0\r\n\r\n)?") {
        let _ = parse_head(&raw, 1024);
        if let Ok(Some(h)) = parse_head(head.as_bytes(), 1024) {
            let _ = h.keep_alive();
            if let Ok(f) = framing(&h, "GET") {
                let mut d = BodyDecoder::new(f);
                let mut buf = BytesMut::from(body.as_bytes());
                let _ = d.decode(&mut buf, &mut |_| {});
                let _ = d.complete_at_eof();
            }
        }
        for f in [Framing::Chunked, Framing::Length(50), Framing::UntilClose, Framing::None] {
            let mut d = BodyDecoder::new(f);
            for piece in raw.chunks(7) {
                let mut buf = BytesMut::from(piece);
                if d.decode(&mut buf, &mut |_| {}).is_err() {
                    break;
                }
            }
        }
    }

    #[test]
    fn dns_replies(raw in proptest::collection::vec(any::<u8>(), 0..300), id in any::<u16>()) {
        let _ = parse_reply(&raw, id, "www.test");
    }
}
