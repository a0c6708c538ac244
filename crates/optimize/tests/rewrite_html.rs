//! Tests of `rewrite_html`: every URL attribute, srcset, base, CSS in HTML, what is left
//! alone, byte identity outside rewrites, and malformed input.

use proptest::prelude::*;
use url::Url;
use webpep_optimize::rewrite::{embedded_urls, rewrite_html, subresource_urls, to_proxy_url};

const PROXY: &str = "10.0.0.12";
const PAGE: &str = "http://www.a.com/dir/page.html";

fn rw(html: &str) -> String {
    let page = Url::parse(PAGE).unwrap();
    let out = rewrite_html(html.as_bytes(), &page, PROXY).expect("rewrites");
    String::from_utf8(out).expect("UTF-8 in, UTF-8 out")
}

/// `http://10.0.0.12/www.a.com` + path.
fn p(path: &str) -> String {
    format!("http://10.0.0.12/www.a.com{path}")
}

#[test]
fn every_url_attribute() {
    let cases: Vec<(String, String)> = vec![
        (
            "<a href=\"x.html\">".into(),
            format!("<a href=\"{}\">", p("/dir/x.html")),
        ),
        (
            "<area href=\"/m.html\">".into(),
            format!("<area href=\"{}\">", p("/m.html")),
        ),
        (
            "<img src=\"i.gif\">".into(),
            format!("<img src=\"{}\">", p("/dir/i.gif")),
        ),
        (
            "<img lowsrc=\"l.gif\">".into(),
            format!("<img lowsrc=\"{}\">", p("/dir/l.gif")),
        ),
        (
            "<script src=\"/s.js\"></script>".into(),
            format!("<script src=\"{}\"></script>", p("/s.js")),
        ),
        (
            "<link rel=stylesheet href=\"c.css\">".into(),
            format!("<link rel=stylesheet href=\"{}\">", p("/dir/c.css")),
        ),
        (
            "<link rel=icon href=\"/favicon.ico\">".into(),
            format!("<link rel=icon href=\"{}\">", p("/favicon.ico")),
        ),
        (
            "<link rel=preload as=image href=\"h.png\">".into(),
            format!("<link rel=preload as=image href=\"{}\">", p("/dir/h.png")),
        ),
        (
            "<iframe src=\"f.html\"></iframe>".into(),
            format!("<iframe src=\"{}\"></iframe>", p("/dir/f.html")),
        ),
        (
            "<frameset><frame src=\"fr.html\"></frameset>".into(),
            format!("<frameset><frame src=\"{}\"></frameset>", p("/dir/fr.html")),
        ),
        (
            "<embed src=\"e.swf\">".into(),
            format!("<embed src=\"{}\">", p("/dir/e.swf")),
        ),
        (
            "<video src=\"v.mp4\" poster=\"v.jpg\"></video>".into(),
            format!(
                "<video src=\"{}\" poster=\"{}\"></video>",
                p("/dir/v.mp4"),
                p("/dir/v.jpg")
            ),
        ),
        (
            "<video><source src=\"s.webm\"></video>".into(),
            format!("<video><source src=\"{}\"></video>", p("/dir/s.webm")),
        ),
        (
            "<audio src=\"a.mp3\"></audio>".into(),
            format!("<audio src=\"{}\"></audio>", p("/dir/a.mp3")),
        ),
        (
            "<video><track src=\"t.vtt\"></video>".into(),
            format!("<video><track src=\"{}\"></video>", p("/dir/t.vtt")),
        ),
        (
            "<object data=\"o.swf\"></object>".into(),
            format!("<object data=\"{}\"></object>", p("/dir/o.swf")),
        ),
        (
            "<input type=image src=\"go.gif\">".into(),
            format!("<input type=image src=\"{}\">", p("/dir/go.gif")),
        ),
        (
            "<input type=IMAGE src=\"go.gif\">".into(),
            format!("<input type=IMAGE src=\"{}\">", p("/dir/go.gif")),
        ),
        (
            "<form action=\"/cgi-bin/q\"></form>".into(),
            format!("<form action=\"{}\"></form>", p("/cgi-bin/q")),
        ),
        (
            "<button formaction=\"b\">".into(),
            format!("<button formaction=\"{}\">", p("/dir/b")),
        ),
        (
            "<body background=\"bg.gif\">".into(),
            format!("<body background=\"{}\">", p("/dir/bg.gif")),
        ),
        (
            "<table background=\"t.gif\"><tr><td background=\"td.gif\">x</td></tr></table>".into(),
            format!(
                "<table background=\"{}\"><tr><td background=\"{}\">x</td></tr></table>",
                p("/dir/t.gif"),
                p("/dir/td.gif")
            ),
        ),
        (
            "<meta http-equiv=\"Refresh\" content=\"5; url=next.html\">".into(),
            format!(
                "<meta http-equiv=\"Refresh\" content=\"5; url={}\">",
                p("/dir/next.html")
            ),
        ),
    ];
    for (input, want) in cases {
        assert_eq!(rw(&input), want, "{input}");
    }
}

