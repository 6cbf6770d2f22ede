//! The `arrival` binary: parses the command line, runs it with [`arrival::cli::run`] and
//! exits with its status (`arrival --help` lists them: 0 as expected, 1 not as expected,
//! 2 bad input, 3 a failing environment).

/// The model checker allocates and frees a receiver per explored step: mimalloc's
/// thread-local free lists make that markedly cheaper than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> arrival::cli::Exit {
    arrival::cli::run(arrival::cli::parse())
}
