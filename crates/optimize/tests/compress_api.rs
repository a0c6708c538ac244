//! Tests of `webpep_optimize::compress`: negotiation, round trips, bomb-safe decoding, Vary,
//! ETag weakening and the skip rules of `compress_response`.

use std::io::Write;

use http::header::{
    HeaderMap, HeaderValue, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, ETAG, VARY,
};
use proptest::prelude::*;
use webpep_optimize::compress::{
    add_vary, compress_response, decode, encode, is_compressible, negotiate, Coding,
    CompressConfig, CompressError,
};

fn cfg() -> CompressConfig {
    CompressConfig::default()
}

/// A page-like text body that compresses well.
fn sample_html(n: usize) -> Vec<u8> {
    let mut s = String::from("<!DOCTYPE html><html><head><title>News</title></head><body>\n");
    for i in 0..n {
        s.push_str(&format!(
            "<div class=\"story\"><a href=\"/news/{i}.html\">Story number {i}</a> \
             <p>The quick brown fox jumps over the lazy dog, item {}.</p></div>\n",
            i * 7 % 13
        ));
    }
    s.push_str("</body></html>\n");
    s.into_bytes()
}

#[test]
fn negotiation_table() {
    use Coding::*;
    let c = cfg();
    let cases: &[(Option<&str>, Coding)] = &[
        (None, Identity),
        (Some(""), Identity),
        (Some("gzip"), Gzip),
        (Some("x-gzip"), Gzip),
        (Some("GZIP"), Gzip),
        (Some("gzip, deflate"), Gzip),
        (Some("gzip, deflate, br"), Br),
        (Some("gzip, deflate, br, zstd"), Br),
        (Some("zstd, gzip"), Zstd),
        (Some("br;q=0, gzip"), Gzip),
        (Some("br;q=0.5, gzip;q=0.8"), Gzip),
        (Some("br;q=0.8, gzip;q=0.8"), Br),
        (Some("br ; q=0.9 , gzip;q=1"), Gzip),
        (Some("*"), Br),
        (Some("*;q=0.1, br;q=0"), Zstd),
        (Some("*;q=0"), Identity),
        (Some("identity"), Identity),
        (Some("identity;q=0"), Identity),
        (Some("identity;q=0, gzip;q=0.1"), Gzip),
        (Some("gzip;q=0.5, identity"), Identity),
        (Some("gzip, identity;q=0.5"), Gzip),
        (Some("deflate"), Identity),
        (Some("compress, deflate"), Identity),
        // Garbage: elements that do not parse are ignored, the rest still count.
        (Some(";;;,,,"), Identity),
        (Some("gzip;q=abc"), Identity),
        (Some("gzip;q=2"), Identity),
        (Some("gzip;q=abc, br"), Br),
        (Some("g zip, br;q=0.3"), Br),
        (Some("\u{1F600}, gzip"), Gzip),
        (Some("br;q=0.0001"), Identity),
        (Some("br;q=0.001"), Br), // identity, unweighted, does not compete
        (Some("br;q=0.001, identity;q=0.002"), Identity),
        (Some("br;q=0.001, identity;q=0"), Br),
    ];
    for (header, want) in cases {
        assert_eq!(negotiate(*header, &c), *want, "Accept-Encoding: {header:?}");
    }
}

#[test]
fn negotiation_honours_enabled_codings_and_their_order() {
    let only_gzip = CompressConfig {
        codings: vec![Coding::Gzip],
        ..cfg()
    };
    assert_eq!(negotiate(Some("br, zstd, gzip"), &only_gzip), Coding::Gzip);
    assert_eq!(negotiate(Some("br, zstd"), &only_gzip), Coding::Identity);
    let zstd_first = CompressConfig {
        codings: vec![Coding::Zstd, Coding::Br, Coding::Gzip],
        ..cfg()
    };
    assert_eq!(negotiate(Some("gzip, br, zstd"), &zstd_first), Coding::Zstd);
    let none = CompressConfig {
        codings: vec![],
        ..cfg()
    };
    assert_eq!(negotiate(Some("gzip, br, zstd"), &none), Coding::Identity);
}

