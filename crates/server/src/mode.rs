//! Which of the proxy's modes a request is for (DESIGN §2), decided from the request target
//! and Host alone: explicit (absolute-form), CONNECT, transparent (origin-form for another
//! host) and URL-rewriting (origin-form to the proxy itself, `/<host>/<path>`).

use std::fmt;
use std::net::SocketAddr;

use http::header::HOST;
use http::{HeaderMap, Method};

/// The mode of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// `GET http://host[:port]/path`: the browser is configured to use the proxy; or `GET
    /// https://host[:port]/path` from a client proxy that intercepted the browser's TLS (the
    /// edge then speaks TLS to the origin and verifies it).
    Explicit {
        /// `host[:port]` of the origin.
        authority: String,
        /// Path and query, starting with '/'.
        path: String,
        /// The target was `https://`: the origin is reached over TLS (default port 443).
        secure: bool,
    },
    /// `CONNECT host:port`: a byte tunnel.
    Connect {
        /// Host name or IP literal (without brackets).
        host: String,
        /// Port.
        port: u16,
    },
    /// Origin-form for a Host that is not the proxy: DNS rewriting or L4 interception.
    Transparent {
        /// `host[:port]` from the Host header.
        authority: String,
        /// Path and query.
        path: String,
    },
    /// Origin-form to the proxy itself: `/<host[:port]>/<path>` (URL-rewriting mode).
    UrlPath {
        /// `host[:port]` of the origin, from the path.
        authority: String,
        /// Origin path and query.
        path: String,
    },
    /// Origin-form to the proxy itself that is not a proxied path → 404.
    Local {
        /// The path asked for.
        path: String,
    },
}

impl Mode {
    /// Short label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Mode::Explicit { .. } => "explicit",
            Mode::Connect { .. } => "connect",
            Mode::Transparent { .. } => "transparent",
            Mode::UrlPath { .. } => "url",
            Mode::Local { .. } => "local",
        }
    }

    /// The origin URL (`http://authority/path`, `https://` for a secure explicit request) for
    /// proxied HTTP modes.
    pub fn origin_url(&self) -> Option<String> {
        match self {
            Mode::Explicit {
                authority,
                path,
                secure: true,
            } => Some(format!("https://{authority}{path}")),
            Mode::Explicit {
                authority, path, ..
            }
            | Mode::Transparent { authority, path }
            | Mode::UrlPath { authority, path } => Some(format!("http://{authority}{path}")),
            _ => None,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// What the classifier needs to know about the listener.
#[derive(Debug, Clone)]
pub struct ModeContext<'a> {
    /// The local address the client connected to.
    pub local: SocketAddr,
    /// URL mode's proxy authority when URL mode is on.
    pub proxy_authority: Option<&'a str>,
}

/// Splits `host[:port]` (IPv6 literals bracketed) into host and port.
pub fn split_authority(authority: &str, default_port: u16) -> Option<(String, u16)> {
    let auth: http::uri::Authority = authority.parse().ok()?;
    if authority.contains('@') {
        return None;
    }
    let host = auth
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    if host.is_empty() {
        return None;
    }
    Some((host, auth.port_u16().unwrap_or(default_port)))
}

/// Classifies a request. Errors are client errors (→ 400), with the reason.
pub fn classify(
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    ctx: &ModeContext<'_>,
) -> Result<Mode, String> {
    if method == Method::CONNECT {
        let (host, port) =
            split_authority(target, 0).ok_or_else(|| format!("bad CONNECT target {target:?}"))?;
        if port == 0 {
            return Err("CONNECT needs host:port".into());
        }
        return Ok(Mode::Connect { host, port });
    }
    if target.starts_with('/') {
        let host = headers
            .get(HOST)
            .and_then(|v| v.to_str().ok())
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .ok_or("origin-form request without Host")?;
        let (hname, hport) =
            split_authority(&host, 80).ok_or_else(|| format!("bad Host {host:?}"))?;
        let for_me = ctx
            .proxy_authority
            .is_some_and(|a| a.eq_ignore_ascii_case(&host) || same_authority(a, &hname, hport))
            || hname.parse::<std::net::IpAddr>().ok() == Some(ctx.local.ip())
                && hport == ctx.local.port();
        if for_me {
            // The PAC file is the proxy's own in URL mode too (`proxy.pac` is no host's name:
            // `.pac` is not a top-level domain).
            let pac = target == "/proxy.pac" || target.starts_with("/proxy.pac?");
            if ctx.proxy_authority.is_some() && !pac {
                if let Some((authority, path)) = crate::url_rewrite::from_proxy_path(target) {
                    return Ok(Mode::UrlPath { authority, path });
                }
            }
            return Ok(Mode::Local {
                path: target.to_string(),
            });
        }
        return Ok(Mode::Transparent {
            authority: host,
            path: target.to_string(),
        });
    }
    let uri: http::Uri = target
        .parse()
        .map_err(|_| format!("bad request target {target:?}"))?;
    let secure = match uri.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("http") => false,
        Some(s) if s.eq_ignore_ascii_case("https") => true,
        Some(s) => return Err(format!("scheme {s:?} is not proxied here")),
        None => return Err(format!("bad request target {target:?}")),
    };
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_ascii_lowercase())
        .filter(|a| !a.contains('@'))
        .ok_or("absolute URL without a host")?;
    split_authority(&authority, if secure { 443 } else { 80 })
        .ok_or_else(|| format!("bad host {authority:?}"))?;
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .filter(|p| p.starts_with('/'))
        .unwrap_or_else(|| {
            // `http://h?x=1` has the query but no path.
            match uri.query() {
                Some(q) => format!("/?{q}"),
                None => "/".to_string(),
            }
        });
    Ok(Mode::Explicit {
        authority,
        path,
        secure,
    })
}

