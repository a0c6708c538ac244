//! `docs/cli.md`, the command and flag reference, generated from the clap definitions so it
//! cannot drift from the binary (a test compares the file with this output).

use std::fmt::Write;

use clap::{Arg, ArgAction, Command};

/// The whole reference: one section per command and subcommand, depth first.
pub fn markdown(root: &Command) -> String {
    let mut out = String::new();
    out.push_str(
        "<!-- Generated from the clap definitions by `WEBPEP_BLESS=1 cargo test -p webpep \
         cli_reference`; do not edit by hand. -->\n\n# Command reference\n\n",
    );
    out.push_str(
        "Every command and flag of `webpep`, as `--help` prints them. What the commands do in \
         depth: [server.md](server.md), [link.md](link.md), [lab.md](lab.md), \
         [optimize.md](optimize.md); configuration files: [configuration.md](configuration.md).\n\n",
    );
    let mut root = root.clone();
    root.build();
    section(&root, root.get_name(), &mut out);
    out
}

fn section(cmd: &Command, path: &str, out: &mut String) {
    let level = path.split(' ').count().min(4) + 1;
    let _ = writeln!(out, "{} `{path}`\n", "#".repeat(level));
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", about.to_string().trim());
    }
    let mut usage = cmd.clone().bin_name(path.to_string());
    let usage = usage.render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ").trim();
    let _ = writeln!(out, "```text\n{usage}\n```\n");

    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !is_builtin(a))
        .filter(|a| !a.is_global_set() || path.split(' ').count() == 1)
        .collect();
    if !args.is_empty() {
        out.push_str("| argument | default | meaning |\n|---|---|---|\n");
        for a in args {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                cell(&arg_name(a)),
                cell(&default_of(a)),
                cell(&help_of(a))
            );
        }
        out.push('\n');
    }
    let subs: Vec<&Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .collect();
    if !subs.is_empty() && !path.contains(' ') {
        // The root lists its commands; deeper levels follow as sections of their own.
        out.push_str("| command | what it does |\n|---|---|\n");
        for s in &subs {
            let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
            let _ = writeln!(out, "| `{}` | {} |", s.get_name(), cell(&about));
        }
        out.push('\n');
    }
    for s in subs {
        section(s, &format!("{path} {}", s.get_name()), out);
    }
}

fn is_builtin(a: &Arg) -> bool {
    matches!(a.get_id().as_str(), "help" | "version")
}

fn arg_name(a: &Arg) -> String {
    let value = a
        .get_value_names()
        .map(|v| {
            v.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| a.get_id().as_str().to_uppercase());
    let takes_value = !matches!(
        a.get_action(),
        ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count | ArgAction::Help
    );
    if a.is_positional() {
        let repeated = matches!(a.get_action(), ArgAction::Append)
            || a.get_num_args().is_some_and(|n| n.max_values() > 1);
        return format!("`{value}{}`", if repeated { "..." } else { "" });
    }
    let mut names = Vec::new();
    if let Some(s) = a.get_short() {
        names.push(format!("-{s}"));
    }
    if let Some(l) = a.get_long() {
        names.push(format!("--{l}"));
    }
    let names = names.join(", ");
    if takes_value {
        format!("`{names} {value}`")
    } else {
        format!("`{names}`")
    }
}

fn default_of(a: &Arg) -> String {
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if defaults.is_empty() || matches!(a.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
        String::new()
    } else {
        format!("`{}`", defaults.join(","))
    }
}

fn help_of(a: &Arg) -> String {
    let mut help = a
        .get_long_help()
        .or(a.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let values: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !values.is_empty() && !matches!(a.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
        let _ = write!(help, " One of {}.", values.join(", "));
    }
    help.trim().to_string()
}

/// One table cell: no line breaks, no bare pipes.
fn cell(s: &str) -> String {
    s.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}