#[test]
fn tokens_round_trip() {
    for c in [Coding::Identity, Coding::Gzip, Coding::Br, Coding::Zstd] {
        assert_eq!(Coding::from_token(c.token()), Some(c));
        assert_eq!(Coding::from_token(&c.token().to_uppercase()), Some(c));
    }
    assert_eq!(Coding::from_token("x-gzip"), Some(Coding::Gzip));
    assert_eq!(Coding::from_token("deflate"), None);
    assert_eq!(Coding::from_token(""), None);
}

#[test]
fn compressible_types() {
    let yes = [
        "text/html",
        "text/html; charset=utf-8",
        "TEXT/CSS",
        "text/plain",
        "application/javascript",
        "text/javascript",
        "application/json",
        "application/ld+json",
        "application/manifest+json",
        "application/xml",
        "application/rss+xml",
        "application/xhtml+xml",
        "image/svg+xml",
        "application/wasm",
        "font/ttf",
        "font/otf",
        "application/vnd.ms-fontobject",
        "image/x-icon",
        "image/bmp",
    ];
    let no = [
        "image/jpeg",
        "image/png",
        "image/gif",
        "image/webp",
        "image/avif",
        "audio/mpeg",
        "video/mp4",
        "application/zip",
        "application/gzip",
        "application/x-gzip",
        "application/octet-stream",
        "application/pdf",
        "font/woff",
        "font/woff2",
        "application/font-woff",
        "text/event-stream",
        "",
        "garbage",
    ];
    for t in yes {
        assert!(is_compressible(Some(t)), "{t} should be compressible");
    }
    for t in no {
        assert!(!is_compressible(Some(t)), "{t} should not be compressible");
    }
    assert!(!is_compressible(None));
}

#[test]
fn every_coding_round_trips_and_shrinks_text() {
    let body = sample_html(200);
    for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
        let enc = encode(&body, coding, &cfg());
        assert!(
            enc.len() * 4 < body.len(),
            "{coding:?}: {} → {}",
            body.len(),
            enc.len()
        );
        let dec = decode(&enc, coding.token(), body.len()).expect("decodes");
        assert_eq!(dec, body, "{coding:?}");
    }
    assert_eq!(encode(&body, Coding::Identity, &cfg()), body);
}

#[test]
fn out_of_range_levels_are_clamped_not_fatal() {
    let wild = CompressConfig {
        brotli_quality: 99,
        gzip_level: 99,
        zstd_level: 1000,
        ..cfg()
    };
    let body = sample_html(20);
    for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
        let enc = encode(&body, coding, &wild);
        assert_eq!(
            decode(&enc, coding.token(), 1 << 20).expect("decodes"),
            body
        );
    }
    let negative = CompressConfig {
        zstd_level: -50,
        ..cfg()
    };
    let enc = encode(&body, Coding::Zstd, &negative);
    assert_eq!(decode(&enc, "zstd", 1 << 20).expect("decodes"), body);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn round_trip_any_bytes(body in proptest::collection::vec(any::<u8>(), 0..4096), which in 0usize..3) {
        let coding = [Coding::Gzip, Coding::Br, Coding::Zstd][which];
        let fast = CompressConfig { brotli_quality: 5, gzip_level: 6, zstd_level: 3, ..cfg() };
        let enc = encode(&body, coding, &fast);
        let dec = decode(&enc, coding.token(), body.len()).expect("decodes");
        prop_assert_eq!(dec, body);
    }

    #[test]
    fn decode_never_panics_on_garbage(body in proptest::collection::vec(any::<u8>(), 0..2048), which in 0usize..5) {
        let coding = ["gzip", "deflate", "br", "zstd", "gzip, br"][which];
        let _ = decode(&body, coding, 64 * 1024);
    }
}