#[test]
fn input_without_image_type_is_left_alone() {
    let html = "<input type=text src=\"x.gif\"><input src=\"y.gif\">";
    assert_eq!(rw(html), html);
}

#[test]
fn absolute_relative_root_relative_and_protocol_relative() {
    let cases = [
        (
            "<img src=\"http://i.cnn.net/images/plane.jpg\">",
            "<img src=\"http://10.0.0.12/i.cnn.net/images/plane.jpg\">",
        ),
        (
            "<img src=\"//cdn.a.com/x.gif\">",
            "<img src=\"http://10.0.0.12/cdn.a.com/x.gif\">",
        ),
        (
            "<img src=\"../up.gif\">",
            "<img src=\"http://10.0.0.12/www.a.com/up.gif\">",
        ),
        (
            "<img src=\"?v=2\">",
            "<img src=\"http://10.0.0.12/www.a.com/dir/page.html?v=2\">",
        ),
        (
            "<img src=\"http://www.b.com:8080/p.gif?a=1#top\">",
            "<img src=\"http://10.0.0.12/www.b.com:8080/p.gif?a=1#top\">",
        ),
        (
            "<img src='  spaced.gif  '>",
            "<img src=\"http://10.0.0.12/www.a.com/dir/spaced.gif\">",
        ),
        (
            "<a href=other.html>",
            "<a href=\"http://10.0.0.12/www.a.com/dir/other.html\">",
        ),
    ];
    for (input, want) in cases {
        assert_eq!(rw(input), want, "{input}");
    }
}

#[test]
fn non_http_references_are_left_alone() {
    for html in [
        "<a href=\"https://secure.a.com/\">",
        "<img src=\"data:image/gif;base64,R0lGODlhAQABAAAAACw=\">",
        "<a href=\"javascript:void(0)\">",
        "<a href=\"mailto:me@a.com\">",
        "<a href=\"ftp://ftp.a.com/f\">",
        "<a href=\"#section\">",
        "<a href=\"\">",
        "<form action=\"\"></form>",
        "<a href=\"http://10.0.0.12/www.a.com/already\">",
        "<a href=\"http://intranet/\">",
        "<a href=\"tel:+123\">",
    ] {
        assert_eq!(rw(html), html, "{html}");
    }
}

#[test]
fn entities_in_urls() {
    assert_eq!(
        rw("<a href=\"q.cgi?a=1&amp;b=2\">"),
        format!("<a href=\"{}\">", p("/dir/q.cgi?a=1&amp;b=2"))
    );
    // A raw & comes out escaped; the browser reads back the same URL.
    assert_eq!(
        rw("<a href=\"q.cgi?a=1&copy=2\">"),
        format!("<a href=\"{}\">", p("/dir/q.cgi?a=1&amp;copy=2"))
    );
    assert_eq!(
        rw("<img src=\"http&#58;//b.com/x.gif\">"),
        "<img src=\"http://10.0.0.12/b.com/x.gif\">"
    );
}

