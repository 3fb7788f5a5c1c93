//! The `poolguard` binary: see `poolguard --help`.

/// mimalloc instead of the C library's allocator: Rego evaluation allocates and frees many
/// small values per request (numbers: bench/README.md, "Remembered results and the allocator").
/// Built without transparent huge pages (feature `no_thp`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's options, by their place in `mi_option_t` (mimalloc.h; the sys crate names no
/// constant for these two), with the defaults they have when nobody set them.
const ARENA_EAGER_COMMIT: (libmimalloc_sys::mi_option_t, std::ffi::c_long) = (4, 2);
const PURGE_DELAY: (libmimalloc_sys::mi_option_t, std::ffi::c_long) = (15, 1000);

/// Commits arena memory as it is used and gives freed pages back at once. With mimalloc's
/// defaults a busy server held about twice the resident memory of the C library's allocator
/// (61 against 33 MiB after 8 s of all-distinct /validate load, 10,000 namespaces), half of
/// the chart's 128 MiB limit; with these and `no_thp` it holds what the C library's does.
/// Done only while both options still have their defaults: when they do not, the
/// `MIMALLOC_*` environment set them (and wins), or the option numbering changed.
fn tune_allocator() {
    // SAFETY: mi_option_get and mi_option_set are plain reads and stores of mimalloc's option
    // table, callable at any time; the options only steer how later allocations get and
    // return memory.
    unsafe {
        use libmimalloc_sys::{mi_option_get, mi_option_set};
        if mi_option_get(ARENA_EAGER_COMMIT.0) == ARENA_EAGER_COMMIT.1
            && mi_option_get(PURGE_DELAY.0) == PURGE_DELAY.1
        {
            mi_option_set(ARENA_EAGER_COMMIT.0, 0);
            mi_option_set(PURGE_DELAY.0, 0);
        }
    }
}

fn main() -> std::process::ExitCode {
    tune_allocator();
    poolguard::cli::main()
}