#[test]
fn deflate_accepts_zlib_and_raw() {
    let body = sample_html(50);
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&body).unwrap();
    let zlib = z.finish().unwrap();
    let mut r = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    r.write_all(&body).unwrap();
    let raw = r.finish().unwrap();
    assert_eq!(decode(&zlib, "deflate", 1 << 20).unwrap(), body);
    assert_eq!(decode(&raw, "deflate", 1 << 20).unwrap(), body);
}

#[test]
fn stacked_codings_are_undone_last_first() {
    let body = sample_html(30);
    // "Content-Encoding: gzip, br" means gzip was applied first, then br.
    let once = encode(&body, Coding::Gzip, &cfg());
    let twice = encode(&once, Coding::Br, &cfg());
    assert_eq!(decode(&twice, "gzip, br", 1 << 20).unwrap(), body);
    assert!(decode(&twice, "br, gzip", 1 << 20).is_err());
    assert_eq!(decode(&body, "identity", 1 << 20).unwrap(), body);
    assert_eq!(decode(&body, "", 1 << 20).unwrap(), body);
    assert_eq!(decode(&once, " GZIP ", 1 << 20).unwrap(), body);
    assert_eq!(decode(&once, "x-gzip", 1 << 20).unwrap(), body);
}

#[test]
fn multi_member_gzip_is_concatenated() {
    let a = encode(b"hello ", Coding::Gzip, &cfg());
    let b = encode(b"world", Coding::Gzip, &cfg());
    let both = [a, b].concat();
    assert_eq!(decode(&both, "gzip", 100).unwrap(), b"hello world");
}

#[test]
fn unknown_coding_is_unsupported() {
    assert!(matches!(
        decode(b"abc", "compress", 100),
        Err(CompressError::Unsupported(c)) if c == "compress"
    ));
}

#[test]
fn output_limit_is_exact() {
    let body = vec![b'a'; 1000];
    for coding in [Coding::Identity, Coding::Gzip, Coding::Br, Coding::Zstd] {
        let enc = encode(&body, coding, &cfg());
        assert_eq!(
            decode(&enc, coding.token(), 1000).unwrap().len(),
            1000,
            "{coding:?}"
        );
        assert!(
            matches!(
                decode(&enc, coding.token(), 999),
                Err(CompressError::TooLarge { limit: 999 })
            ),
            "{coding:?}"
        );
    }
}

#[test]
fn bombs_stop_at_the_limit() {
    // 10 MB of zeros per coding; decoding with a 1 MB limit must stop early.
    let zeros = vec![0u8; 10 * 1024 * 1024];
    let fast = CompressConfig {
        brotli_quality: 5,
        zstd_level: 3,
        gzip_level: 6,
        ..cfg()
    };
    for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
        let bomb = encode(&zeros, coding, &fast);
        assert!(
            bomb.len() < 64 * 1024,
            "{coding:?} bomb is {} bytes",
            bomb.len()
        );
        // The limit, not the input's 10 MB, ends decoding: the error names the limit. (How
        // fast is for the benches; a shared machine cannot bound it.)
        let r = decode(&bomb, coding.token(), 1024 * 1024);
        assert!(
            matches!(r, Err(CompressError::TooLarge { limit: 1_048_576 })),
            "{coding:?}: {r:?}"
        );
    }
}