fn same_authority(a: &str, host: &str, port: u16) -> bool {
    split_authority(a, 80).is_some_and(|(h, p)| h.eq_ignore_ascii_case(host) && p == port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ctx() -> ModeContext<'static> {
        ModeContext {
            local: "10.0.0.1:3128".parse().unwrap(),
            proxy_authority: Some("proxy.test:3128"),
        }
    }

    #[test]
    fn the_pac_file_is_local_in_url_mode_too() {
        let m = classify(&Method::GET, "/proxy.pac", &hdrs("proxy.test:3128"), &ctx()).unwrap();
        assert_eq!(
            m,
            Mode::Local {
                path: "/proxy.pac".into()
            }
        );
        let m = classify(
            &Method::GET,
            "/www.a.test/x",
            &hdrs("proxy.test:3128"),
            &ctx(),
        )
        .unwrap();
        assert!(matches!(m, Mode::UrlPath { .. }), "{m:?}");
    }

    fn hdrs(host: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(HOST, HeaderValue::from_str(host).unwrap());
        h
    }

    #[test]
    fn explicit_forms() {
        let m = classify(
            &Method::GET,
            "http://WWW.A.test:8080/x?y",
            &HeaderMap::new(),
            &ctx(),
        )
        .unwrap();
        assert_eq!(
            m,
            Mode::Explicit {
                authority: "www.a.test:8080".into(),
                path: "/x?y".into(),
                secure: false,
            }
        );
        assert_eq!(m.origin_url().unwrap(), "http://www.a.test:8080/x?y");
        let m = classify(&Method::GET, "http://a.test", &HeaderMap::new(), &ctx()).unwrap();
        assert_eq!(m.origin_url().unwrap(), "http://a.test/");
        let s = classify(
            &Method::GET,
            "HTTPS://A.test/p?q",
            &HeaderMap::new(),
            &ctx(),
        )
        .unwrap();
        assert_eq!(
            s,
            Mode::Explicit {
                authority: "a.test".into(),
                path: "/p?q".into(),
                secure: true,
            }
        );
        assert_eq!(s.origin_url().unwrap(), "https://a.test/p?q");
        assert_eq!(s.label(), "explicit");
        let s = classify(
            &Method::GET,
            "https://[::1]:8443",
            &HeaderMap::new(),
            &ctx(),
        )
        .unwrap();
        assert_eq!(s.origin_url().unwrap(), "https://[::1]:8443/");
        assert!(classify(&Method::GET, "ftp://a.test/", &HeaderMap::new(), &ctx()).is_err());
        assert!(classify(&Method::GET, "https://u@a.test/", &HeaderMap::new(), &ctx()).is_err());
        assert!(classify(&Method::GET, "http://u@a.test/", &HeaderMap::new(), &ctx()).is_err());
    }

    #[test]
    fn connect_forms() {
        assert_eq!(
            classify(&Method::CONNECT, "a.test:443", &HeaderMap::new(), &ctx()).unwrap(),
            Mode::Connect {
                host: "a.test".into(),
                port: 443
            }
        );
        assert_eq!(
            classify(&Method::CONNECT, "[::1]:22", &HeaderMap::new(), &ctx()).unwrap(),
            Mode::Connect {
                host: "::1".into(),
                port: 22
            }
        );
        assert!(classify(&Method::CONNECT, "a.test", &HeaderMap::new(), &ctx()).is_err());
    }

    #[test]
    fn origin_form_modes() {
        let t = classify(&Method::GET, "/p", &hdrs("www.a.test"), &ctx()).unwrap();
        assert_eq!(t.label(), "transparent");
        assert_eq!(t.origin_url().unwrap(), "http://www.a.test/p");
        assert!(classify(&Method::GET, "/p", &HeaderMap::new(), &ctx()).is_err());
        let l = classify(&Method::GET, "/favicon.ico", &hdrs("10.0.0.1:3128"), &ctx()).unwrap();
        assert_eq!(l.label(), "local");
    }
}
