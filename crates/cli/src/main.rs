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

fn main() -> ExitCode {
    // Behave like other Unix tools in a pipeline (`webpep link profiles | head`): die quietly
    // on a closed stdout. Sockets are unaffected (Rust sends with MSG_NOSIGNAL).
    // SAFETY: called first, single-threaded, with a valid handler constant.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WEBPEP_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
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