#[test]
fn truncated_and_corrupt_inputs_are_errors() {
    let body = sample_html(100);
    for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
        let enc = encode(&body, coding, &cfg());
        for cut in [1, enc.len() / 2, enc.len() - 1] {
            let r = decode(&enc[..cut], coding.token(), 1 << 20);
            assert!(
                matches!(r, Err(CompressError::Corrupt { .. })),
                "{coding:?} cut at {cut}: {r:?}"
            );
        }
        let mut flipped = enc.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0xff;
        flipped[mid + 1] ^= 0x55;
        // A flipped byte must never yield the original body silently.
        if let Ok(out) = decode(&flipped, coding.token(), 1 << 20) {
            assert_ne!(out, body, "{coding:?}: corruption went unnoticed");
        }
    }
    for coding in ["gzip", "br", "zstd", "deflate"] {
        assert!(
            decode(b"this is not compressed at all", coding, 1 << 20).is_err(),
            "{coding}"
        );
    }
    assert!(decode(&[], "gzip", 100).is_err());
}

fn vary_values(h: &HeaderMap) -> Vec<String> {
    h.get_all(VARY)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

#[test]
fn vary_merging() {
    let mut h = HeaderMap::new();
    add_vary(&mut h, "Accept-Encoding");
    assert_eq!(vary_values(&h), ["Accept-Encoding"]);
    add_vary(&mut h, "accept-encoding");
    assert_eq!(vary_values(&h), ["Accept-Encoding"]);

    let mut h = HeaderMap::new();
    h.append(VARY, HeaderValue::from_static("Cookie"));
    h.append(
        VARY,
        HeaderValue::from_static("User-Agent, ACCEPT-ENCODING"),
    );
    add_vary(&mut h, "Accept-Encoding");
    assert_eq!(vary_values(&h), ["Cookie", "User-Agent, ACCEPT-ENCODING"]);

    let mut h = HeaderMap::new();
    h.append(VARY, HeaderValue::from_static("Cookie"));
    h.append(VARY, HeaderValue::from_static("User-Agent"));
    add_vary(&mut h, "Accept-Encoding");
    assert_eq!(vary_values(&h), ["Cookie, User-Agent, Accept-Encoding"]);

    let mut h = HeaderMap::new();
    h.insert(VARY, HeaderValue::from_static("*"));
    add_vary(&mut h, "Accept-Encoding");
    assert_eq!(vary_values(&h), ["*"]);

    let mut h = HeaderMap::new();
    h.insert(VARY, HeaderValue::from_static(" , "));
    add_vary(&mut h, "Accept-Encoding");
    assert_eq!(vary_values(&h), ["Accept-Encoding"]);
}

fn html_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(CONTENT_LENGTH, HeaderValue::from_static("12345"));
    h.insert(
        "content-md5",
        HeaderValue::from_static("Q2hlY2sgSW50ZWdyaXR5IQ=="),
    );
    h.insert(ETAG, HeaderValue::from_static("\"abc123\""));
    h
}

#[test]
fn compress_response_success_rewrites_headers() {
    let body = sample_html(100);
    let mut h = html_headers();
    let out = compress_response(Some("gzip, br"), &mut h, &body, &cfg()).expect("compressed");
    assert_eq!(out.coding, Coding::Br);
    assert_eq!(decode(&out.body, "br", body.len()).unwrap(), body);
    assert_eq!(h.get(CONTENT_ENCODING).unwrap(), "br");
    assert!(h.get(CONTENT_LENGTH).is_none());
    assert!(h.get("content-md5").is_none());
    assert_eq!(h.get(ETAG).unwrap(), "W/\"abc123\"");
    assert_eq!(vary_values(&h), ["Accept-Encoding"]);
}

#[test]
fn etag_weakening_forms() {
    let body = sample_html(100);
    for (given, want) in [
        ("W/\"x\"", Some("W/\"x\"")),
        ("\"x\"", Some("W/\"x\"")),
        ("unquoted", Some("W/\"unquoted\"")),
        ("has space", None),
    ] {
        let mut h = html_headers();
        h.insert(ETAG, HeaderValue::from_str(given).unwrap());
        compress_response(Some("gzip"), &mut h, &body, &cfg()).expect("compressed");
        assert_eq!(
            h.get(ETAG).map(|v| v.to_str().unwrap()),
            want,
            "ETag {given}"
        );
    }
}

