fn main() -> std::process::ExitCode {
    // Logs go to stderr, filtered by RUST_LOG (default: warnings), e.g.
    // `RUST_LOG=info uroce perf ...` shows the AF_XDP bind mode and the attach mode.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).init();
    match uroce::cli::run() {
        Ok(code) => code,
        Err(e) => match uroce::cli::failure_lines(&e) {
            // stdout was closed by its reader (`uroce pcap x | head`): end quietly, with success.
            None => std::process::ExitCode::SUCCESS,
            Some(lines) => {
                for l in lines {
                    eprintln!("uroce: {l}");
                }
                std::process::ExitCode::from(2)
            }
        },
    }
}
