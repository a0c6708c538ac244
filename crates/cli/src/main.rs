//! `webpep`: one binary, one subcommand per job (DESIGN §10).

mod demo;
mod dns_cmd;
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
    Server(server_cmd::Args),
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
            Command::Demo(_) | Command::Server(_) | Command::Dns(_) | Command::Optimize(_) => false,
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
        Command::Server(_) | Command::Dns(_) => "info",
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
        Command::Server(args) => server_cmd::run(args),
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