#[test]
fn identity_choice_still_varies() {
    let body = sample_html(100);
    let mut h = html_headers();
    assert!(compress_response(None, &mut h, &body, &cfg()).is_none());
    assert_eq!(vary_values(&h), ["Accept-Encoding"]);
    assert_eq!(h.get(ETAG).unwrap(), "\"abc123\"");
    assert_eq!(h.get(CONTENT_LENGTH).unwrap(), "12345");
    assert!(h.get(CONTENT_ENCODING).is_none());

    // Small bodies: not worth it, but the variant still depends on Accept-Encoding.
    let mut h = html_headers();
    assert!(compress_response(Some("br"), &mut h, b"<p>hi</p>", &cfg()).is_none());
    assert_eq!(vary_values(&h), ["Accept-Encoding"]);
}

#[test]
fn no_transform_is_honoured() {
    let body = sample_html(100);
    let mut h = html_headers();
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=60, No-Transform"),
    );
    let before = h.clone();
    assert!(compress_response(Some("br, gzip"), &mut h, &body, &cfg()).is_none());
    assert_eq!(h, before);
}

#[test]
fn skips_encoded_partial_and_incompressible() {
    let body = sample_html(100);
    let mut h = html_headers();
    h.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    let before = h.clone();
    assert!(compress_response(Some("br"), &mut h, &body, &cfg()).is_none());
    assert_eq!(h, before);

    // An explicit identity coding is no coding.
    let mut h = html_headers();
    h.insert(CONTENT_ENCODING, HeaderValue::from_static("identity"));
    let out = compress_response(Some("gzip"), &mut h, &body, &cfg()).expect("compressed");
    assert_eq!(out.coding, Coding::Gzip);
    assert_eq!(h.get(CONTENT_ENCODING).unwrap(), "gzip");

    let mut h = html_headers();
    h.insert(
        http::header::CONTENT_RANGE,
        HeaderValue::from_static("bytes 0-99/1000"),
    );
    assert!(compress_response(Some("br"), &mut h, &body, &cfg()).is_none());
    assert!(h.get(VARY).is_none());

    let mut h = html_headers();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("image/jpeg"));
    let before = h.clone();
    assert!(compress_response(Some("br"), &mut h, &body, &cfg()).is_none());
    assert_eq!(h, before);
}

#[test]
fn incompressible_body_is_left_alone() {
    // Pseudo-random bytes labelled as text: the encoded body would be larger.
    let mut x: u32 = 0x1234_5678;
    let body: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect();
    let mut h = html_headers();
    assert!(compress_response(Some("gzip"), &mut h, &body, &cfg()).is_none());
    assert!(h.get(CONTENT_ENCODING).is_none());
    assert_eq!(h.get(ETAG).unwrap(), "\"abc123\"");
    assert_eq!(vary_values(&h), ["Accept-Encoding"]);
}

#[test]
fn config_deserializes_with_kebab_case_and_defaults() {
    #[derive(serde::Deserialize)]
    struct Wrap {
        compress: CompressConfig,
    }
    let w: Wrap = serde_json::from_str(
        r#"{"compress": {"codings": ["gzip", "zstd"], "brotli-quality": 5, "min-size": 1000}}"#,
    )
    .unwrap();
    assert_eq!(w.compress.codings, [Coding::Gzip, Coding::Zstd]);
    assert_eq!(w.compress.brotli_quality, 5);
    assert_eq!(w.compress.min_size, 1000);
    assert_eq!(w.compress.gzip_level, 9);
    assert_eq!(w.compress.zstd_level, 19);
    let d: CompressConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(d.codings, [Coding::Br, Coding::Zstd, Coding::Gzip]);
    assert!(serde_json::from_str::<CompressConfig>(r#"{"gzip_level": 3}"#).is_err());
    assert!(serde_json::from_str::<CompressConfig>(r#"{"codings": ["lzma"]}"#).is_err());
}
