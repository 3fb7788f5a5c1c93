//! The `poolguard` binary: see `poolguard --help`.

#![forbid(unsafe_code)]

/// mimalloc instead of the C library's allocator: Rego evaluation allocates and frees many
/// small values per request (numbers: bench/README.md, "Remembered results and the allocator").
/// Built without transparent huge pages (feature `no_thp`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc reads its settings once, before `main`, so they are given by restarting this
/// program in place (`exec`: same process id, arguments and the rest of the environment) with
/// [`poolguard::allocator::SETTINGS`] set, unless the environment already sets any `MIMALLOC_*`
/// variable: then the operator's choice stands. Nothing is written into mimalloc's option table.
fn tune_allocator() {
    use std::os::unix::process::CommandExt;
    if poolguard::allocator::set_by_environment() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    let error = command
        .args(args)
        .envs(poolguard::allocator::SETTINGS)
        .exec();
    eprintln!(
        "poolguard: cannot restart itself with the allocator's settings ({error}); mimalloc's defaults apply"
    );
}

fn main() -> std::process::ExitCode {
    tune_allocator();
    poolguard::cli::main()
}