#[test]
fn srcset_candidates() {
    assert_eq!(
        rw("<img srcset=\"a.jpg 1x, /b.jpg 2x, https://c.com/c.jpg 3x\">"),
        format!(
            "<img srcset=\"{}, {}, https://c.com/c.jpg 3x\">",
            format_args!("{} 1x", p("/dir/a.jpg")),
            format_args!("{} 2x", p("/b.jpg"))
        )
    );
    assert_eq!(
        rw("<picture><source srcset=\"s-640.webp 640w,s-1280.webp 1280w\" sizes=\"50vw\"></picture>"),
        format!(
            "<picture><source srcset=\"{} 640w, {} 1280w\" sizes=\"50vw\"></picture>",
            p("/dir/s-640.webp"),
            p("/dir/s-1280.webp")
        )
    );
    assert_eq!(
        rw("<link rel=preload as=image imagesrcset=\"x.png 2x\">"),
        format!(
            "<link rel=preload as=image imagesrcset=\"{} 2x\">",
            p("/dir/x.png")
        )
    );
    let untouched = "<img srcset=\"https://c.com/c.jpg 1x, data:image/png;base64,AAAA 2x\">";
    assert_eq!(rw(untouched), untouched);
}

#[test]
fn base_href_is_honoured_and_rewritten() {
    let out = rw("<head><base href=\"http://static.b.com/assets/\"></head><img src=\"i.gif\"><img src=\"/r.gif\">");
    assert_eq!(
        out,
        "<head><base href=\"http://10.0.0.12/static.b.com/assets/\"></head>\
         <img src=\"http://10.0.0.12/static.b.com/assets/i.gif\"><img src=\"http://10.0.0.12/static.b.com/r.gif\">"
    );
    // A relative base resolves against the page; only the first base counts.
    let out = rw("<base href=\"/sub/\"><base href=\"http://evil.com/\"><img src=\"i.gif\">");
    assert_eq!(
        out,
        format!(
            "<base href=\"{}\"><base href=\"http://10.0.0.12/evil.com/\"><img src=\"{}\">",
            p("/sub/"),
            p("/sub/i.gif")
        )
    );
    // An https base: its references are https and stay as they are; so does the base.
    let html = "<base href=\"https://s.b.com/\"><img src=\"i.gif\">";
    assert_eq!(rw(html), html);
}

#[test]
fn css_in_style_attributes_and_elements() {
    assert_eq!(
        rw("<div style=\"background:url(bg.gif)\">"),
        format!("<div style=\"background:url({})\">", p("/dir/bg.gif"))
    );
    assert_eq!(
        rw("<div style=\"background:url(&quot;bg.gif&quot;)\">"),
        format!(
            "<div style=\"background:url(&quot;{}&quot;)\">",
            p("/dir/bg.gif")
        )
    );
    assert_eq!(
        rw("<style>@import \"s.css\"; body{background:url('/b.png')}</style>"),
        format!(
            "<style>@import \"{}\"; body{{background:url('{}')}}</style>",
            p("/dir/s.css"),
            p("/b.png")
        )
    );
    let plain = "<style>body{color:red}</style><p style=\"color:blue\">x</p>";
    assert_eq!(rw(plain), plain);
}

#[test]
fn everything_else_is_byte_identical() {
    let html = "<!DOCTYPE html>\n<!-- <img src=\"c.gif\"> -->\n<HTML><Head><TITLE>T &amp; U</TITLE>\
                <script>var s = '<img src=\"js.gif\">';</script></Head>\n<BODY bgcolor=#ffffff>\
                <P class=x   id='y'>Text with http://www.a.com/plain.html in it.\
                <IMG SRC=\"pic.gif\" WIDTH=10 alt='a'><textarea><img src=\"t.gif\"></textarea></BODY></HTML>";
    let out = rw(html);
    let want = html.replace("SRC=\"pic.gif\"", &format!("SRC=\"{}\"", p("/dir/pic.gif")));
    // Only the changed attribute value differs; comments, scripts, textarea, text and the
    // spelling of every other tag and attribute are untouched.
    assert_eq!(out, want);
}

