//! The `poolguard` command line.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use poolguard::namespaces;
use poolguard::policy::{rego_tests, template};
use poolguard::ruleset::{Sources, DEFAULT_POLICIES_DIR};
use poolguard::webhook::Webhook;
use poolguard::{certs, documents, eval};

/// Kubernetes admission webhook: puts pods on their namespace's node pool and enforces Rego
/// (StackL SIT) policies such as allowed image repositories.
#[derive(Parser)]
#[command(name = "poolguard", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decide one AdmissionReview or manifest from files, without a cluster.
    ///
    /// An AdmissionReview v1 (JSON or YAML) prints the AdmissionReview response. A plain Pod or
    /// workload manifest (one or more documents) prints a readable verdict as comments and, when
    /// mutating, the patched object. Exit status: 0 allowed, 1 denied, 2 bad input.
    Eval(EvalArgs),
    /// Rego policy tools.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Write a new CA and a serving certificate as PEM: ca.crt, tls.crt, tls.key.
    Certs(CertsArgs),
}

#[derive(Args)]
struct RuleArgs {
    /// Config file (YAML). Default: built-in defaults.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory of policy templates (*.yaml StackL templates, *.rego). Default: ./policies if it exists.
    #[arg(long, value_name = "DIR")]
    policies_dir: Option<PathBuf>,
}

#[derive(Args)]
struct EvalArgs {
    /// Namespace objects (YAML or JSON, a v1 List or several documents). A namespace not in the
    /// file has no labels.
    #[arg(long, value_name = "FILE")]
    namespaces_file: PathBuf,
    #[command(flatten)]
    rules: RuleArgs,
    /// Which webhook decides.
    #[arg(long, value_enum)]
    webhook: Webhook,
    /// For manifests: the namespace to create them in (default: metadata.namespace, else "default").
    #[arg(long)]
    namespace: Option<String>,
    /// AdmissionReview or manifest file; `-` reads standard input.
    #[arg(default_value = "-", value_name = "FILE|-")]
    input: String,
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Run every `test_*` rule in the `*_test.rego` files; exits non-zero on any failure.
    Test {
        /// Directory of policies and their tests.
        #[arg(long, value_name = "DIR", default_value = DEFAULT_POLICIES_DIR)]
        policies_dir: PathBuf,
    },
}

#[derive(Args)]
struct CertsArgs {
    /// Directory to write ca.crt, tls.crt and tls.key into (created if missing).
    #[arg(long, value_name = "DIR")]
    out_dir: PathBuf,
    /// DNS subject alternative name of the serving certificate (repeatable).
    #[arg(long = "dns-name", value_name = "NAME")]
    dns_names: Vec<String>,
    /// IP subject alternative name of the serving certificate (repeatable).
    #[arg(long = "ip", value_name = "ADDR")]
    ips: Vec<IpAddr>,
    /// Validity of the serving certificate in days (the CA gets ten times as long).
    #[arg(long, default_value_t = 365)]
    days: u32,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("poolguard: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Eval(args) => {
            let sources = Sources {
                config: args.rules.config,
                policies_dir: args.rules.policies_dir,
            };
            let rules = sources.load()?;
            let namespaces = namespaces::load_file(&args.namespaces_file)?;
            let text = documents::read(&args.input)?;
            let origin = if args.input == "-" {
                "<stdin>"
            } else {
                &args.input
            };
            let mut stdout = std::io::stdout().lock();
            let allowed = eval::run(
                args.webhook,
                &text,
                origin,
                args.namespace.as_deref(),
                &namespaces,
                &rules,
                &mut stdout,
            )?;
            Ok(if allowed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Policy(PolicyCommand::Test { policies_dir }) => {
            let (templates, tests) = template::load_dir(&policies_dir)?;
            if tests.is_empty() {
                anyhow::bail!("{}: no *_test.rego files", policies_dir.display());
            }
            let results = rego_tests::run(&templates, &tests)?;
            let failed = results.iter().filter(|r| r.failure.is_some()).count();
            for r in &results {
                match &r.failure {
                    None => println!("PASS {}", r.name),
                    Some(why) => println!("FAIL {}: {why}", r.name),
                }
            }
            println!("{} passed, {failed} failed", results.len() - failed);
            Ok(if failed == 0 && !results.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Certs(args) => {
            let bundle = certs::serving_bundle(&args.dns_names, &args.ips, args.days)?;
            bundle
                .write(&args.out_dir)
                .with_context(|| "writing certificates")?;
            eprintln!(
                "wrote {}/ca.crt, tls.crt, tls.key (serving certificate valid {} days)",
                args.out_dir.display(),
                args.days
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
