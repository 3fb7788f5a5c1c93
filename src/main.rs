//! The `poolguard` binary: see `poolguard --help`.

/// mimalloc instead of the C library's allocator: Rego evaluation allocates and frees many
/// small values per request, and musl's allocator (the container image's) is slow at that
/// (numbers: bench/README.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    poolguard::cli::main()
}
