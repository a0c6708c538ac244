//! `webpep`: one binary, one subcommand per job (DESIGN §10).

#[cfg(test)]
mod cli_doc;
mod client_cmd;
mod demo;
mod dns_cmd;
mod edge_clients;
mod intercept_args;
mod lab_cmd;
mod link_cmd;
mod optimize_cmd;
mod server_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit code for bad input (unknown profile, malformed file, impossible parameter).
pub const EXIT_BAD_INPUT: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "webpep",
    version,
    about = "webpep: a web performance-enhancing proxy system for slow links, and the lab that measures it"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines on stderr (the access log of `server` and `dns` among them) as plain text or
    /// as one JSON object a line. Colour only on a terminal. Levels: WEBPEP_LOG (an
    /// env-filter; default `info` for `server` and `dns`, `warn` otherwise).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// How log lines are written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The emulated slow link: run a command behind it, list profiles, probe it, sweep FEC.
    Link(link_cmd::LinkArgs),
    /// The lab: experiments over the emulated link, corpora, importers.
    Lab(lab_cmd::LabArgs),
    /// The main job on built-in defaults: load paper-sites pages over the emulated gprs link
    /// under the papers' browser policies and print the comparison.
    Demo(demo::DemoArgs),
    /// The edge proxy for browsers without client software: explicit and transparent HTTP
    /// proxy with caching, compression, image transcoding and URL rewriting.
    Server(Box<server_cmd::Args>),
    /// The device proxy of the dual proxy: browsers on this device use it as their HTTP proxy;
    /// it carries every request to the edge (`webpep server --quic-listen`) over QUIC.
    Client(client_cmd::Args),
    /// The rewriting DNS proxy of paper 002: answers chosen names with the proxy's address.
    Dns(dns_cmd::Args),
    /// Content optimizations on files: image transcoding presets with SSIM and savings.
    Optimize(optimize_cmd::Args),
}

/// An error that is the user's input's fault: exit code 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for BadInput {}