#[test]
fn rewriting_twice_changes_nothing_more() {
    let html = "<base href=\"/b/\"><a href=\"x\">x</a><img srcset=\"a 1x, b 2x\"><div style=\"background:url(c)\">";
    let once = rw(html);
    assert_eq!(rw(&once), once);
}

#[test]
fn malformed_html_does_not_panic_and_still_rewrites() {
    let cases = [
        "<img src=\"a.gif\"",
        "<img src=\"a.gif",
        "<a href=x.html><b><i></a></b>",
        "<table><td background=t.gif><tr>",
        "</img></a></p></body>",
        "<<<<>>>>",
        "<!-- unclosed comment <img src=a.gif>",
        "<script><img src=a.gif>",
        "<style>a{background:url(a.gif)",
        "<img src=a.gif/>",
    ];
    for html in cases {
        let _ = rw(html);
    }
    assert!(rw("<a href=x.html><b><i></a></b>").contains(&p("/dir/x.html")));
    let page = Url::parse(PAGE).unwrap();
    let garbage: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    rewrite_html(&garbage, &page, PROXY).expect("garbage is rewritten, not refused");
}

#[test]
fn non_utf8_bytes_outside_rewrites_are_kept() {
    let page = Url::parse(PAGE).unwrap();
    let html = b"<p>caf\xe9 \xff\xfe</p><img src=\"a.gif\"><p>\xc3\x28</p>";
    let out = rewrite_html(html, &page, PROXY).unwrap();
    let want = [
        &b"<p>caf\xe9 \xff\xfe</p><img src=\""[..],
        p("/dir/a.gif").as_bytes(),
        b"\"><p>\xc3\x28</p>",
    ]
    .concat();
    assert_eq!(out, want);
}

#[test]
fn windows_1252_page_declared_by_meta() {
    let page = Url::parse(PAGE).unwrap();
    let html = b"<meta charset=\"windows-1252\"><p>caf\xe9</p><img src=\"\xe9t\xe9.gif\">";
    let out = rewrite_html(html, &page, PROXY).unwrap();
    // é is U+00E9, percent-encoded as UTF-8 in the path (as a browser would).
    let want = [
        &b"<meta charset=\"windows-1252\"><p>caf\xe9</p><img src=\""[..],
        p("/dir/%C3%A9t%C3%A9.gif").as_bytes(),
        b"\">",
    ]
    .concat();
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&want)
    );
}

#[test]
fn embedded_urls_lists_references() {
    let html =
        "<base href=\"/b/\"><img src=\"a.gif\" srcset=\"b.gif 1x, c.gif 2x\"><a href=\"#x\">\
                <div style=\"background:url(d.gif)\"><style>@import 'e.css';</style>\
                <meta http-equiv=refresh content=\"0;url=f.html\"><input type=text src=\"no.gif\">";
    assert_eq!(
        embedded_urls(html.as_bytes()),
        ["/b/", "a.gif", "b.gif", "c.gif", "#x", "d.gif", "e.css", "f.html"]
    );
}

#[test]
fn subresource_urls_lists_only_what_a_browser_fetches() {
    let html = "<base href=\"/b/\"><base href=\"/ignored/\"><img src=\"a.gif\" srcset=\"b.gif 1x, c.gif 2x\">\
        <img srcset=\"s1.jpg 1x, s2.jpg 2x\"><a href=\"page.html\">x</a>\
        <link rel=\"stylesheet\" href=\"m.css\"><link rel=\"alternate\" href=\"feed.xml\">\
        <link rel=\"Preload\" href=\"p.js\"><script src=\"s.js?a=1&amp;b=2\"></script>\
        <div style=\"background:url(d.gif)\"><style>@import 'e.css';</style>\
        <meta http-equiv=refresh content=\"0;url=f.html\"><input type=text src=\"no.gif\">\
        <input type=image src=\"go.gif\"><form action=\"/post\"></form><iframe src=\"ad.html\"></iframe>\
        <td background=\"t.gif\">";
    let (base, urls) = subresource_urls(html.as_bytes());
    assert_eq!(base.as_deref(), Some("/b/"));
    assert_eq!(
        urls,
        [
            // The candidate a large screen fetches, as the lab's browser model picks it.
            "c.gif",
            "s2.jpg",
            "m.css",
            "p.js",
            "s.js?a=1&b=2",
            "d.gif",
            "e.css",
            "go.gif",
            "ad.html",
            "t.gif"
        ]
    );
    // Garbage gives what can be found and never panics.
    let (_, urls) = subresource_urls(b"<img src=x.gif><\xff\xfe<script src=");
    assert_eq!(urls, ["x.gif"]);
}

