//! The PAC file the client proxy serves at `/proxy.pac`: every request through the proxy,
//! except loopback and the proxy itself (which browsers reach directly anyway).

use std::net::SocketAddr;

/// The PAC file for a proxy listening at `listen`.
pub fn pac_file(listen: SocketAddr) -> String {
    // A wildcard listen address is reached at loopback.
    let host = if listen.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        listen.ip().to_string()
    };
    format!(
        "// webpep client: every request through the device proxy, which carries it to the edge.\n\
         function FindProxyForURL(url, host) {{\n\
         \x20 if (isPlainHostName(host) || host == \"localhost\" || shExpMatch(host, \"127.*\") || host == \"[::1]\")\n\
         \x20   return \"DIRECT\";\n\
         \x20 return \"PROXY {host}:{port}\";\n\
         }}\n",
        port = listen.port()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pac_names_the_proxy_and_keeps_loopback_direct() {
        let pac = pac_file("127.0.0.1:8118".parse().unwrap());
        assert!(pac.contains("PROXY 127.0.0.1:8118"), "{pac}");
        assert!(pac.contains("\"DIRECT\""));
        assert!(pac_file("0.0.0.0:3129".parse().unwrap()).contains("PROXY 127.0.0.1:3129"));
    }
}
