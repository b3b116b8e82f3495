fn main() -> std::process::ExitCode {
    hunkwise::cli::main()
}