/// Builds a small document from generated parts.
fn arb_doc() -> impl Strategy<Value = String> {
    let url = prop_oneof![
        "[a-z]{1,6}\\.(gif|html|css)",
        "/[a-z]{1,6}/[a-z]{1,4}\\.jpg",
        "//cdn[0-9]\\.b\\.com/[a-z]{1,5}",
        "http://[a-z]{1,5}\\.(com|org)(:[1-9][0-9]{0,3})?/[a-z?=&;#]{0,8}",
        "https://[a-z]{1,5}\\.com/x",
        "data:,x",
        "#[a-z]{1,3}",
        "[a-z &<>\"'=]{0,6}",
    ];
    let tag = (
        prop_oneof![
            Just(("img", "src")),
            Just(("a", "href")),
            Just(("link", "href")),
            Just(("script", "src")),
            Just(("iframe", "src")),
            Just(("form", "action")),
            Just(("td", "background")),
            Just(("base", "href")),
            Just(("img", "srcset")),
        ],
        url,
        prop_oneof![Just("\""), Just("'"), Just("")],
    )
        .prop_map(|((t, a), u, q)| format!("<{t} {a}={q}{u}{q}>"));
    proptest::collection::vec(prop_oneof![tag, "[a-z <>/!-]{0,10}"], 0..12).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn http_references_end_up_at_the_proxy(doc in arb_doc()) {
        let page = Url::parse(PAGE).unwrap();
        let out = rewrite_html(doc.as_bytes(), &page, PROXY).expect("rewrites");
        // Every reference in the output that resolves to a proxyable http URL is at the proxy,
        // unless it was already in the input as is (then it was one the rewriter may not touch).
        let out_page = Url::parse("http://10.0.0.12/www.a.com/dir/page.html").unwrap();
        for u in embedded_urls(&out) {
            let Ok(abs) = out_page.join(u.trim()) else { continue };
            if to_proxy_url(&abs, PROXY).is_some() && !u.trim().starts_with('#') && !u.trim().is_empty() {
                prop_assert!(doc.contains(&u), "reference {u:?} escaped the proxy in {}", String::from_utf8_lossy(&out));
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        let page = Url::parse(PAGE).unwrap();
        prop_assert!(rewrite_html(&bytes, &page, PROXY).is_ok());
        let _ = embedded_urls(&bytes);
    }
}

#[test]
fn uppercase_tags_and_unusable_base() {
    assert_eq!(
        rw("<INPUT TYPE=text SRC=\"x.gif\">"),
        "<INPUT TYPE=text SRC=\"x.gif\">"
    );
    assert_eq!(
        rw("<INPUT TYPE=Image SRC=\"x.gif\">"),
        format!("<INPUT TYPE=Image SRC=\"{}\">", p("/dir/x.gif"))
    );
    // A javascript: base is ignored by browsers, and then the page URL stays the base.
    assert_eq!(
        rw("<base href=\"javascript:x\"><base href=\"http://c.com/\"><img src=\"i.gif\">"),
        format!(
            "<base href=\"javascript:x\"><base href=\"http://10.0.0.12/c.com/\"><img src=\"{}\">",
            p("/dir/i.gif")
        )
    );
}
