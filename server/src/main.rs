fn main() -> std::process::ExitCode {
    hunkgate::cli::main()
}