impl Command {
    /// True for the commands that only print (listings, tables from files): they behave like
    /// other Unix tools in a pipeline (`webpep link profiles | head`) and die quietly on a
    /// closed stdout. Everything that talks to peers keeps SIGPIPE ignored, as Rust sets it:
    /// a vectored write (`writev`, which hyper uses) to a socket the peer has reset raises
    /// SIGPIPE despite MSG_NOSIGNAL on plain sends, and would kill a whole proxy.
    fn prints_only(&self) -> bool {
        match self {
            Command::Link(a) => a.prints_only(),
            Command::Lab(a) => a.prints_only(),
            Command::Demo(_)
            | Command::Server(_)
            | Command::Client(_)
            | Command::Dns(_)
            | Command::Optimize(_) => false,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.command.prints_only() {
        // SAFETY: still single-threaded (no runtime started yet); a valid handler constant.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    // A service logs its start and its access log by default; a tool only its warnings.
    let default_level = match cli.command {
        Command::Server(_) | Command::Client(_) | Command::Dns(_) => "info",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("WEBPEP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match cli.log_format {
        LogFormat::Text => log.init(),
        LogFormat::Json => log.json().init(),
    }
    let result = match cli.command {
        Command::Link(args) => link_cmd::run(args),
        Command::Lab(args) => lab_cmd::run_cmd(args),
        Command::Demo(args) => demo::run(args),
        Command::Server(args) => server_cmd::run(*args),
        Command::Client(args) => client_cmd::run(args),
        Command::Dns(args) => dns_cmd::run(args),
        Command::Optimize(args) => optimize_cmd::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("webpep: error: {e:#}");
            if e.downcast_ref::<BadInput>().is_some() {
                ExitCode::from(EXIT_BAD_INPUT)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::collections::BTreeSet;
    use std::path::Path;

    fn repo() -> &'static Path {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
    }

    /// docs/cli.md is what the clap definitions generate: every flag documented, every
    /// documented flag real. `WEBPEP_BLESS=1` rewrites it.
    #[test]
    fn cli_reference_is_current() {
        let want = cli_doc::markdown(&Cli::command());
        let path = repo().join("docs/cli.md");
        if std::env::var_os("WEBPEP_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/cli.md is out of date: run `WEBPEP_BLESS=1 cargo test -p webpep cli_reference` and commit it"
        );
    }

    /// Flags of other programs that the documentation names (Chromium's, cargo's, curl's...).
    const FOREIGN_FLAGS: &[&str] = &[
        "--allow-running-insecure-content",
        "--bins",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-gpu",
        "--disable-quic",
        "--disable-sync",
        "--example",
        "--features",
        "--headless",
        "--ignore-certificate-errors",
        "--ignored",
        "--lib",
        "--locked",
        "--manifest-path",
        "--no-first-run",
        "--nocapture",
        "--no-sandbox",
        "--package",
        "--proxy",
        "--proxy-pac-url",
        "--proxy-server",
        "--release",
        "--remote-debugging-pipe",
        "--test",
        "--user-data-dir",
        "--workspace",
    ];

    /// Every `--flag` the README and docs/ name in code spans is a flag of some webpep
    /// command (or listed above as another program's).
    #[test]
    fn documented_flags_exist() {
        let mut known: BTreeSet<String> = FOREIGN_FLAGS.iter().map(|s| s.to_string()).collect();
        fn collect(cmd: &clap::Command, known: &mut BTreeSet<String>) {
            for a in cmd.get_arguments() {
                if let Some(l) = a.get_long() {
                    known.insert(format!("--{l}"));
                }
            }
            for s in cmd.get_subcommands() {
                collect(s, known);
            }
        }
        let mut cmd = Cli::command();
        cmd.build();
        collect(&cmd, &mut known);
        // The soak example's own flags (crates/server/examples/soak.rs).
        for f in [
            "--pid",
            "--seconds",
            "--flood",
            "--good-clients",
            "--hostile-clients",
        ] {
            known.insert(f.to_string());
        }
        let mut files = vec![repo().join("README.md")];
        for e in std::fs::read_dir(repo().join("docs")).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                files.push(p);
            }
        }
        let mut unknown = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for (i, span) in text.split('`').enumerate() {
                if i % 2 == 0 {
                    continue;
                }
                for word in span.split(|c: char| c.is_whitespace() || c == '=' || c == ',') {
                    let flag: String = word
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                        .collect();
                    if flag.len() > 3 && flag.starts_with("--") && !known.contains(&flag) {
                        unknown.push(format!(
                            "{}: {flag}",
                            f.file_name().unwrap().to_string_lossy()
                        ));
                    }
                }
            }
        }
        assert!(
            unknown.is_empty(),
            "documented flags no command has: {unknown:?}"
        );
    }

    /// The `toml` code block that follows a heading in docs/configuration.md.
    fn config_block(heading: &str) -> String {
        let text = std::fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
        let at = text
            .find(heading)
            .unwrap_or_else(|| panic!("{heading} missing"));
        let rest = &text[at..];
        let start = rest.find("```toml\n").unwrap() + "```toml\n".len();
        let len = rest[start..].find("```").unwrap();
        rest[start..start + len].to_string()
    }

    /// Dotted paths of every key in a TOML table.
    fn keys(v: &toml::Value, prefix: &str, out: &mut BTreeSet<String>) {
        if let toml::Value::Table(t) = v {
            for (k, v) in t {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if v.is_table() && !matches!(k.as_str(), "hosts") {
                    keys(v, &path, out);
                } else {
                    out.insert(path);
                }
            }
        }
    }

    /// The documented server configuration parses (every documented key is real) and holds
    /// every key the server prints with --print-config (every key is documented).
    #[test]
    fn server_configuration_reference_is_complete() {
        let block = config_block("## `webpep server`");
        webpep_server::config::ServerConfig::from_toml(&block, "docs/configuration.md")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut documented = BTreeSet::new();
        keys(&block.parse::<toml::Value>().unwrap(), "", &mut documented);
        let printed = webpep_server::config::ServerConfig::default().to_toml();
        let mut all = BTreeSet::new();
        keys(&printed.parse::<toml::Value>().unwrap(), "", &mut all);
        // Every key every stage declares ([stages.NAME]).
        for (stage, ks) in webpep_server::stages::documented_keys() {
            for k in ks {
                all.insert(format!("stages.{stage}.{}", k.key));
            }
        }
        // And the stages accept what is documented for them.
        let cfg = webpep_server::config::ServerConfig::from_toml(&block, "docs").unwrap();
        webpep_server::stage::Stages::build(&cfg, &webpep_server::stages::default_stages(), "docs")
            .unwrap_or_else(|e| panic!("{e}"));
        let missing: Vec<_> = all.difference(&documented).collect();
        assert!(
            missing.is_empty(),
            "keys not in docs/configuration.md: {missing:?}"
        );
    }

    /// The same for `webpep client`: the documented block parses and sets every key.
    #[test]
    fn client_configuration_reference_is_complete() {
        let block = config_block("## `webpep client`");
        let c = webpep_client::ClientConfig::from_toml(&block, "docs/configuration.md")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(c.server.is_some() && c.credential.is_some());
        let mut documented = BTreeSet::new();
        keys(&block.parse::<toml::Value>().unwrap(), "", &mut documented);
        for k in [
            "listen",
            "server",
            "credential",
            "link-down-after",
            "idle-timeout",
            "fast-connect",
            "allow-clients",
            "max-header-bytes",
            "max-request-body",
        ] {
            assert!(documented.contains(k), "{k} not documented");
        }
    }

    /// The same for `webpep dns`: the documented block sets every key of its file.
    #[test]
    fn dns_configuration_reference_is_complete() {
        let block = config_block("## `webpep dns`");
        let c = webpep_dns::parse_config_file(&block).unwrap_or_else(|e| panic!("{e}"));
        let webpep_dns::FileConfig {
            listen,
            upstream,
            rewrite,
            proxy_addrs,
            ttl,
            fallback,
            keep_origin_ttl,
            allow_clients,
        } = c;
        assert!(
            listen.is_some()
                && upstream.is_some()
                && rewrite.is_some()
                && proxy_addrs.is_some()
                && ttl.is_some()
                && fallback.is_some()
                && keep_origin_ttl.is_some()
                && allow_clients.is_some(),
            "docs/configuration.md leaves a key of webpep dns out"
        );
    }
}
