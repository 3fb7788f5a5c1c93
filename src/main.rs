//! The `poolguard` binary: see `poolguard --help`.

fn main() -> std::process::ExitCode {
    poolguard::cli::main()
}
