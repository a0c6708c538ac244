//! Tests of `rewrite_css`: url() in its forms, @import, and odd input left alone.

use proptest::prelude::*;
use url::Url;
use webpep_optimize::rewrite::rewrite_css;

const PROXY: &str = "10.0.0.12";

fn css(input: &str) -> String {
    let sheet = Url::parse("http://static.a.com/css/site.css").unwrap();
    String::from_utf8(rewrite_css(input.as_bytes(), &sheet, PROXY)).expect("UTF-8 in, UTF-8 out")
}

#[test]
fn url_forms() {
    let cases: &[(&str, &str)] = &[
        ("a{background:url(img/a.gif)}", "a{background:url(http://10.0.0.12/static.a.com/css/img/a.gif)}"),
        ("a{background:url('../b.png')}", "a{background:url('http://10.0.0.12/static.a.com/b.png')}"),
        ("a{background:url(\"/c.jpg\")}", "a{background:url(\"http://10.0.0.12/static.a.com/c.jpg\")}"),
        ("a{background:URL( d.gif )}", "a{background:URL( http://10.0.0.12/static.a.com/css/d.gif )}"),
        ("a{background:url(//cdn.b.com/e.gif)}", "a{background:url(http://10.0.0.12/cdn.b.com/e.gif)}"),
        ("a{background:url(http://x.org:8080/f.gif?v=2)}", "a{background:url(http://10.0.0.12/x.org:8080/f.gif?v=2)}"),
        (
            "@font-face{src:url(f.woff2) format('woff2'),url(f.ttf)}",
            "@font-face{src:url(http://10.0.0.12/static.a.com/css/f.woff2) format('woff2'),url(http://10.0.0.12/static.a.com/css/f.ttf)}",
        ),
        ("@import \"print.css\" print;", "@import \"http://10.0.0.12/static.a.com/css/print.css\" print;"),
        ("@import 'x.css';", "@import 'http://10.0.0.12/static.a.com/css/x.css';"),
        ("@IMPORT url(y.css);", "@IMPORT url(http://10.0.0.12/static.a.com/css/y.css);"),
    ];
    for (input, want) in cases {
        assert_eq!(css(input), *want, "{input}");
    }
}

#[test]
fn left_alone() {
    for input in [
        "a{background:url(https://s.a.com/a.gif)}",
        "a{background:url(data:image/png;base64,iVBORw0KGgo=)}",
        "a{fill:url(#gradient)}",
        "a{background:url()}",
        "/* url(a.gif) */",
        "a::after{content:'url(a.gif)'}",
        "a{background:url(a b.gif)}",
        "a{background:url(a\\)b.gif)}",
        "a{background:url(\"unterminated}",
        "a{background:myurl(a.gif)}",
        "@import \"https://s.a.com/x.css\";",
        "@imports \"x.css\";",
        "",
        "url(",
        "@import",
    ] {
        assert_eq!(css(input), input, "{input}");
    }
}

#[test]
fn invalid_utf8_is_kept_and_valid_parts_rewritten() {
    let sheet = Url::parse("http://static.a.com/site.css").unwrap();
    let input = b"/* \xff\xfe */ a{background:url(a.gif)} b{font-family:\"\xe9t\xe9\"}";
    let out = rewrite_css(input, &sheet, PROXY);
    let want = b"/* \xff\xfe */ a{background:url(http://10.0.0.12/static.a.com/a.gif)} b{font-family:\"\xe9t\xe9\"}";
    assert_eq!(out, want.to_vec());
}

proptest! {
    #[test]
    fn never_panics_and_only_grows_at_urls(input in proptest::collection::vec(any::<u8>(), 0..512)) {
        let sheet = Url::parse("http://static.a.com/site.css").unwrap();
        let out = rewrite_css(&input, &sheet, PROXY);
        // Without any url( or @import there is nothing to rewrite.
        let lower = input.to_ascii_lowercase();
        let has_ref = lower.windows(4).any(|w| w == b"url(") || lower.windows(7).any(|w| w == b"@import");
        if !has_ref {
            prop_assert_eq!(out, input);
        }
    }

    #[test]
    fn css_text_never_panics(input in "[a-z(){}:;'\"/\\\\@ .#*-]{0,80}") {
        let sheet = Url::parse("http://static.a.com/site.css").unwrap();
        let _ = rewrite_css(input.as_bytes(), &sheet, PROXY);
    }
}
